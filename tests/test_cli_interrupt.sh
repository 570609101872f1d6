#!/usr/bin/env bash
# test_cli_interrupt.sh: `vktrain train --save --metrics` stopped at random moments, 10 times by
# kill -9 and 10 times by SIGINT, on a small model and synthetic data (6 epochs of 32 AdamW steps,
# a checkpoint at every epoch end): after each stop the directory holds the last checkpoint,
# whole, with the optimizer file it names (whole, of its step), and no file but the run's own (a
# killed writer's temporary files; an optimizer file of a step whose checkpoint was never renamed
# into place); SIGINT exits 130 with the message naming the checkpoint of the step it stopped
# after, which is the last metrics line's. `--resume` (or a fresh run, where no checkpoint was
# written yet) then ends with the uninterrupted run's parameters bit for bit, its metrics file line
# for line (every field but samples_per_sec: the lines a killed run wrote past its checkpoint are
# cut, a mid-epoch resume's epoch line has the whole epoch's loss) and only the files the
# uninterrupted run leaves. Then kills placed by VKT_TEST_CRASH_AFTER_BYTES: between the optimizer
# file and the checkpoint that names it (the previous pair stays loadable and the resume cuts the
# metrics back, a torn last line too), and inside the optimizer file of a stop's checkpoint (the
# next save removes its temporary file); a metrics file that is not vktrain's is refused by
# --resume and left as it is. The moments come from a printed seed: VKT_INTERRUPT_SEED=N repeats
# them (as far as the machine's timing allows).
# Args: VKTRAIN_BINARY SOURCE_DIR
set -uo pipefail
bin=$1 # (SOURCE_DIR is not needed: the model and the data are made here)
. "$(dirname "$0")/check.bash" # fails, check NAME STATUS, same_tensors A B
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The same kernels in every run: no timing-dependent matmul choices, a cache of our own.
export VKT_TUNE=off VKT_CACHE_DIR=$work/cache
seed=${VKT_INTERRUPT_SEED:-$((RANDOM * 32768 + RANDOM))}
echo "interrupt moments from seed $seed (VKT_INTERRUPT_SEED=$seed repeats them)"
start_s=$SECONDS

# Synthetic data: IDX images (1024 training, 256 test samples of 28x28) whose labels a small MLP
# can learn (the brightest of ten pixel groups); and the same as .npy [n, 64, 1, 1] for a model
# with batchnorm buffers.
PYTHONPATH="$(dirname "$0")" python3 - "$work" <<'PY'
import os, random, struct, sys
from npy_write import npy
w = sys.argv[1]; d = w + "/data"; os.makedirs(d)
rng = random.Random(11)
def images(n):
    px = bytearray(rng.getrandbits(8) for _ in range(n * 784))
    lab = bytes(max(range(10), key=lambda c: sum(px[i * 784 + c * 78:i * 784 + c * 78 + 78]))
                for i in range(n))
    return px, lab
for split, n in (("train", 1024), ("t10k", 256)):
    px, lab = images(n)
    open(f"{d}/{split}-images-idx3-ubyte", "wb").write(struct.pack(">IIII", 0x803, n, 28, 28) + bytes(px))
    open(f"{d}/{split}-labels-idx1-ubyte", "wb").write(struct.pack(">II", 0x801, n) + lab)
x = [rng.gauss(0, 1) for _ in range(512 * 64)]
y = [max(range(10), key=lambda c: x[i * 64 + c]) for i in range(512)]
npy(w + "/bnx.npy", "<f4", (512, 64, 1, 1), x)
npy(w + "/bny.npy", "<i8", (512,), y)
PY
echo '{"name": "intr_mlp", "input": [784], "layers": [{"type": "dense", "units": 16}, {"type": "relu"},
 {"type": "dense", "units": 10}], "loss": "softmax_cross_entropy"}' > "$work/mlp.json"
echo '{"name": "intr_bn", "input": [64, 1, 1], "layers": [{"type": "batchnorm2d"}, {"type": "flatten"},
 {"type": "dense", "units": 10}], "loss": "softmax_cross_entropy"}' > "$work/bn.json"
run="--model $work/mlp.json --data $work/data --batch 32 --epochs 6 --optimizer adamw --lr 0.003 --seed 3 --device llvmpipe --quiet"

# state.py DIR [final]: the state of a run's directory. Its files are the run's own (ck.safetensors,
# ck.optim-sN.safetensors, m.jsonl, and after a kill the temporary files ck*.safetensors.tmp.PID);
# the checkpoint, where there is one, is whole and names an optimizer file of its own step that is
# whole too; prints its step ("none": no checkpoint). With "final": nothing but the checkpoint,
# its optimizer file and the metrics.
cat > "$work/state.py" <<'PY'
import json, os, re, struct, sys
d, final = sys.argv[1], len(sys.argv) > 2
def fail(msg): print(msg); sys.exit(1)
def header(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
    end = max([v["data_offsets"][1] for k, v in h.items() if k != "__metadata__"] + [0])
    if len(b) != 8 + n + end: fail(f"{p}: {len(b)} bytes, the header says {8 + n + end}")
    return h["__metadata__"]
names = sorted(os.listdir(d))
own = r"ck\.safetensors|ck\.optim-s\d+\.safetensors|m\.jsonl"
if not final: own += r"|ck(\.optim-s\d+)?\.safetensors\.tmp\.\d+"
stray = [n for n in names if not re.fullmatch(own, n)]
if stray: fail(f"files that are not the run's own: {stray}")
if "ck.safetensors" not in names:
    if final: fail("no checkpoint")
    print("none"); sys.exit(0)
m = header(d + "/ck.safetensors"); step = m["step"]
if m["optimizer_state"] != f"ck.optim-s{step}.safetensors": fail(f"names {m['optimizer_state']}")
om = header(d + "/" + m["optimizer_state"])
if om["step"] != step: fail(f"optimizer file of step {om['step']} for a checkpoint of step {step}")
if final and len(names) != 3: fail(f"files left: {names}")
print(step)
PY
# same_metrics A B: the same lines with the same fields, equal but for samples_per_sec (timing).
same_metrics() {
    python3 - "$1" "$2" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
strip = lambda L: [{k: v for k, v in d.items() if k != "samples_per_sec"} for d in L]
if strip(a) == strip(b): sys.exit(0)
print(f"{len(a)} lines against {len(b)}; first difference:",
      next(((x, y) for x, y in zip(strip(a), strip(b)) if x != y), "(one is a prefix)"))
sys.exit(1)
PY
}

# The uninterrupted run, and when its steps begin (the first metrics line).
mkdir -p "$work/ref"
t0=$(date +%s%N)
"$bin" train $run --save "$work/ref/ck.safetensors" --metrics "$work/ref/m.jsonl" &
pid=$!
while kill -0 $pid 2> /dev/null && [ ! -s "$work/ref/m.jsonl" ]; do sleep 0.005; done
t1=$(date +%s%N)
wait $pid; check "the uninterrupted run" $?
t2=$(date +%s%N)
start_ms=$(((t1 - t0) / 1000000)) steps_ms=$(((t2 - t1) / 1000000))
echo "uninterrupted: $((start_ms + steps_ms)) ms, the first step after $start_ms ms"
python3 "$work/state.py" "$work/ref" final > /dev/null; check "the uninterrupted run leaves its checkpoint, optimizer file and metrics" $?
# The moments, by the run's progress rather than the clock (the machine's load varies): kill -9
# twice during the start (a time from the process's start: no checkpoint yet) and eight times
# once the metrics show step K (1 to 191 of 192), SIGINT ten times at step K (before the steps,
# the CLI has not yet installed its handler, and SIGINT's default action ends the process, which
# has written nothing); each then a further 0 to 9 ms, which also lands in epoch ends' saves.
read -r -a start_at <<< "$(python3 -c "import random; r = random.Random($seed); print(*[r.randrange(max(1, $start_ms)) for _ in range(2)])")"
read -r -a kill_at <<< "$(python3 -c "import random; r = random.Random($seed + 1); print(*[r.randrange(1, 192) for _ in range(8)])")"
read -r -a int_at <<< "$(python3 -c "import random; r = random.Random($seed + 2); print(*[r.randrange(1, 192) for _ in range(10)])")"
read -r -a extra_ms <<< "$(python3 -c "import random; r = random.Random($seed + 3); print(*[r.randrange(10) for _ in range(20)])")"
ms_sleep() { sleep "$(($1 / 1000)).$(printf %03d $(($1 % 1000)))"; }
# at_step PID FILE K: waits until FILE (a run's metrics) holds K step lines or PID has ended.
at_step() {
    local lines=()
    while kill -0 "$1" 2> /dev/null; do
        [ -f "$2" ] && mapfile -t lines 2> /dev/null < "$2" # (a builtin: no process per look)
        [ "${#lines[@]}" -ge $(($3 + $3 / 32)) ] && return # 1 epoch line per 32 steps
        sleep 0.002
    done
}
trials=0

# resume_and_compare NAME DIR: continue (or, without a checkpoint, redo) the run in DIR to its end;
# the same parameters, metrics and files as the uninterrupted run.
resume_and_compare() {
    local name=$1 d=$2 ck
    ck=$(python3 "$work/state.py" "$d"); check "$name: the files left are the run's own, the checkpoint and its optimizer file consistent (checkpoint: step $ck)" $?
    if [ "$ck" = none ]; then
        "$bin" train $run --save "$d/ck.safetensors" --metrics "$d/m.jsonl"
    else
        "$bin" train $run --resume "$d/ck.safetensors" --save "$d/ck.safetensors" --metrics "$d/m.jsonl"
    fi
    ok=$?
    check "$name: $([ "$ck" = none ] && echo "a fresh run" || echo "--resume from step $ck") runs to the end" $ok
    same_tensors "$work/ref/ck.safetensors" "$d/ck.safetensors"; check "$name: the parameters equal the uninterrupted run's, bit for bit" $?
    same_metrics "$work/ref/m.jsonl" "$d/m.jsonl"; check "$name: the metrics file equals the uninterrupted run's" $?
    python3 "$work/state.py" "$d" final > /dev/null; check "$name: only the checkpoint, its optimizer file and the metrics are left" $?
}

for k in $(seq 0 9); do
    d=$work/kill$k
    mkdir -p "$d"
    "$bin" train $run --save "$d/ck.safetensors" --metrics "$d/m.jsonl" &
    pid=$!
    if [ "$k" -lt 2 ]; then
        at="${start_at[$k]} ms after the start"
        ms_sleep "${start_at[$k]}"
    else
        at="at step ${kill_at[$((k - 2))]} + ${extra_ms[$k]} ms"
        at_step $pid "$d/m.jsonl" "${kill_at[$((k - 2))]}"
        ms_sleep "${extra_ms[$k]}"
    fi
    kill -9 $pid 2> /dev/null
    wait $pid 2> /dev/null; rc=$?
    n=$(grep -c '"type":"step"' "$d/m.jsonl" 2> /dev/null)
    echo "kill -9 $at: exit $rc, ${n:-0} step lines"
    resume_and_compare "kill -9 $at" "$d"
    trials=$((trials + 1))
done

for k in $(seq 0 9); do
    d=$work/int$k at="at step ${int_at[$k]} + ${extra_ms[$((k + 10))]} ms"
    mkdir -p "$d"
    "$bin" train $run --save "$d/ck.safetensors" --metrics "$d/m.jsonl" 2> "$d.err" &
    pid=$!
    at_step $pid "$d/m.jsonl" "${int_at[$k]}"
    ms_sleep "${extra_ms[$((k + 10))]}"
    kill -INT $pid 2> /dev/null
    wait $pid; rc=$?
    last=$(python3 -c "import json,sys; print([d for d in map(json.loads, open(sys.argv[1])) if d['type'] == 'step'][-1]['step'])" "$d/m.jsonl")
    ok=$?
    check "SIGINT $at: every metrics line is whole JSON" $ok
    if [ $rc -eq 0 ]; then # the signal came after the last step: the run ended as it would have
        same_tensors "$work/ref/ck.safetensors" "$d/ck.safetensors"
        check "SIGINT $at, after the last step: exit 0 and the uninterrupted run's parameters" $?
        trials=$((trials + 1))
        continue
    fi
    ckstep=$(python3 "$work/state.py" "$d")
    [ $rc -eq 130 ] && grep -q "^vktrain: stopped by SIGINT after step $last; the checkpoint of that step is $d/ck.safetensors: continue with --resume" "$d.err" && [ "$ckstep" = "$last" ]
    ok=$?
    check "SIGINT $at: exit 130 ($rc), stopped after step $last (the last metrics line) with its checkpoint (step $ckstep): $(head -c 200 "$d.err")" $ok
    resume_and_compare "SIGINT $at" "$d"
    trials=$((trials + 1))
done
[ $trials -eq 20 ]; check "20 interruptions tried ($trials)" $?

# A kill between the optimizer file and the checkpoint that names it. The writer kills itself
# after N bytes of any one file (VKT_TEST_CRASH_AFTER_BYTES): SGD with momentum on a model with
# batchnorm buffers writes an optimizer file smaller than the checkpoint, so an N between the two
# kills it inside the checkpoint, its optimizer file already renamed into place.
bn="--model $work/bn.json --data-npy $work/bnx.npy,$work/bny.npy --batch 32 --epochs 3 --optimizer sgd --momentum 0.9 --lr 0.05 --seed 5 --device llvmpipe --quiet"
mkdir -p "$work/bnref" "$work/bn"
"$bin" train $bn --save "$work/bnref/ck.safetensors" --metrics "$work/bnref/m.jsonl"; check "batchnorm model: the uninterrupted run" $?
"$bin" train $bn --max-steps 16 --save "$work/bn/ck.safetensors" --metrics "$work/bn/m.jsonl"; check "batchnorm model: the first epoch (16 steps)" $?
osize=$(stat -c %s "$work/bn/ck.optim-s16.safetensors") msize=$(stat -c %s "$work/bn/ck.safetensors")
[ $((osize + 64)) -lt "$msize" ]; check "the optimizer file ($osize bytes) is smaller than the checkpoint ($msize)" $?
cp "$work/bn/ck.safetensors" "$work/bn.keep"
VKT_TEST_CRASH_AFTER_BYTES=$((osize + 64)) "$bin" train $bn --resume "$work/bn/ck.safetensors" --save "$work/bn/ck.safetensors" --metrics "$work/bn/m.jsonl" &
wait $! 2> /dev/null; rc=$? # (in the background, and wait quiet: no "Killed" from the shell)
[ $rc -eq 137 ] && [ -f "$work/bn/ck.optim-s32.safetensors" ] && ls "$work"/bn/ck.safetensors.tmp.* > /dev/null 2>&1
ok=$?
check "killed writing the checkpoint of step 32, its optimizer file written (exit $rc: $(ls "$work/bn" | tr '\n' ' '))" $ok
cmp -s "$work/bn.keep" "$work/bn/ck.safetensors" && [ "$(python3 "$work/state.py" "$work/bn")" = 16 ]
check "... the checkpoint of step 16 is unchanged and names its own optimizer file, which is still there" $?
# The killed run's metrics went on past the checkpoint (steps 17 to 32 and epoch 2's line); a
# torn line at the end, as a kill inside a write leaves; --resume cuts both back to step 16.
n=$(grep -c '"type":"step"' "$work/bn/m.jsonl")
[ "$n" -eq 32 ]; check "the killed run's metrics go past its checkpoint: $n step lines" $?
printf '{"type":"step","step":33,"epo' >> "$work/bn/m.jsonl"
# A metrics file that is not vktrain's is refused and left as it is.
{ head -3 "$work/bn/m.jsonl"; echo "step,loss"; tail -n +4 "$work/bn/m.jsonl"; } > "$work/foreign.jsonl"
cp "$work/foreign.jsonl" "$work/foreign.keep"
expect_error "--resume onto a metrics file that is not vktrain's" \
    "metrics file $work/foreign.jsonl: line 4 is not one of the JSON lines vktrain writes" \
    train $bn --resume "$work/bn/ck.safetensors" --save "$work/bn/ck.safetensors" --metrics "$work/foreign.jsonl"
cmp -s "$work/foreign.jsonl" "$work/foreign.keep"; check "... and left unchanged" $?
"$bin" train $bn --resume "$work/bn/ck.safetensors" --save "$work/bn/ck.safetensors" --metrics "$work/bn/m.jsonl"
check "... it resumes" $?
same_tensors "$work/bnref/ck.safetensors" "$work/bn/ck.safetensors"; check "... to the uninterrupted run's parameters and buffers, bit for bit" $?
same_metrics "$work/bnref/m.jsonl" "$work/bn/m.jsonl"; check "... and metrics" $?
python3 "$work/state.py" "$work/bn" final > /dev/null; check "... and leaves only its own three files" $?
# A kill inside the optimizer file of a stop's checkpoint (step 5, mid-epoch: no later save of the
# run writes that name again): the next run's first save removes the temporary file.
mkdir -p "$work/bn2"
VKT_TEST_CRASH_AFTER_BYTES=1024 "$bin" train $bn --max-steps 5 --save "$work/bn2/ck.safetensors" &
wait $! 2> /dev/null; rc=$?
[ $rc -eq 137 ] && ls "$work"/bn2/ck.optim-s5.safetensors.tmp.* > /dev/null 2>&1 && [ ! -e "$work/bn2/ck.safetensors" ]
ok=$?
check "killed inside the optimizer file of step 5 (exit $rc: $(ls "$work/bn2" | tr '\n' ' '))" $ok
"$bin" train $bn --save "$work/bn2/ck.safetensors" --metrics "$work/bn2/m.jsonl"; check "... a fresh run" $?
same_tensors "$work/bnref/ck.safetensors" "$work/bn2/ck.safetensors" && python3 "$work/state.py" "$work/bn2" final > /dev/null
ok=$?
check "... equals the uninterrupted run and leaves no temporary file ($(ls "$work/bn2" | tr '\n' ' '))" $ok

echo "test_cli_interrupt: $fails failed ($((SECONDS - start_s)) s, seed $seed)"
[ $fails -eq 0 ]
