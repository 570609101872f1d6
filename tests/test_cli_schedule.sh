#!/usr/bin/env bash
# test_cli_schedule.sh: `vktrain train --lr-schedule` end to end. With PyTorch (Debian's
# python3-torch): from the same initial parameters and batches, vktrain's parameters after 10
# steps equal torch.optim.SGD / AdamW under the torch.optim.lr_scheduler expression train.h
# names (StepLR and CosineAnnealingLR after LinearLR warmup, in SequentialLR), and every step's
# rate in --metrics equals the rate torch's optimizer held at that step, on lavapipe and on
# SwiftShader. Then, without PyTorch: a run stopped midway and resumed is bit for bit the
# uninterrupted one and writes the same rates; the schedule is in the checkpoint's metadata and a
# resume that asks for another one is refused; bad schedule flags are clear errors.
# Args: VKTRAIN_BINARY SOURCE_DIR
set -uo pipefail
bin=$1 src=$2
. "$(dirname "$0")/check.bash" # fails, check NAME STATUS
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tiny=$src/assets/models/tiny_mlp.json

# 1. Against PyTorch: random data (640 samples, 10 batches of 64, file order) and parameters.
if /usr/bin/python3 -c "import torch, numpy" 2> /dev/null; then
    cat > "$work/equiv.py" <<'PY'
import json, struct, subprocess, sys, warnings
warnings.filterwarnings("ignore")
import numpy as np, torch
from torch.optim.lr_scheduler import LinearLR, CosineAnnealingLR, StepLR, SequentialLR
vktrain, model_path, work, device = sys.argv[1:5]
torch.manual_seed(0)
torch.set_num_threads(1)
rng = np.random.default_rng(5)
X = rng.random((640, 784), dtype=np.float32)
Y = rng.integers(0, 10, 640).astype(np.int64)
np.save(work + "/x.npy", X)
np.save(work + "/y.npy", Y)
def net():
    return torch.nn.Sequential(torch.nn.Linear(784, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
def write_st(path, sd):
    header, blobs, off = {}, [], 0
    for k, v in sd.items():
        b = v.detach().contiguous().numpy().astype("<f4").tobytes()
        header[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b); off += len(b)
    h = json.dumps(header).encode(); h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
def read_st(path):
    d = open(path, "rb").read(); n = struct.unpack("<Q", d[:8])[0]; h = json.loads(d[8:8 + n])
    return {k: torch.from_numpy(np.frombuffer(d[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]],
                                              dtype="<f4").reshape(v["shape"]).copy())
            for k, v in h.items() if k != "__metadata__"}
init = net()
write_st(work + "/init.safetensors", init.state_dict())
warm = lambda W: lambda o: LinearLR(o, start_factor=1 / (W + 1), end_factor=1.0, total_iters=W)
seq = lambda W, main: lambda o: SequentialLR(o, [warm(W)(o), main(o)], milestones=[W])
CASES = (
    ("sgd+step", "--optimizer sgd --lr 0.05 --momentum 0.9 --lr-schedule step --lr-step-size 3 "
     "--lr-gamma 0.5 --warmup-steps 2",
     lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
     seq(2, lambda o: StepLR(o, step_size=3, gamma=0.5)), {}),
    # momentum 0, fusion forced: SGD may take its step inside the weight-gradient matmuls
    ("sgd+cosine, fused", "--optimizer sgd --lr 0.1 --momentum 0 --lr-schedule cosine",
     lambda p: torch.optim.SGD(p, lr=0.1),
     lambda o: CosineAnnealingLR(o, T_max=10), {"VKT_NET_FUSE": "1"}),
    ("adamw+cosine", "--optimizer adamw --lr 0.002 --weight-decay 0.01 --lr-schedule cosine "
     "--warmup-steps 3 --lr-min 0.0001",
     lambda p: torch.optim.AdamW(p, lr=0.002, weight_decay=0.01),
     seq(3, lambda o: CosineAnnealingLR(o, T_max=7, eta_min=0.0001)), {}),
    ("adamw+constant warmup", "--optimizer adamw --lr 0.003 --warmup-steps 4",
     lambda p: torch.optim.AdamW(p, lr=0.003), warm(4), {}),
)
import os
fails = 0
for name, flags, make_opt, make_sched, env in CASES:
    tag = name.replace("+", "_").replace(" ", "").replace(",", "")
    out, metrics = "%s/%s.safetensors" % (work, tag), "%s/%s.jsonl" % (work, tag)
    cmd = [vktrain, "train", "--model", model_path, "--init", work + "/init.safetensors",
           "--data-npy", work + "/x.npy," + work + "/y.npy", "--no-shuffle", "--batch", "64",
           "--epochs", "1", "--no-eval", "--quiet", "--device", device, "--save", out,
           "--metrics", metrics] + flags.split()
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **env))
    if r.returncode != 0:
        print("FAIL %s: %s\n%s" % (" ".join(cmd), r.stdout, r.stderr)); fails += 1; continue
    model = net(); model.load_state_dict(read_st(work + "/init.safetensors"))
    opt = make_opt(model.parameters()); sched = make_sched(opt)
    rates, weak = [], {}
    for step in range(10):
        rates.append(opt.param_groups[0]["lr"])
        xb, yb = torch.from_numpy(X[step * 64:(step + 1) * 64]), torch.from_numpy(Y[step * 64:(step + 1) * 64])
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step(); sched.step()
        if isinstance(opt, torch.optim.AdamW):  # entries whose gradient cancelled to ~eps
            for k, q in model.named_parameters():
                st = opt.state[q]; w = (st["exp_avg_sq"] / (1 - 0.999 ** st["step"])).sqrt() < 1e-6
                weak[k] = w if k not in weak else weak[k] | w
    got_rates = [json.loads(l)["lr"] for l in open(metrics) if '"type":"step"' in l]
    rate_ok = len(got_rates) == 10 and all(abs(a - b) <= 1e-7 * b for a, b in zip(got_rates, rates))
    got, bad, worst = read_st(out), 0, 0.0
    for k, v in model.state_dict().items():
        d = (got[k].double() - v.double()).abs(); tol = 1e-5 + 1e-4 * v.double().abs()
        if k in weak: tol = torch.where(weak[k], torch.full_like(tol, max(rates) * 10), tol)
        bad += int((d > tol).sum()); worst = max(worst, float(d.max()))
    ok = rate_ok and bad == 0
    fails += not ok
    print("%s %s on %s: rates %s torch's (%s), max |p_vktrain - p_torch| = %.3g%s" % (
        "ok  " if ok else "FAIL", name, device, "=" if rate_ok else "!=",
        " ".join("%.4g" % x for x in got_rates), worst, "" if bad == 0 else " (%d out of tolerance)" % bad))
sys.exit(1 if fails else 0)
PY
    for dev in llvmpipe swiftshader; do
        mkdir -p "$work/$dev"
        /usr/bin/python3 "$work/equiv.py" "$bin" "$tiny" "$work/$dev" $dev
        check "schedules on $dev equal PyTorch's" $?
    done
elif [ "${CI:-}" = true ]; then
    check "CI=true but python3-torch is missing (scripts/setup.sh test installs it)" 1
else
    echo "skip: python3-torch is not installed: the comparison with PyTorch is left out"
fi

# 2. Resume: stopped at step 13 of 20 (the cosine still spans 20: --lr-total-steps), resumed.
sched="--lr-schedule cosine --warmup-steps 3 --lr-min 0.001"
common="--model $tiny --limit-train 640 --batch 64 --epochs 2 --seed 7 --quiet --no-eval --device llvmpipe"
rates() { python3 -c "import json,sys; print(' '.join(str(json.loads(l)['lr']) for l in open(sys.argv[1]) if '\"step\",' in l))" "$1"; }
"$bin" train $common $sched --save "$work/full.safetensors" --metrics "$work/full.jsonl"
check "uninterrupted cosine run" $?
"$bin" train $common $sched --max-steps 13 --lr-total-steps 20 --save "$work/part.safetensors" --metrics "$work/part.jsonl"
check "run stopped at step 13" $?
"$bin" train $common $sched --resume "$work/part.safetensors" --save "$work/part.safetensors" --metrics "$work/part.jsonl"
check "resumed run" $?
same_tensors "$work/full.safetensors" "$work/part.safetensors"; check "resume = uninterrupted, bit for bit" $?
a=$(rates "$work/full.jsonl") b=$(rates "$work/part.jsonl")
[ -n "$a" ] && [ "$a" = "$b" ]; check "the resumed run's 20 rates are the uninterrupted run's" $?
python3 - "$work/part.safetensors" <<'PY'; check "the schedule is in the checkpoint's metadata" $?
import json, struct, sys
d = open(sys.argv[1], "rb").read(); m = json.loads(d[8:8 + struct.unpack("<Q", d[:8])[0]])["__metadata__"]
want = {"lr_schedule": "cosine", "warmup_steps": "3", "lr_total_steps": "20", "model": "tiny_mlp", "step": "20"}
bad = {k: m.get(k) for k in want if m.get(k) != want[k]}
print("metadata differs: %s" % bad if bad else "", end="")
sys.exit(1 if bad or float(m["lr_min"]) != 0.001 else 0)
PY

"$bin" train $common $sched --max-steps 13 --save "$work/short.safetensors"
check "run of 13 steps, its cosine over 13" $?
"$bin" train $common --max-steps 5 --save "$work/const.safetensors"
check "run without a schedule" $?
expect_error "resume with another schedule" "trained with learning-rate schedule cosine" train $common --lr-schedule step --lr-step-size 4 --resume "$work/part.safetensors"
expect_error "resume with another warmup" "warmup 3" train $common --lr-schedule cosine --warmup-steps 2 --lr-min 0.001 --resume "$work/part.safetensors"
expect_error "resume with a longer run (the cosine's span)" "over 20 steps" train $common $sched --epochs 3 --resume "$work/part.safetensors"
expect_error "resume of a cosine over 13 steps in a run of 20" "over 13 steps.*--lr-total-steps" train $common $sched --resume "$work/short.safetensors"
expect_error "resume of a constant-rate checkpoint with a cosine" "schedule constant" train $common $sched --resume "$work/const.safetensors"

# 3. Bad flags: one clear line, non-zero exit.
run10="--model $tiny --limit-train 640 --batch 64 --epochs 1 --no-eval --quiet --device llvmpipe"
expect_error "--lr-schedule foo" "constant, cosine or step" train --lr-schedule foo
expect_error "--warmup-steps -1" "--warmup-steps wants a whole number" train --warmup-steps -1
expect_error "--warmup-steps x" "--warmup-steps wants a whole number" train --warmup-steps x
expect_error "step without a step size" "needs --lr-step-size" train --lr-schedule step
expect_error "--lr-step-size 0" "--lr-step-size wants a whole number from 1" train --lr-schedule step --lr-step-size 0
expect_error "--lr-gamma 0" "--lr-gamma must be above 0" train --lr-schedule step --lr-step-size 2 --lr-gamma 0
expect_error "--lr-gamma -1" "--lr-gamma wants a number" train --lr-schedule step --lr-step-size 2 --lr-gamma -1
expect_error "--lr-step-size with cosine" "--lr-step-size applies to --lr-schedule step only" train --lr-schedule cosine --lr-step-size 3
expect_error "--lr-gamma without step" "--lr-gamma applies to --lr-schedule step only" train --lr-gamma 0.5
expect_error "--lr-min with step" "--lr-min applies to --lr-schedule cosine only" train --lr-schedule step --lr-step-size 2 --lr-min 0.1
expect_error "--lr-total-steps without cosine" "--lr-total-steps applies to --lr-schedule cosine" train --lr-total-steps 100
expect_error "--lr-min above --lr" "--lr-min must be between 0 and --lr" train $run10 --lr-schedule cosine --lr 0.01 --lr-min 0.1
expect_error "a warmup that leaves the cosine nothing" "--warmup-steps 10 leaves the cosine no step" train $run10 --lr-schedule cosine --warmup-steps 10
expect_error "--lr-total-steps below the run" "--lr-total-steps 5 is less than the run's 10 steps" train $run10 --lr-schedule cosine --lr-total-steps 5

echo "test_cli_schedule: $fails failed"
[ $fails -eq 0 ]
