#!/usr/bin/env bash
# test_cli_parallel.sh: several devices from the command line. A model of 53.6 million parameters
# (assets/models/big_mlp.json) under a per-device --mem-limit below one replica: `plan` says so
# and recommends layers, `--strategy replicated` refuses with the sizes and the way out, and
# `--strategy layers` over three devices trains it with every device's peak under the limit.
# gpt2_small.json: `plan` gives every strategy's bytes per device at batch 8 (nothing fits three 2 GiB
# devices) and 1 (three stages do). Also the flag errors of the strategies.
# Args: VKTRAIN_BINARY SOURCE_DIR
set -uo pipefail
bin=$1 src=$2
. "$(dirname "$0")/check.bash" # fails, check NAME STATUS
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
big=$src/assets/models/big_mlp.json
fashion=$src/assets/models/fashion_mlp.json
three=llvmpipe,llvmpipe,llvmpipe

"$bin" plan --model "$big" --device $three --mem-limit 300M --batch 8 --json > "$work/plan.json"
check "plan for big_mlp under 300M" $?
python3 - "$work/plan.json" <<'PY'; check "plan: replica does not fit, layers fits, layers recommended" $?
import json, sys
p = json.load(open(sys.argv[1]))
assert p["parameters"] >= 40_000_000, p["parameters"]
s = {x["strategy"]: x for x in p["strategies"]}
assert not s["replicated"]["fits"] and s["layers"]["fits"], s
assert p["recommended"] == "layers", p["recommended"]
for d in s["layers"]["devices"]:
    assert d["bytes_needed"] <= d["bytes_available"], d
print("plan:", p["why"])
PY
# GPT-2 small's shape: every strategy with its bytes per device; at batch 8 nothing fits three
# 2 GiB devices, at batch 1 three stages do (and the stages hold the parameters once between them).
gpt2=$src/assets/models/gpt2_small.json
"$bin" plan --model "$gpt2" --device $three --batch 8 --json > "$work/gpt8.json"
check "plan for gpt2_small at batch 8 exits 1: nothing fits" "$([ $? -eq 1 ] && echo 0 || echo 1)"
"$bin" plan --model "$gpt2" --device $three --batch 1 --json > "$work/gpt1.json"
check "plan for gpt2_small at batch 1" $?
python3 - "$work/gpt8.json" "$work/gpt1.json" <<'PY'; check "plan gpt2_small: every strategy's bytes per device; batch 8 fits nowhere, batch 1 as layers" $?
import json, sys
p8, p1 = (json.load(open(f)) for f in sys.argv[1:3])
for p in (p8, p1):
    assert p["parameters"] == 163037184, p["parameters"]
    s = {x["strategy"]: x for x in p["strategies"]}
    assert set(s) >= {"single", "replicated", "layers"}, s.keys()
    for x in s.values():
        for d in x["devices"]:
            for k in ("parameters_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes"):
                assert d[k] > 0, (x["strategy"], k, d)
    # 4 bytes a parameter and VKT_NET_TENSOR_GUARD (256) free bytes after each of the 149
    # tensors (engine/include/vktrain/network.h), in one device or over the stages.
    assert s["single"]["devices"][0]["parameters_bytes"] == 4 * 163037184 + 256 * 149
    assert sum(d["parameters_bytes"] for d in s["layers"]["devices"]) == 4 * 163037184 + 256 * 149
a8 = {x["strategy"]: x for x in p8["strategies"]}["single"]["devices"][0]["activations_bytes"]
a1 = {x["strategy"]: x for x in p1["strategies"]}["single"]["devices"][0]["activations_bytes"]
assert 7 * a1 < a8 <= 8 * a1, (a1, a8)
assert p8["recommended"] == "none" and "lower --batch" in p8["why"], (p8["recommended"], p8["why"])
assert p1["recommended"] == "layers", (p1["recommended"], p1["why"])
print("plan gpt2_small, batch 1:", p1["why"])
PY
"$bin" plan --model "$fashion" --device llvmpipe,swiftshader > "$work/plan.txt"
check "plan for fashion_mlp on two devices" $?
grep -q "recommended: replicated" "$work/plan.txt"; check "a model that fits everywhere: replicated recommended" $?

"$bin" train --model "$big" --device $three --strategy replicated --mem-limit 300M --batch 8 > /dev/null 2> "$work/err"
rc=$?
cat "$work/err"
[ $rc -ne 0 ] && grep -q "MiB" "$work/err" && grep -q "llvmpipe" "$work/err" && grep -q -- "--strategy layers" "$work/err"
check "replicated refuses a model that does not fit, naming device, sizes and --strategy layers" $?

"$bin" train --model "$big" --device $three --strategy layers --mem-limit 300M --batch 8 --micro-batches 2 \
    --max-steps 2 --limit-train 16 --no-eval --quiet --json > "$work/big.json"
check "layers trains big_mlp over three devices under 300M each" $?
python3 - "$work/big.json" <<'PY'; check "every device's peak memory stays under the limit" $?
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert r["steps"] == 2 and r["strategy"] == "layers"
for d in r["devices"]:
    print("%s: peak %.1f MiB of %.1f MiB" % (d["device"], d["peak_memory_bytes"] / 2**20, d["memory_limit_bytes"] / 2**20))
    assert 0 < d["peak_memory_bytes"] <= d["memory_limit_bytes"] == 300 * 2**20, d
PY

"$bin" train --model "$big" --device $three --strategy layers --mem-limit 64M --batch 8 > /dev/null 2> "$work/err"
rc=$?; [ $rc -ne 0 ] && grep -q "even split" "$work/err"; ok=$? # (a $(...) in check's name would reset $?)
check "a model that fits nowhere says so: $(cat "$work/err")" $ok

# Balance and strategy flags.
"$bin" train --model "$fashion" --device llvmpipe,swiftshader --strategy replicated --balance 3,1 \
    --limit-train 256 --batch 64 --epochs 1 --no-eval --quiet --json > "$work/bal.json"
check "replicated --balance 3,1 on lavapipe + SwiftShader" $?
"$bin" train --model "$fashion" --device llvmpipe,llvmpipe --strategy replicated --balance auto \
    --limit-train 256 --batch 64 --epochs 1 --no-eval --quiet > /dev/null
check "replicated --balance auto" $?
expect_error() { # NAME PATTERN ARGS...
    local name=$1 pattern=$2; shift 2
    "$bin" "$@" > /dev/null 2> "$work/err"; local rc=$?
    if [ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -qi -- "$pattern" "$work/err"; then echo "ok   $name: $(cat "$work/err")"
    else echo "FAIL $name (exit $rc): $(cat "$work/err")"; fails=$((fails + 1)); fi
}
expect_error "single on two devices" "single" train --device llvmpipe,llvmpipe --strategy single
expect_error "replicated on one device" "two devices" train --device llvmpipe --strategy replicated --limit-train 64
expect_error "--split that does not add up" "split" train --device llvmpipe,llvmpipe --strategy layers --split 1,1 --limit-train 64
expect_error "--balance with the wrong count" "balance" train --device llvmpipe,llvmpipe --balance 1,2,3
expect_error "--schedule unknown" "gpipe or 1f1b" train --schedule zigzag
expect_error "--micro-batches above the batch" "micro-batches" train --device llvmpipe,llvmpipe --strategy layers --micro-batches 100 --batch 32 --limit-train 64
expect_error "--mem-limit nonsense" "size" train --mem-limit lots

echo "test_cli_parallel: $fails failed"
[ $fails -eq 0 ]
