#!/usr/bin/env bash
# test_cli_zero.sh: `--shard-optimizer` (replicated with its optimizer state sharded, ZeRO-1) from
# the command line. fashion_mlp with AdamW: a run sharded over three lavapipe devices stops at
# step 7 with every device's peak memory the plan's figure for it (below plain replicated's),
# and its checkpoint resumes on one device and sharded over lavapipe + SwiftShader, both ending
# within test_parallel's tolerance of an uninterrupted single-device run. `plan` shows the
# sharded row (text and JSON: optimizer state per device about a third, more bytes moved a step)
# and recommends it where only it fits or the flag asks; `bench train` takes the flag; other
# strategies refuse it. Args: VKTRAIN_BINARY SOURCE_DIR
set -uo pipefail
bin=$1 src=$2
. "$(dirname "$0")/check.bash" # fails, check NAME STATUS
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The matmul tuner's scratch stays out of the peaks (it borrows what the limit leaves).
export VKT_TUNE=off
model=$src/assets/models/fashion_mlp.json
three=llvmpipe,llvmpipe,llvmpipe
common="--model $model --limit-train 640 --batch 64 --epochs 2 --seed 7 --quiet --no-eval --optimizer adamw --lr 0.002 --clip 1"

"$bin" train $common --device llvmpipe --save "$work/full.safetensors"
check "uninterrupted single-device run" $?
"$bin" train $common --device llvmpipe --max-steps 7 --save "$work/s7.safetensors"
check "single-device run stopped at step 7" $?
"$bin" train $common --device $three --strategy replicated --shard-optimizer --max-steps 7 \
    --save "$work/part.safetensors" --json > "$work/part.json"
check "replicated --shard-optimizer over three devices, stopped at step 7" $?
"$bin" plan --model "$model" --batch 64 --optimizer adamw --device $three --shard-optimizer --json > "$work/plan3.json"
check "plan --shard-optimizer over three devices" $?
python3 - "$work/part.json" "$work/plan3.json" <<'PY'; check "every device's peak is the plan's sharded figure, below plain replicated's" $?
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
p = json.load(open(sys.argv[2]))
s = {x["strategy"]: x for x in p["strategies"]}
z, plain = s["replicated+shard-optimizer"], s["replicated"]
assert z["shard_optimizer"] and not plain["shard_optimizer"] and z["fits"], z
assert r["steps"] == 7 and r["strategy"] == "replicated", r
for d, zd, pd in zip(r["devices"], z["devices"], plain["devices"]):
    print("%s: peak %d bytes, plan %d (plain %d); optimizer %d of %d bytes" % (d["device"],
          d["peak_memory_bytes"], zd["bytes_needed"], pd["bytes_needed"], zd["optimizer_bytes"],
          pd["optimizer_bytes"]))
    assert d["peak_memory_bytes"] == zd["bytes_needed"] < pd["bytes_needed"], (d, zd, pd)
    assert 0.3 * pd["optimizer_bytes"] <= zd["optimizer_bytes"] <= 0.35 * pd["optimizer_bytes"], (zd, pd)
    assert zd["bytes_communicated_per_step"] > pd["bytes_communicated_per_step"] > 0, (zd, pd)
assert p["recommended"] == "replicated+shard-optimizer", p["recommended"]
PY
# The checkpoint holds whole tensors (the single-device run's at the same step, optimizer state
# included), and resumes on one device and sharded over two others.
close_tensors "$work/part.safetensors" "$work/s7.safetensors" &&
    close_tensors "$work/part.optim-s7.safetensors" "$work/s7.optim-s7.safetensors"
check "the sharded checkpoint at step 7 = the single-device one, optimizer state whole" $?
"$bin" train $common --device llvmpipe --resume "$work/part.safetensors" --save "$work/r1.safetensors"
check "the sharded checkpoint resumes on one device" $?
close_tensors "$work/r1.safetensors" "$work/full.safetensors" &&
    close_tensors "$work/r1.optim-s20.safetensors" "$work/full.optim-s20.safetensors"
check "resumed on one device = uninterrupted, within tolerance" $?
"$bin" train $common --device llvmpipe,swiftshader --strategy replicated --shard-optimizer \
    --resume "$work/part.safetensors" --save "$work/r2.safetensors"
check "the sharded checkpoint resumes sharded over llvmpipe,swiftshader" $?
close_tensors "$work/r2.safetensors" "$work/full.safetensors" &&
    close_tensors "$work/r2.optim-s20.safetensors" "$work/full.optim-s20.safetensors"
check "resumed sharded on two devices = uninterrupted, within tolerance" $?

# plan: the sharded row in text; without the flag plain replicated is recommended where it fits,
# with it the sharded row; under a limit only the sharded replica meets, the sharded row.
"$bin" plan --model "$model" --batch 64 --optimizer adamw --device llvmpipe,llvmpipe > "$work/plan.txt"
check "plan on two devices" $?
grep -q "^replicated --shard-optimizer: fits" "$work/plan.txt" && grep -q "moves .* MiB a step" "$work/plan.txt" \
    && grep -q "^recommended: replicated: " "$work/plan.txt"
check "plan prints the sharded row; plain replicated recommended where it fits" $?
"$bin" plan --model "$model" --batch 64 --optimizer adamw --device llvmpipe,llvmpipe --shard-optimizer > "$work/plan.txt"
grep -q "^recommended: replicated+shard-optimizer: asked for by --shard-optimizer" "$work/plan.txt"
check "plan --shard-optimizer recommends the sharded row" $?
"$bin" plan --model "$model" --batch 64 --optimizer adamw --device $three --mem-limit 9M > "$work/plan.txt"
cat "$work/plan.txt" | tail -1
grep -q "^replicated: does NOT fit" "$work/plan.txt" && grep -q "^recommended: replicated+shard-optimizer: a whole replica does not fit" "$work/plan.txt"
check "under 9M only the sharded replica fits, and it is recommended" $?
"$bin" train $common --device $three --strategy replicated --shard-optimizer --mem-limit 9M --max-steps 2
check "and it trains under 9M" $?

"$bin" bench train --model "$model" --batch 64 --optimizer adamw --device llvmpipe,llvmpipe --strategy replicated \
    --shard-optimizer --steps 2 --json > "$work/bench.txt"
check "bench train --shard-optimizer" $?
grep -q "replicated --shard-optimizer on" "$work/bench.txt" && [ "$(jfield "$work/bench.txt" shard_optimizer)" = True ]
check "bench train names the sharded optimizer" $?

expect_error "--shard-optimizer with --strategy layers" "--shard-optimizer applies to --strategy replicated" \
    train $common --device llvmpipe,llvmpipe --strategy layers --shard-optimizer
expect_error "--shard-optimizer on one device" "--shard-optimizer applies to --strategy replicated.*not to --strategy single" \
    train $common --device llvmpipe --shard-optimizer
exit $((fails > 0))
