#!/usr/bin/env bash
# test_cli_bench.sh: `vktrain bench matmul` on lavapipe and SwiftShader: a tiny run (sizes 64 and
# 128, 2 reps) whose JSON must name each device, its driver, API version and vendor id, give a
# positive peak FMA rate and, per size, the form, the variant, GFLOP/s consistent with the median
# time, the fraction of the peak and a passing spot check; the table output must print the command
# that reproduces it; bad options must fail. Args: VKTRAIN_BINARY SOURCE_DIR
set -uo pipefail
bin=$1
fails=0
check() { # check NAME CONDITION-STATUS
    if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

"$bin" bench matmul --sizes 64,128 --reps 2 --json --device lavapipe,swiftshader > "$out/bench.json"
check "bench matmul --json runs" $?
python3 - "$out/bench.json" <<'PY'; check "json: devices, drivers, versions, vendor ids, results" $?
import json, sys
lines = [l for l in open(sys.argv[1]) if l.strip()]
assert len(lines) == 1, f"want one JSON line, got {len(lines)}"
o = json.loads(lines[0])
assert o["benchmark"] == "matmul"
assert o["command"].startswith("vktrain bench matmul") and "--sizes 64,128" in o["command"]
devs = o["devices"]
assert [d["name"].split()[0] for d in devs] == ["llvmpipe", "SwiftShader"], [d["name"] for d in devs]
assert devs[0]["vendor_id"] == 0x10005 and devs[1]["vendor_id"] == 0x1ae0
for d in devs:
    for k in ("name", "driver", "api_version", "vendor_id", "device_id", "peak_gflops", "results"):
        assert k in d, f"missing {k} in {d['name']}"
    assert d["api_version"].count(".") == 2 and d["driver"]
    assert d["peak_gflops"] > 0, d["peak_gflops"]
    assert [r["size"] for r in d["results"]] == [64, 128], d["results"]
    for r in d["results"]:
        assert r["M"] == r["N"] == r["K"] == r["size"]
        assert r["form"] == "NN" and r["variant"] and r["reps"] == 2
        assert r["check_ok"] is True and 0 <= r["check_max_err"] <= 1, r
        assert r["gflops"] > 0 and r["median_ms"] >= r["best_ms"] > 0
        flops = 2.0 * r["size"] ** 3
        assert abs(r["gflops"] - flops / (r["median_ms"] * 1e6)) <= 1e-6 * r["gflops"], r
        assert abs(r["fraction_of_peak"] - r["gflops"] / d["peak_gflops"]) <= 1e-9, r
# lavapipe has the wide kernel for 128 (a multiple of 8); SwiftShader its own (matmul_ss.glsl).
assert devs[0]["results"][1]["variant"].startswith("wide"), devs[0]["results"]
assert devs[1]["results"][1]["variant"].startswith("ss-"), devs[1]["results"]
PY

# The table: one line per size, and the command that reproduces it.
"$bin" bench matmul --sizes 64 --reps 1 --device lavapipe > "$out/table"; check "bench matmul table runs" $?
grep -q 'peak fp32 FMA rate' "$out/table" && grep -Eq '^ +64 NN ' "$out/table" \
    && grep -q '^reproduce: vktrain bench matmul --sizes 64 --reps 1 --form NN --device lavapipe' "$out/table"
check "table: peak, size line, reproduce line" $?
cat "$out/table"

# Bad options fail with a message and a non-zero status.
"$bin" bench matmul --sizes 0 > /dev/null 2> "$out/err"; rc=$?
[ $rc -eq 2 ] && grep -q -- '--sizes' "$out/err"; check "bad --sizes" $?
"$bin" bench matmul --reps 0 > /dev/null 2> "$out/err"; rc=$?
[ $rc -eq 2 ] && grep -q -- '--reps' "$out/err"; check "bad --reps" $?
"$bin" bench matmul --device nosuchgpu > /dev/null 2> "$out/err"; rc=$?
[ $rc -ne 0 ] && grep -q 'matches no device' "$out/err"; check "bad --device" $?
"$bin" bench > /dev/null 2> "$out/err"; rc=$?
[ $rc -eq 2 ] && grep -q 'bench matmul' "$out/err"; check "bench without a subject" $?
"$bin" --help | grep -q 'bench matmul'; check "--help lists bench matmul" $?

echo "test_cli_bench: $fails failed"
[ $fails -eq 0 ]
