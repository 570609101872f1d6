#!/usr/bin/env bash
# test_cli_bench_suite.sh: `vktrain bench suite --quick` on lavapipe and on SwiftShader, and the
# result file it writes (docs/COMPARING.md, "Result format (version 1)"): its format and version,
# the host (as this machine is: tests/host_check.py) and the device, a positive peak FMA rate and
# memory bandwidth, matmul at 256 and 1024 below 1.5x the peak, and for each of fashion_mlp, fashion_cnn and char_gpt at least two
# measured batches (powers of two, rising) with samples/s > 0 that agree with the step time, at
# least 3 timed steps, a step split that sums to 1, an initial loss near ln(classes), and peak
# memory within the planner's figure (every product of every layer is listed and measured before
# the point, none inside it, whose scratch the plan would leave out), and a saturation entry per
# model; no validation
# message. With --mem-limit 8M every sweep ends early with fits:false and the reason (char_gpt at
# batch 1), the peak memory of every point within the limit, and on a terminal the progress
# line is overwritten. A crash while the file is written leaves the previous file whole.
# Refused: a --device that selects two devices, no --out, --out naming a directory or a missing
# directory, an unknown option. Args: VKTRAIN_BINARY SOURCE_DIR
set -uo pipefail
bin=$1
. "$(dirname "$0")/check.bash" # fails, check NAME STATUS; expect_error
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

verify() { # verify FILE LABEL [MEM_LIMIT_BYTES]
    python3 "$(dirname "$0")/host_check.py" "$1" || return 1
    python3 - "$@" <<'PY'
import json, math, re, sys
path, label = sys.argv[1], sys.argv[2]
limit = int(sys.argv[3]) if len(sys.argv) > 3 else None
o = json.load(open(path))
assert o["format"] == "vktrain-bench-suite" and o["version"] == 1, (o["format"], o["version"])
assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", o["created"]), o["created"]
assert o["command"].startswith("vktrain bench suite ") and "--quick" in o["command"], o["command"]
assert o["quick"] is True and o["vktrain_version"] and o["elapsed_seconds"] > 0
h = o["host"]
assert h["os"].startswith("Linux ") and h["cpu"] and h["cores"] >= 1 and h["memory_bytes"] > 0, h
assert h["hostname"], h
d = o["device"]
assert d["label"] == label and d["name"].startswith(label), d
assert d["driver"] and d["api_version"].count(".") == 2 and d["type"] == "cpu", d
assert d["vendor_id"] == {"llvmpipe": 0x10005, "SwiftShader": 0x1ae0}[label], d
assert d["memory_bytes"] > 0 and d["mem_limit_bytes"] == limit, d
if o["validation"]:
    assert o["validation_messages"] == 0, o["validation_messages"]
peak, bw = o["peak"]["fma_gflops"], o["peak"]["bandwidth_gbs"]
assert peak > 0 and bw > 0, o["peak"]
assert [m["size"] for m in o["matmul"]] == [256, 1024], o["matmul"]
for m in o["matmul"]:
    assert m["form"] == "NN" and m["variant"] and m["median_ms"] > 0, m
    assert 0 < m["gflops"] <= 1.5 * peak, (m, peak)
    assert abs(m["gflops"] - 2 * m["size"] ** 3 / (m["median_ms"] * 1e6)) <= 1e-6 * m["gflops"], m
    assert 0 < m["fraction_of_peak"] and 0 <= m["check_max_err"] <= 1, m
models = ["fashion_mlp", "fashion_cnn", "char_gpt"]
classes = {"fashion_mlp": 10, "fashion_cnn": 10, "char_gpt": 256}
sat = {s["model"]: s for s in o["saturation"]}
sweeps = {s["model"]: s for s in o["sweeps"]}
assert sorted(sweeps) == sorted(models), sweeps
tuned_in_point = []
for name in models:
    pts = [t for t in o["train"] if t["model"] == name]
    fit = [t for t in pts if t["fits"]]
    nofit = [t for t in pts if not t["fits"]]
    batches = [t["batch"] for t in pts]
    assert batches == sorted(set(batches)) and all(b & (b - 1) == 0 for b in batches), batches
    assert pts and all(t["parameters"] > 0 and t["flops_per_sample"] > 0 for t in pts), pts
    assert all(t["planned_bytes"] > 0 for t in pts), pts
    # Only the last entry of a sweep may not fit, and only when the sweep ended there.
    assert len(nofit) <= 1 and (not nofit or pts[-1] is nofit[0]), batches
    assert (sweeps[name]["end"] == "does not fit") == bool(nofit), sweeps[name]
    if nofit:
        assert re.match(r"needs [0-9.]+ MiB .*the device has [0-9.]+ MiB", nofit[0]["reason"]), nofit
        if limit:
            assert nofit[0]["planned_bytes"] > limit, nofit
    if limit is None:
        assert len(fit) >= 2, (name, batches)
    assert sweeps[name]["points"] == len(fit), sweeps[name]
    for t in fit:
        B = t["batch"]
        assert t["steps"] >= 3 and t["samples_per_sec"] > 0 and t["step_ms"] > 0, t
        assert abs(t["samples_per_sec"] - B / (t["step_ms"] * 1e-3)) <= 1e-6 * t["samples_per_sec"], t
        parts = [t["split"][k] for k in ("matmul", "attention", "other_kernels", "communication",
                                         "host_and_idle")]
        assert all(0 <= p <= 1 for p in parts) and abs(sum(parts) - 1) < 1e-6, t["split"]
        assert t["split"]["matmul"] > 0 and t["split"]["communication"] == 0, t["split"]
        assert (t["split"]["attention"] > 0) == (name == "char_gpt"), t["split"]
        assert abs(t["initial_loss"] - math.log(classes[name])) < 1, t
        if name == "char_gpt":
            assert abs(t["tokens_per_sec"] - 128 * t["samples_per_sec"]) <= 1e-6 * t["tokens_per_sec"], t
        assert 0 < t["peak_memory_bytes"] <= d["memory_bytes"], t
        if limit:
            assert t["peak_memory_bytes"] <= limit, t
        if t["shapes_measured_in_point"] == 0:
            assert t["peak_memory_bytes"] <= t["planned_bytes"], t
        else:
            tuned_in_point.append(f"{name} batch {B}: {t['shapes_measured_in_point']} products "
                                  f"measured in the point, peak {t['peak_memory_bytes']} B over "
                                  f"the plan's {t['planned_bytes']} B")
    # every layer lists every product of its step (attention its six): nothing is left to the point
    assert all(t["shapes_measured_in_point"] == 0 for t in fit), fit
    if fit:
        best = max(fit, key=lambda t: t["samples_per_sec"])
        first = next(t for t in fit if t["samples_per_sec"] >= 0.9 * best["samples_per_sec"])
        s = sat[name]
        assert s["batch"] == first["batch"] and s["samples_per_sec"] == first["samples_per_sec"], s
        assert s["best_batch"] == best["batch"] and "10%" in s["rule"], s
    else:
        assert name not in sat, sat
for line in tuned_in_point:
    print("  (not a failure)", line)
PY
}

for dev in lavapipe swiftshader; do
    label=$([ $dev = lavapipe ] && echo llvmpipe || echo SwiftShader)
    start=$(date +%s)
    "$bin" bench suite --device $dev --quick --out "$work/$dev.json" > "$work/out" 2> "$work/err"
    check "bench suite --quick on $dev runs ($(($(date +%s) - start)) s)" $?
    ! grep -qi "validation" "$work/err"; check "bench suite on $dev: no validation message" $?
    grep -q "^bench suite: $label (quick): [0-9]* s, results in $work/$dev.json\$" "$work/out"
    check "bench suite on $dev: says where the results are" $?
    # not a terminal: one summary line per model (and one for the fixed measurements), no \r
    [ "$(grep -c '^bench suite: \(fashion_mlp\|fashion_cnn\|char_gpt\): batches ' "$work/err")" = 3 ] &&
        ! grep -q $'\r' "$work/err"
    check "bench suite on $dev: one summary line per model on stderr" $?
    verify "$work/$dev.json" "$label"; check "bench suite on $dev: the result file" $?
done

# A limit that ends every sweep early: fashion_mlp at 256, fashion_cnn at 16, char_gpt at 1. On a
# terminal (script(1) gives one) the point lines are overwritten with \r.
if command -v script > /dev/null; then
    script -qec "'$bin' bench suite --device lavapipe --quick --mem-limit 8M --out '$work/lim.json'" \
        /dev/null > "$work/tty" 2>&1
    check "bench suite --mem-limit 8M runs on a terminal" $?
    grep -q $'\r\033\\[Kbench suite: fashion_mlp batch 16: ' "$work/tty"
    check "on a terminal each point overwrites the line" $?
else
    "$bin" bench suite --device lavapipe --quick --mem-limit 8M --out "$work/lim.json" \
        > "$work/out" 2> "$work/err"
    check "bench suite --mem-limit 8M runs" $?
fi
verify "$work/lim.json" llvmpipe 8388608; check "--mem-limit 8M: the result file" $?
python3 - "$work/lim.json" <<'PY'; check "--mem-limit 8M: every sweep ends early with fits:false" $?
import json, sys
o = json.load(open(sys.argv[1]))
last = {}
for t in o["train"]:
    last[t["model"]] = t
want = {"fashion_mlp": 256, "fashion_cnn": 16, "char_gpt": 1}
assert {m: (t["batch"], t["fits"]) for m, t in last.items()} == {m: (b, False) for m, b in want.items()}, last
assert all(s["end"] == "does not fit" for s in o["sweeps"]), o["sweeps"]
assert [s["model"] for s in o["saturation"]] == ["fashion_mlp", "fashion_cnn"], o["saturation"]
PY

# compare of the two drivers' quick results (the issue's CI line): it draws every picture, and the
# pictures show the data (tests/compare_check.py: axes, one curve per device in its colour, each
# point's pixel mapped back through its axis equal to the JSON's value, capacity and peak lines;
# the tables equal the JSON).
"$bin" compare "$work/lavapipe.json" "$work/swiftshader.json" --png "$work/png" \
    --layout "$work/layout.json" > "$work/compare.txt" 2> "$work/err"
rc=$?; check "compare of the two quick results $(head -c 200 "$work/err")" $rc
python3 "$(dirname "$0")/compare_check.py" check "$work/compare.txt" "$work/png" "$work/layout.json" \
    "$work/lavapipe.json" "$work/swiftshader.json"
check "compare's pictures and tables show the two quick results" $?

# Written atomically: a crash after 100 bytes of the file leaves the previous one as it was.
# (No disk caches in that run, so that the result is the first file it writes.)
cp "$work/lim.json" "$work/keep.json"
{ # (the braces keep the shell's "Killed" off the test's output)
    VKT_CACHE_DIR=off VKT_TEST_CRASH_AFTER_BYTES=100 "$bin" bench suite --device lavapipe --quick \
        --mem-limit 1M --out "$work/keep.json" > "$work/out" 2> "$work/err"
} 2> /dev/null
rc=$?
[ $rc -eq 137 ] && cmp -s "$work/lim.json" "$work/keep.json"
check "a crash while the result is written leaves the previous file (exit $rc)" $?

expect_error "a --device selecting two devices is refused" "one device per run" \
    bench suite --device lavapipe,swiftshader --quick --out "$work/two.json"
expect_error "no --out is refused" "--out RESULTS.json is required" bench suite --quick
expect_error "--out naming a directory is refused" "not a regular file" bench suite --out "$work"
expect_error "--out in a missing directory is refused" "does not exist" \
    bench suite --out "$work/no/such/r.json"
expect_error "an unknown option is refused" "not an option of bench suite" bench suite --fast
[ ! -e "$work/two.json" ]; check "a refused run writes no file" $?

echo "test_cli_bench_suite: $fails failure(s)"
[ "$fails" -eq 0 ]
