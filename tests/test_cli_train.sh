#!/usr/bin/env bash
# test_cli_train.sh: `vktrain train` and `vktrain eval` end to end on Fashion-MNIST subsets:
# learning well above chance on lavapipe and on SwiftShader, checkpoint round trip, resume equal
# to an uninterrupted run (bit for bit), also from a --save-every checkpoint and after a SIGINT mid-run (exit 130, the checkpoint of
# the last step, whole metrics lines), a resume with another --batch, --seed or --lr refused, a
# checkpoint write killed midway, saving that touches no
# file it did not write (no other checkpoint's optimizer state, no symbolic link or FIFO at the
# target), a checkpoint that names a path outside its directory, and the clear errors
# bad input must get, among them runs that diverge (a loss 1000 times the first, a NaN loss, an
# update that overflows at the last step: stopped with the step and the tensor, metrics still
# JSON). Args: VKTRAIN_BINARY SOURCE_DIR
set -uo pipefail
bin=$1 src=$2
. "$(dirname "$0")/check.bash" # fails, check NAME STATUS
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model=$src/assets/models/fashion_mlp.json
small="--model $model --limit-train 3000 --limit-test 1000 --batch 64 --epochs 1 --quiet"


# 1. Learning on both drivers: one epoch on 3000 samples is well above chance (0.1).
for dev in llvmpipe swiftshader; do
    "$bin" train $small --device $dev --json --save "$work/$dev.safetensors" > "$work/$dev.json"
    check "train on $dev" $?
    acc=$(jfield "$work/$dev.json" test_accuracy)
    python3 -c "import sys; sys.exit(0 if $acc > 0.6 else 1)"; check "$dev: test accuracy $acc > 0.6" $?
    # Checkpoint round trip: eval of the saved parameters gives the accuracy training reported.
    "$bin" eval --model "$model" --init "$work/$dev.safetensors" --limit-test 1000 --batch 64 --device $dev --json > "$work/$dev.eval.json"
    check "eval on $dev" $?
    acc2=$(jfield "$work/$dev.eval.json" test_accuracy)
    [ "$acc" = "$acc2" ]; check "$dev: eval of the checkpoint gives the same accuracy ($acc2)" $?
done
# The same run on the two drivers: the same accuracy within 0.005.
a1=$(jfield "$work/llvmpipe.json" test_accuracy) a2=$(jfield "$work/swiftshader.json" test_accuracy)
python3 -c "import sys; sys.exit(0 if abs($a1 - $a2) <= 0.005 else 1)"; check "lavapipe $a1 vs SwiftShader $a2 within 0.005" $?

# 2. Resume equals an uninterrupted run, for SGD with momentum and for AdamW (shuffled batches).
# The uninterrupted run also keeps a checkpoint of step 13 (--save-every, {step} in the name):
# the parameters of the run stopped there, and resumable as that run's checkpoint is.
for opt in "--optimizer sgd" "--optimizer adamw --lr 0.002"; do
    tag=${opt// /_}
    common="--model $model --limit-train 640 --batch 64 --epochs 2 --seed 7 --quiet --no-eval $opt --device llvmpipe"
    mkdir "$work/full$tag"
    "$bin" train $common --save "$work/full$tag/s{step}.safetensors" --save-every 13; check "uninterrupted run ($opt)" $?
    # 10 steps an epoch: the ends of the two epochs (10, 20) and step 13, with their optimizer files.
    [ "$(cd "$work/full$tag" && ls | tr '\n' ' ')" = "s10.optim-s10.safetensors s10.safetensors s13.optim-s13.safetensors s13.safetensors s20.optim-s20.safetensors s20.safetensors " ]
    check "--save-every 13 with {step}: the checkpoints of steps 10, 13 and 20 ($opt)" $?
    "$bin" train $common --max-steps 13 --save "$work/part$tag.safetensors"; check "run stopped at step 13" $?
    same_tensors "$work/full$tag/s13.safetensors" "$work/part$tag.safetensors"
    check "--save-every's checkpoint of step 13 = the run stopped at 13, bit for bit ($opt)" $?
    "$bin" train $common --resume "$work/part$tag.safetensors" --save "$work/part$tag.safetensors"; check "resumed run" $?
    same_tensors "$work/full$tag/s20.safetensors" "$work/part$tag.safetensors"; check "resume = uninterrupted, bit for bit ($opt)" $?
    "$bin" train $common --resume "$work/full$tag/s13.safetensors" --save "$work/res$tag.safetensors"; check "run resumed from --save-every's checkpoint" $?
    same_tensors "$work/full$tag/s20.safetensors" "$work/res$tag.safetensors"; check "... = uninterrupted, bit for bit ($opt)" $?
done
expect_error "--save-every without --save is refused" "needs --save FILE.safetensors" \
    train --model "$model" --limit-train 640 --quiet --save-every 5
expect_error "--save-every 0 is refused" "--save-every wants a whole number from 1" \
    train --model "$model" --limit-train 640 --quiet --save-every 0 --save "$work/z.safetensors"
# Ctrl-C (SIGINT) mid-run: the step in flight ends, the checkpoint of that step is written, the
# metrics hold whole JSON lines, the exit status is 130 with a message, and --resume finishes the
# same training as the uninterrupted run (bit for bit).
common="--model $model --limit-train 3200 --batch 32 --epochs 2 --seed 7 --quiet --no-eval --optimizer sgd --device llvmpipe"
"$bin" train $common --save "$work/int_full.safetensors"; check "uninterrupted run of 200 steps" $?
"$bin" train $common --save "$work/int.safetensors" --metrics "$work/int.jsonl" 2> "$work/int.err" &
pid=$!
for _ in $(seq 600); do [ -f "$work/int.jsonl" ] && [ "$(wc -l < "$work/int.jsonl")" -ge 5 ] && break; sleep 0.05; done
kill -INT $pid; wait $pid; rc=$?
cat "$work/int.err"
[ $rc -eq 130 ] && grep -q "stopped by SIGINT after step [0-9]*; the checkpoint of that step is" "$work/int.err"
check "SIGINT: exit 130 and a message naming the checkpoint (exit $rc)" $?
python3 -c "import json,sys; [json.loads(l) for l in open(sys.argv[1])]" "$work/int.jsonl"
ok=$?
check "SIGINT: every metrics line is whole JSON ($(wc -l < "$work/int.jsonl") lines)" $ok
"$bin" train $common --resume "$work/int.safetensors" --save "$work/int.safetensors" --metrics "$work/int.jsonl"
check "the interrupted run resumes" $?
same_tensors "$work/int_full.safetensors" "$work/int.safetensors"
check "interrupted + resumed = uninterrupted, bit for bit" $?
# A resume is the same training: another --batch, --seed or --lr is refused.
expect_error "--resume with another --batch" "trained with batch 32; this run asks for 16" \
    train ${common/--batch 32/--batch 16} --resume "$work/int.safetensors"
expect_error "--resume with another --seed" "trained with seed 7; this run asks for 8" \
    train ${common/--seed 7/--seed 8} --resume "$work/int.safetensors"
expect_error "--resume with another --lr" "trained with lr 0.05.*this run asks for 0.1" \
    train $common --lr 0.1 --resume "$work/int.safetensors"
# A metrics file that cannot be written (a full disk: /dev/full) is an error, not exit 0.
expect_error "metrics on a full disk" "writing the metrics file /dev/full failed: No space left" \
    train --model "$src/assets/models/tiny_mlp.json" --limit-train 256 --batch 64 --epochs 1 \
    --no-eval --quiet --device llvmpipe --metrics /dev/full
n=$(ls "$work"/part--optimizer_sgd.optim-s*.safetensors 2> /dev/null | wc -l)
[ "$n" -eq 1 ]; check "one optimizer-state file beside the checkpoint, older ones removed ($n)" $?

# 3. A checkpoint write killed midway leaves the old checkpoint loadable and unchanged.
cp "$work/llvmpipe.safetensors" "$work/keep.safetensors"
VKT_TEST_CRASH_AFTER_BYTES=4096 "$bin" train $small --device llvmpipe --no-eval --save "$work/llvmpipe.safetensors" > /dev/null 2>&1
rc=$?
[ $rc -eq 137 ]; check "the writer was killed midway (exit $rc)" $?
cmp -s "$work/keep.safetensors" "$work/llvmpipe.safetensors"; check "the old checkpoint is unchanged" $?
"$bin" eval --model "$model" --init "$work/llvmpipe.safetensors" --limit-test 200 --device llvmpipe --quiet > /dev/null
check "the old checkpoint still loads" $?

# 3a. A writer killed after renaming its checkpoint, before removing the optimizer file it
# replaced (test_cli_interrupt met it at random, killing the final save): a run resumed from that
# checkpoint and saving to it removes that file, even with no step left to run (and so no save);
# files of other names stay.
ka=$work/killed-after
mkdir -p "$ka"
tiny_a="--model $src/assets/models/tiny_mlp.json --limit-train 256 --batch 64 --epochs 1 --quiet --no-eval --device llvmpipe"
"$bin" train $tiny_a --save "$ka/run.safetensors" > /dev/null; check "3a: a finished run's checkpoint" $?
own_a=$(cd "$ka" && ls run.optim-s*.safetensors)
cp "$ka/$own_a" "$ka/run.optim-s2.safetensors"       # the replaced file the killed writer left
cp "$ka/$own_a" "$ka/run.optim-s2.safetensors.bak"   # not a name a writer gives: kept
cp "$ka/$own_a" "$ka/other.optim-s2.safetensors"     # another checkpoint's: kept
"$bin" train $tiny_a --resume "$ka/run.safetensors" --save "$ka/run.safetensors" > /dev/null
check "3a: the finished run resumes (no step left)" $?
left=$(cd "$ka" && ls | tr '\n' ' ')
[ "$left" = "other.optim-s2.safetensors run.optim-s2.safetensors.bak $own_a run.safetensors " ]
check "3a: the replaced optimizer file is removed, the checkpoint's own and other names kept ($left)" $?

# 3b. Saving touches only the files it writes, and a checkpoint names only its own siblings.
ck=$work/own
mkdir -p "$ck"
tiny="--model $src/assets/models/tiny_mlp.json --limit-train 256 --batch 64 --epochs 1 --quiet --no-eval --device llvmpipe"
"$bin" train $tiny --save "$ck/base.safetensors" > /dev/null; check "a checkpoint with its optimizer state" $?
ls "$ck"/base.optim-s*.safetensors > "$work/own.before" 2> /dev/null
expect_error "--save without .safetensors is refused" "must end in .safetensors" train $tiny --save "$ck/base"
[ ! -e "$ck/base" ] && ls "$ck"/base.optim-s*.safetensors 2> /dev/null | cmp -s - "$work/own.before"
check "... and writes nothing, and removes no other checkpoint's optimizer state" $?
expect_error "--save with an optimizer file's name is refused" "name of an optimizer-state file" \
    train $tiny --save "$ck/base.optim-s9.safetensors"
# A checkpoint whose name begins like another's keeps the other's files.
"$bin" train $tiny --save "$ck/base.optim.safetensors" > /dev/null
ls "$ck"/base.optim-s*.safetensors 2> /dev/null | cmp -s - "$work/own.before"
check "saving base.optim.safetensors leaves base.safetensors' optimizer state" $?
# A symbolic link or a device node at the target is not replaced.
echo keep > "$work/elsewhere"
ln -s "$work/elsewhere" "$ck/link.safetensors"
expect_error "--save onto a symbolic link is refused" "not a regular file (a symbolic link)" \
    train $tiny --save "$ck/link.safetensors"
[ -L "$ck/link.safetensors" ] && [ "$(cat "$work/elsewhere")" = keep ]
check "... the link and its target are untouched" $?
mkfifo "$ck/fifo.safetensors"
expect_error "--save onto a FIFO is refused" "not a regular file (a device, FIFO or socket)" \
    train $tiny --save "$ck/fifo.safetensors"
# optimizer_state naming another path: refused before anything is opened.
python3 - "$ck/base.safetensors" "$ck/evil.safetensors" <<'PY'
import json, struct, sys
d = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", d[:8])[0]
h = json.loads(d[8:8 + n]); h["__metadata__"]["optimizer_state"] = "../../../../etc/passwd"
b = json.dumps(h).encode(); b += b" " * ((8 - (8 + len(b)) % 8) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(b)) + b + d[8 + n:])
PY
expect_error "optimizer_state ../../../../etc/passwd is refused" 'optimizer_state names "../../../../etc/passwd"' \
    train $tiny --resume "$ck/evil.safetensors"
if grep -q "root:" "$work/err"; then check "... without reading it" 1; else check "... without reading it" 0; fi

# 4. Bad input: one clear line, non-zero exit, no crash.
mkdir -p "$work/data"
python3 - "$work/data" <<'PY'
import gzip, struct, sys, os
d = sys.argv[1]
imgs = struct.pack(">IIII", 0x803, 10, 28, 28) + bytes(10 * 784)
labs = struct.pack(">II", 0x801, 10) + bytes(range(10))
for split in ("train", "t10k"):
    open(os.path.join(d, f"{split}-images-idx3-ubyte"), "wb").write(imgs[:-100])  # truncated
    open(os.path.join(d, f"{split}-labels-idx1-ubyte"), "wb").write(labs)
os.makedirs(d + "/magic"); os.makedirs(d + "/count")
for split in ("train", "t10k"):
    open(f"{d}/magic/{split}-images-idx3-ubyte", "wb").write(struct.pack(">IIII", 0x801, 10, 28, 28) + bytes(7840))
    open(f"{d}/magic/{split}-labels-idx1-ubyte", "wb").write(labs)
    with gzip.open(f"{d}/count/{split}-images-idx3-ubyte.gz", "wb") as f: f.write(imgs)
    with gzip.open(f"{d}/count/{split}-labels-idx1-ubyte.gz", "wb") as f: f.write(struct.pack(">II", 0x801, 9) + bytes(9))
PY
expect_error "missing data directory" "$work/nodata" train --model "$model" --data "$work/nodata"
expect_error "truncated IDX file" "truncated\|expected" train --model "$model" --data "$work/data"
expect_error "wrong IDX magic" "magic" train --model "$model" --data "$work/data/magic"
expect_error "images and labels of different counts" "count\|labels" train --model "$model" --data "$work/data/count"
echo '{"input": [784], "layers": [{"type": "dense"}], "loss": "mse"}' > "$work/bad_model.json" # (a file: a <(...) FIFO is refused as such)
expect_error "malformed model file" "layers" train --model "$work/bad_model.json"
"$bin" train --model "$src/assets/models/tiny_mlp.json" --limit-train 64 --batch 64 --epochs 1 --no-eval --quiet --device llvmpipe --save "$work/tiny.safetensors"
expect_error "checkpoint that does not match the model" "shape\|has no tensor" train --model "$model" --init "$work/tiny.safetensors" --limit-train 64
expect_error "a loss that explodes (SGD at lr 1e6)" "loss diverged at step" train $small --device llvmpipe --lr 1e6 --no-eval
# A run that diverges neither saves nor replaces a checkpoint, and says none was saved.
cp "$work/tiny.safetensors" "$work/tiny.keep"
expect_error "AdamW at lr 1e6 diverges" "diverged at step.*no checkpoint was saved by this run" train \
    --model "$src/assets/models/tiny_mlp.json" --limit-train 2000 --limit-test 500 --epochs 2 \
    --optimizer adamw --lr 1e6 --quiet --device llvmpipe --save "$work/tiny.safetensors"
cmp -s "$work/tiny.keep" "$work/tiny.safetensors"; check "... and the checkpoint at --save is untouched" $?
# strict_jsonl FILE: every line is JSON without NaN or Infinity (which Python's json would take).
strict_jsonl() {
    python3 - "$1" <<'PY'
import json, sys
def no(c): raise ValueError("not JSON: " + c)
[json.loads(l, parse_constant=no) for l in open(sys.argv[1])]
PY
}
# Finite numbers that climb: SGD at lr 1e6 on tiny_mlp went to 5e31 with exit 0. The run stops at
# the step whose loss is over 1000 times the first's, names it, and its metrics stay JSON.
for dev in llvmpipe swiftshader; do
    expect_error "SGD at lr 1e6 climbs on $dev: stopped as diverged" \
        "loss diverged at step 2 (epoch 1, batch 2): .*over 1000 times the first step's 2.3.*lower --lr" \
        train --model "$src/assets/models/tiny_mlp.json" --limit-train 2000 --limit-test 500 \
        --epochs 2 --optimizer sgd --lr 1e6 --quiet --device $dev --metrics "$work/div.jsonl"
    strict_jsonl "$work/div.jsonl" && [ "$(wc -l < "$work/div.jsonl")" -eq 2 ]
    ok=$?
    check "... its metrics are JSON lines, up to the diverged step ($(wc -l < "$work/div.jsonl") lines)" $ok
done
# Features of 1e34: the first step's loss (1e34) is finite, its update overflows the weights. With
# a second step, its loss is NaN; with none, the end of the run finds the parameters.
PYTHONPATH="$src/tests" python3 - "$work" <<'PY'
import sys
from npy_write import npy
npy(sys.argv[1] + "/hugex.npy", "<f4", (64, 8), [1e34 * ((i * 7) % 5 - 2) for i in range(512)])
npy(sys.argv[1] + "/hugey.npy", "<i8", (64,), [i % 4 for i in range(64)])
PY
echo '{"input": [8], "layers": [{"type": "dense", "units": 4}], "loss": "softmax_cross_entropy"}' > "$work/huge.json"
huge="--model $work/huge.json --data-npy $work/hugex.npy,$work/hugey.npy --batch 32 --lr 1e6 --device llvmpipe --quiet"
expect_error "an update that overflows: the next step's loss is NaN" "loss became NaN at step 2 (epoch 1, batch 2)" \
    train $huge --max-steps 2 --metrics "$work/huge.jsonl"
strict_jsonl "$work/huge.jsonl" && [ "$(wc -l < "$work/huge.jsonl")" -eq 1 ]; check "... its metrics are JSON lines" $?
expect_error "an update that overflows at the last step: the parameters are checked" \
    "after step 1, tensor 0.weight holds an infinite value at element 0.*lower --lr" train $huge --max-steps 1
expect_error "... and not saved" "after step 1, tensor 0.weight holds an infinite value.*not written" \
    train $huge --max-steps 1 --save "$work/huge.safetensors"
[ ! -e "$work/huge.safetensors" ]; check "... no checkpoint written" $?
# Labels past the model's classes in the test set (not only the training set), and past an MSE
# model's outputs (they would be all-zero target rows).
mkdir -p "$work/labels"
python3 - "$work/labels" <<'PY'
import struct, sys, os
d = sys.argv[1]
def save(name, magic, dims, payload):
    open(os.path.join(d, name), "wb").write(struct.pack(">I", magic) + b"".join(struct.pack(">I", x) for x in dims) + payload)
save("train-images-idx3-ubyte", 0x803, (64, 28, 28), bytes(64 * 784))
save("train-labels-idx1-ubyte", 0x801, (64,), bytes(i % 10 for i in range(64)))
save("t10k-images-idx3-ubyte", 0x803, (16, 28, 28), bytes(16 * 784))
save("t10k-labels-idx1-ubyte", 0x801, (16,), bytes([1] * 7 + [200] + [1] * 8))
PY
expect_error "a test label of 200 for 10 classes" "label 200 at sample 7.*labels must be 0..9" train \
    --model "$src/assets/models/tiny_mlp.json" --data "$work/labels" --epochs 1 --quiet --device llvmpipe
mse=$work/mse5.json # 5 outputs under MSE: the training labels 5..9 have no output
echo '{"input": [784], "layers": [{"type": "dense", "units": 5}], "loss": "mse"}' > "$mse"
expect_error "an MSE label past the outputs" "label 5 at sample 5.*5 outputs" train --model "$mse" \
    --data "$work/labels" --epochs 1 --quiet --device llvmpipe
expect_error "--batch 0" "--batch" train --batch 0
expect_error "--lr abc" "--lr" train --lr abc
expect_error "--epochs -1" "--epochs" train --epochs -1
expect_error "--optimizer foo" "sgd or adamw" train --optimizer foo
expect_error "--device nothing" "matches no device" train --device nosuchgpu
expect_error "unknown flag" "unknown option" train --frobnicate
expect_error "eval without --init" "--init" eval
# batchnorm over one value per channel (a [2, 1, 1] input at batch 1): refused as PyTorch does,
# through the step's error, not an abort.
printf '%s' '{"input": [2, 1, 1], "layers": [{"type": "batchnorm2d"}, {"type": "flatten"},
 {"type": "dense", "units": 2}], "loss": "softmax_cross_entropy"}' > "$work/bn1.json"
PYTHONPATH="$src/tests" python3 - "$work" <<'PY'
import sys
from npy_write import npy
npy(sys.argv[1] + "/bnx.npy", "<f4", (4, 2, 1, 1), [0.1 * i for i in range(8)])
npy(sys.argv[1] + "/bny.npy", "<i8", (4,), [0, 1, 0, 1])
PY
expect_error "batchnorm with one value per channel" "one value per channel" train \
    --model "$work/bn1.json" --data-npy "$work/bnx.npy,$work/bny.npy" --device llvmpipe \
    --batch 1 --max-steps 1 --no-eval
VK_ICD_FILENAMES=/nonexistent VK_DRIVER_FILES=/nonexistent VK_ADD_DRIVER_FILES= "$bin" train --limit-train 64 > /dev/null 2> "$work/err"
rc=$?; [ $rc -ne 0 ] && grep -q "no Vulkan device found" "$work/err"; ok=$? # (a $(...) in check's name would reset $?)
check "train with no driver: $(cat "$work/err")" $ok

echo "test_cli_train: $fails failed"
[ $fails -eq 0 ]
