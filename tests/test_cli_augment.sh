#!/usr/bin/env bash
# test_cli_augment.sh: `vktrain train --augment` end to end on a Fashion-MNIST subset with a model
# of images ([1, 28, 28]): the augmented run is reproducible bit for bit from its seed, differs
# from the plain one, resumes midway bit for bit; its evaluation is of the test set as it is
# (eval of the checkpoint gives the accuracy training reported); the augmentation is in the
# checkpoint's metadata; flat inputs and bad flags are clear errors. The exact crops and flips
# are checked in test_data. Args: VKTRAIN_BINARY SOURCE_DIR
set -uo pipefail
bin=$1 src=$2
. "$(dirname "$0")/check.bash" # fails, check NAME STATUS
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
img=$work/img_mlp.json
cat > "$img" <<'JSON'
{"name": "img_mlp", "input": [1, 28, 28],
 "layers": [{"type": "flatten"}, {"type": "dense", "units": 32}, {"type": "relu"},
            {"type": "dense", "units": 10}],
 "loss": "softmax_cross_entropy"}
JSON
run="--model $img --limit-train 640 --limit-test 500 --batch 64 --epochs 2 --seed 5 --quiet --device llvmpipe"

"$bin" train $run --augment crop,flip --json --save "$work/a.safetensors" > "$work/a.json"
check "train --augment crop,flip" $?
"$bin" train $run --augment crop,flip --no-eval --save "$work/a2.safetensors"
check "the same run again" $?
same_tensors "$work/a.safetensors" "$work/a2.safetensors"; check "the same seed gives the same parameters, bit for bit" $?
for i in 1 2; do "$bin" train ${run/llvmpipe/swiftshader} --augment crop,flip --no-eval --save "$work/ss$i.safetensors"; done
check "train --augment crop,flip on SwiftShader" $?
same_tensors "$work/ss1.safetensors" "$work/ss2.safetensors"; check "SwiftShader: the same seed gives the same parameters" $?
"$bin" train $run --no-eval --save "$work/plain.safetensors"
check "the same run without --augment" $?
! same_tensors "$work/a.safetensors" "$work/plain.safetensors"; check "augmentation changes the training" $?
"$bin" train $run --augment crop,flip --seed 6 --no-eval --save "$work/seed6.safetensors"
! same_tensors "$work/a.safetensors" "$work/seed6.safetensors"; check "another seed, other crops and flips" $?
acc=$(jfield "$work/a.json" test_accuracy)
"$bin" eval --model "$img" --init "$work/a.safetensors" --limit-test 500 --batch 64 --device llvmpipe --json > "$work/eval.json"
acc2=$(jfield "$work/eval.json" test_accuracy)
[ -n "$acc" ] && [ "$acc" = "$acc2" ]; check "the test set is not augmented: eval gives training's accuracy ($acc = $acc2)" $?
python3 -c "import sys; sys.exit(0 if $acc > 0.3 else 1)"; check "an augmented run learns: test accuracy $acc > 0.3 (chance: 0.1)" $?
python3 - "$work/a.safetensors" <<'PY'; check "the augmentation is in the checkpoint's metadata" $?
import json, struct, sys
d = open(sys.argv[1], "rb").read(); m = json.loads(d[8:8 + struct.unpack("<Q", d[:8])[0]])["__metadata__"]
sys.exit(0 if m.get("augment") == "crop,flip" and m.get("augment_pad") == "4" else 1)
PY
"$bin" train $run --augment crop --augment-pad 2 --no-eval --save "$work/crop.safetensors"; check "--augment crop --augment-pad 2 trains" $?
! same_tensors "$work/crop.safetensors" "$work/plain.safetensors"; check "crops change the training" $?
"$bin" train $run --augment flip --no-eval --save "$work/flip.safetensors"; check "--augment flip trains" $?
! same_tensors "$work/flip.safetensors" "$work/plain.safetensors"; check "flips change the training" $?

# Resume midway (shuffled, augmented, 20 steps): bit for bit the uninterrupted run.
"$bin" train $run --augment crop,flip --no-eval --max-steps 13 --save "$work/part.safetensors"; check "run stopped at step 13" $?
"$bin" train $run --augment crop,flip --no-eval --resume "$work/part.safetensors" --save "$work/part.safetensors"; check "resumed" $?
same_tensors "$work/a.safetensors" "$work/part.safetensors"; check "resume = uninterrupted, bit for bit" $?

expect_error "--augment on flat inputs" "needs samples shaped \[C, H, W\].*not \[784\]" train --model "$src/assets/models/tiny_mlp.json" --limit-train 64 --epochs 1 --device llvmpipe --augment flip
expect_error "--augment foo" "--augment is crop,flip, crop, flip or none" train --augment foo
expect_error "--augment crop,crop" "--augment is crop,flip" train --augment crop,crop
expect_error "--augment crop," "--augment is crop,flip" train --augment crop,
expect_error "--augment ''" "--augment is crop,flip" train --augment ""
expect_error "--augment-pad 0" "--augment-pad wants a whole number from 1" train --augment crop --augment-pad 0
expect_error "--augment-pad without crop" "--augment-pad is the padding of --augment crop" train --augment flip --augment-pad 2

echo "test_cli_augment: $fails failed"
[ $fails -eq 0 ]
