#!/usr/bin/env bash
# test_cli_bench_train.sh: `vktrain bench train` on a few steps of fashion_mlp: on lavapipe and on
# SwiftShader the text and the JSON name the host as this machine is (tests/host_check.py), the
# JSON the device and driver, and gives samples/s consistent with the step
# time, GFLOP/s of the step and of its matmul shapes alone, and a split of the step into
# matmul / attention / other kernels / communication / host that adds up to one (attention 0 for
# an MLP); replicated over two devices it reports communication; --baseline adds PyTorch CPU's
# samples/s on the same model and optimizer (AdamW with the flags given) and the ratio (PyTorch
# missing: a failure under CI=true, where scripts/setup.sh installs it, a skip elsewhere); the
# language model char_gpt at batch 1 gives tokens/s = samples/s x 128, an initial loss near ln 256
# (valid token ids and a valid label per position), a positive attention part on both drivers,
# and (with PyTorch) PyTorch's tokens/s under the same SGD, the faster of 1 thread and all cores,
# with as many timed steps; PyTorch's BLAS is named (under CI=true OpenBLAS and its kernel), and a
# PyTorch made to load netlib's reference BLAS is reported as NOT COMPARABLE; scripts/train_compare.py
# (the main job beside PyTorch's same recipe, one epoch) trains both and keeps PyTorch's faster
# thread count; the text output prints the command that reproduces it; bad options fail.
# Args: VKTRAIN_BINARY SOURCE_DIR
set -uo pipefail
bin=$1 src=$2
. "$(dirname "$0")/check.bash" # fails, check NAME STATUS
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

verify() { # verify FILE STRATEGY NDEVICES
    python3 - "$@" <<'PY'
import json, sys
path, strategy, ndev = sys.argv[1], sys.argv[2], int(sys.argv[3])
lines = [l for l in open(path) if l.strip().startswith("{")]
o = json.loads(lines[-1])
assert o["benchmark"] == "train" and o["model"] == "fashion_mlp" and o["strategy"] == strategy, o
assert o["device"] and o["driver"] and o["api_version"].count(".") == 2
assert o["batch"] == 128 and o["steps"] >= 1
assert o["samples_per_sec"] > 0 and o["step_ms"] > 0 and o["step_gflops"] > 0
assert abs(o["samples_per_sec"] - 128 / (o["step_ms"] * 1e-3)) <= 1e-6 * o["samples_per_sec"], o
assert o["command"].startswith("vktrain bench train")
assert len(o["devices"]) == ndev, o["devices"]
for d in o["devices"]:
    parts = [d[k] for k in ("matmul_fraction", "attention_fraction", "other_kernels_fraction",
                            "communication_fraction", "host_and_idle_fraction")]
    assert all(0 <= p <= 1 for p in parts), d
    assert abs(sum(parts) - 1) < 1e-6 or parts[4] == 0, d
    assert d["matmul_fraction"] > 0.2, d  # an MLP step is mostly matmuls
    assert d["attention_fraction"] == 0, d  # and has no attention
assert "tokens_per_sec" not in o and "tokens_per_sample" not in o, o  # nor token ids
if strategy == "single":
    assert o["matmul_alone_gflops"] > 0 and o["step_vs_matmul_alone"] > 0, o
if strategy == "replicated":
    assert all(d["communication_fraction"] > 0 for d in o["devices"]), o["devices"]
PY
}

for dev in lavapipe swiftshader; do
    "$bin" bench train --device $dev --steps 2 --json > "$out/$dev.txt" 2> "$out/err"
    check "bench train on $dev runs" $?
    verify "$out/$dev.txt" single 1; check "bench train on $dev: JSON fields and split" $?
    grep -q "^  reproduce: vktrain bench train --device $dev --steps 2 --json$" "$out/$dev.txt"
    check "bench train on $dev prints how to reproduce it" $?
    grep -Eq '^  host: .+, [0-9]+ logical CPUs, ' "$out/$dev.txt" &&
        python3 "$(dirname "$0")/host_check.py" "$out/$dev.txt"
    check "bench train on $dev names the host, as this machine is (host_check.py)" $?
done

"$bin" bench train --device lavapipe,lavapipe --strategy replicated --steps 2 --json \
    > "$out/repl.txt" 2> "$out/err"
check "bench train replicated runs" $?
verify "$out/repl.txt" replicated 2; check "bench train replicated: communication reported" $?

# --baseline: PyTorch on the same model and batch.
skip="" torch=""
if /usr/bin/python3 -c 'import torch' 2> /dev/null; then
    torch=1
elif [ "${CI:-}" = "true" ]; then
    check "python3-torch is installed under CI=true (scripts/setup.sh test)" 1
else
    skip="python3-torch is not installed for /usr/bin/python3"
fi
check_baseline() { # check_baseline FILE MODEL BATCH OPTIMIZER ROUNDS: the baseline object of FILE
    python3 - "$@" <<'PY'
import json, os, sys
path, model, batch, optimizer = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
rounds_wanted = int(sys.argv[5])
o = json.loads([l for l in open(path) if l.strip().startswith("{")][-1])
b = o["baseline"]
assert b["library"] == "pytorch" and b["version"] and b["blas"] and b["blas_library"], b
assert b["model"] == model and b["batch"] == batch and b["samples_per_sec"] > 0, b
assert b["optimizer"] == optimizer, (b["optimizer"], optimizer)
assert b["omp_wait_policy"] == "PASSIVE", b
# --rounds rounds (5 by default), each vktrain's steps then PyTorch's at 1 thread and at all
# cores; a round's ratio is vktrain's over PyTorch's faster count, the ratio their median
def median(v):
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
def close(a, b):
    return abs(a - b) <= 1e-9 * abs(b)
rounds, counts = b["rounds"], {"1", str(os.cpu_count())}
assert len(rounds) == b["rounds_count"] == rounds_wanted, (len(rounds), rounds_wanted)
for r in rounds:
    assert set(r["pytorch"]) == counts and min(r["pytorch"].values()) > 0 and r["vktrain"] > 0, r
    assert close(r["ratio"], r["vktrain"] / max(r["pytorch"].values())), r
assert close(b["ratio"], median([r["ratio"] for r in rounds])), b
assert close(b["samples_per_sec"], median([max(r["pytorch"].values()) for r in rounds])), b
assert close(b["vktrain_samples_per_sec"], median([r["vktrain"] for r in rounds])), b
tried = b["threads_tried"]  # each count's median over the rounds
assert set(tried) == counts, tried
for t in counts:
    assert close(tried[t], median([r["pytorch"][t] for r in rounds])), (t, tried)
wins = {t: sum(max(r["pytorch"], key=r["pytorch"].get) == t for r in rounds) for t in counts}
assert b["threads_rounds_won"] == wins[str(b["threads"])] == max(wins.values()), (wins, b)
# the same number of timed steps as vktrain's; OpenBLAS (with the kernel it chose) as the system
# BLAS under CI (scripts/setup.sh test installs libopenblas0-pthread), so the ratio compares
assert b["steps"] == o["steps"], (b["steps"], o["steps"])
assert b["comparable"] == (b["blas_kind"] != "reference"), b
if os.environ.get("CI") == "true":
    assert b["blas_kind"].startswith("openblas ") and b["comparable"], b
PY
}
if [ -n "$torch" ]; then
    "$bin" bench train --device lavapipe --steps 3 --baseline --rounds 3 --optimizer adamw \
        --lr 0.002 --weight-decay 0.05 --json > "$out/base.txt" 2> "$out/err"
    check "bench train --baseline runs" $?
    check_baseline "$out/base.txt" fashion_mlp 128 \
        "AdamW (lr 0.002, betas 0.9/0.999, eps 1e-08, weight decay 0.05)" 3
    check "bench train --baseline: PyTorch's samples/s in rounds, the ratio, the same AdamW" $?
    grep -q 'vktrain / PyTorch = ' "$out/base.txt"; check "text names the ratio" $?
    grep -Eq '^  the ratio is the median of 3 rounds, each .*: [0-9.]+ / [0-9.]+ / [0-9.]+; ' \
        "$out/base.txt"; check "text gives each round's ratio" $?
    # PyTorch made to load netlib's reference BLAS: the output says the ratio compares nothing.
    LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/blas "$bin" bench train --device lavapipe \
        --model "$src/assets/models/tiny_mlp.json" --steps 2 --baseline --json > "$out/ref.txt" \
        2> "$out/err"
    check "bench train --baseline on the reference BLAS runs" $?
    grep -q 'NOT COMPARABLE: PyTorch ran on netlib.s reference BLAS' "$out/ref.txt" &&
        python3 -c "import json,sys; b = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])['baseline']; sys.exit(0 if b['blas_kind'] == 'reference' and b['comparable'] is False else 1)" "$out/ref.txt"
    check "on the reference BLAS: NOT COMPARABLE in the text, comparable false in the JSON" $?
    # scripts/train_compare.py: the main job end to end beside the same recipe in PyTorch (one
    # epoch here): both train (accuracy), PyTorch's faster thread count kept, the ratios its own.
    /usr/bin/python3 "$src/scripts/train_compare.py" --vktrain "$bin" --device lavapipe         --epochs 1 --json > "$out/cmp.txt" 2> "$out/err"
    check "train_compare.py runs" $?
    python3 - "$out/cmp.txt" <<'PY'
import json, os, sys
o = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
v, p, tried = o["vktrain"], o["pytorch"], o["pytorch_tried"]
assert v["samples_per_sec"] > 0 and 0.6 < v["test_accuracy"] <= 1 and v["wall_seconds"] > 0, v
assert sorted(r["threads"] for r in tried) == sorted({1, os.cpu_count()}), tried
assert p["wall_seconds"] == min(r["wall_seconds"] for r in tried), o
for r in tried:
    assert r["samples_per_sec"] > 0 and 0.6 < r["test_accuracy"] <= 1, r
    assert r["omp_wait_policy"] == "PASSIVE" and r["blas_library"], r
assert o["comparable"] == (p["blas_kind"] != "reference"), o
if os.environ.get("CI") == "true":
    assert p["blas_kind"].startswith("openblas ") and o["comparable"], p
assert abs(o["ratio_wall"] - p["wall_seconds"] / v["wall_seconds"]) < 1e-9 * o["ratio_wall"], o
assert abs(o["ratio_samples_per_sec"] - v["samples_per_sec"] / p["samples_per_sec"]) < \
    1e-9 * o["ratio_samples_per_sec"], o
PY
    check "train_compare.py: both sides trained, PyTorch's best kept and its BLAS named" $?
fi

# A language model: token ids in, a label per position, tokens/s, attention as its own part, on
# both drivers; PyTorch (when present) on the same model with vktrain's default SGD.
verify_lm() { # verify_lm FILE
    python3 - "$1" <<'PY'
import json, math, sys
o = json.loads([l for l in open(sys.argv[1]) if l.strip().startswith("{")][-1])
assert o["model"] == "char_gpt" and o["batch"] == 1 and o["tokens_per_sample"] == 128, o
assert o["samples_per_sec"] > 0, o
assert abs(o["tokens_per_sec"] - 128 * o["samples_per_sec"]) <= 1e-9 * o["tokens_per_sec"], o
# valid ids and a valid class at every position: near ln 256 at initialization
assert abs(o["initial_loss"] - math.log(256)) < 1, o
(d,) = o["devices"]
parts = [d[k] for k in ("matmul_fraction", "attention_fraction", "other_kernels_fraction",
                        "communication_fraction", "host_and_idle_fraction")]
assert all(0 <= p <= 1 for p in parts), d
assert abs(sum(parts) - 1) < 1e-6 or parts[4] == 0, d
assert 0 < d["attention_fraction"] < 1 and d["matmul_fraction"] > 0, d
assert d["other_kernels_fraction"] > 0, d  # layernorm, gelu, embedding, the loss, SGD
PY
}
"$bin" bench train --model "$2/assets/models/char_gpt.json" --device lavapipe --batch 1 \
    --steps 2 ${torch:+--baseline} --json > "$out/lm.txt" 2> "$out/err"
check "bench train char_gpt on lavapipe runs${torch:+ with --baseline}" $?
verify_lm "$out/lm.txt"; check "bench train char_gpt on lavapipe: tokens/s and attention" $?
"$bin" bench train --model "$2/assets/models/char_gpt.json" --device swiftshader --batch 1 \
    --steps 1 --json > "$out/lm_ss.txt" 2> "$out/err"
check "bench train char_gpt on swiftshader runs" $?
verify_lm "$out/lm_ss.txt"; check "bench train char_gpt on swiftshader: tokens/s and attention" $?
grep -Eq '^bench train: char_gpt, batch 1, .* samples/s \([0-9]+ tokens/s, 128 a sample\)' \
    "$out/lm.txt"; check "char_gpt text: tokens/s" $?
grep -Eq '^  #[0-9]+ .*: matmul [0-9.]+%, attention [0-9.]+%, other kernels' "$out/lm.txt"
check "char_gpt text: attention in the split" $?
if [ -n "$torch" ]; then
    check_baseline "$out/lm.txt" char_gpt 1 "SGD (lr 0.05, momentum 0.9, weight decay 0)" 5
    check "char_gpt --baseline: PyTorch on the same SGD" $?
    python3 - "$out/lm.txt" <<'PY'; check "char_gpt --baseline: PyTorch's tokens/s" $?
import json, sys
b = json.loads([l for l in open(sys.argv[1]) if l.strip().startswith("{")][-1])["baseline"]
assert b["tokens_per_sample"] == 128 and b["tokens_per_sec"] > 0, b
assert abs(b["tokens_per_sec"] - 128 * b["samples_per_sec"]) <= 1e-9 * b["tokens_per_sec"], b
PY
    grep -Eq '^  PyTorch .*: [0-9.]+ samples/s \([0-9]+ tokens/s\); vktrain / PyTorch = ' \
        "$out/lm.txt"; check "char_gpt text: PyTorch's tokens/s and the ratio" $?
fi
VKT_PYTHON=/nonexistent/python "$bin" bench train --device lavapipe --steps 1 --baseline \
    > /dev/null 2> "$out/err"; rc=$?
[ $rc -ne 0 ] && grep -q 'PyTorch did not run.*python3-torch' "$out/err"
check "--baseline without PyTorch fails with a message" $?

# A PyTorch that answers the start and then dies: a message with its last words, no hang.
printf '#!/bin/sh\necho "{\\"library\\": \\"pytorch\\"}"\necho "fake torch: gone"\nexit 3\n' \
    > "$out/fake_py"
chmod +x "$out/fake_py"
VKT_PYTHON="$out/fake_py" "$bin" bench train --device lavapipe --steps 1 --baseline \
    > /dev/null 2> "$out/err"; rc=$?
[ $rc -ne 0 ] && grep -q 'PyTorch did not run.*fake torch: gone' "$out/err"
check "--baseline with a PyTorch that dies after starting fails with its message" $?

"$bin" bench train --steps 0 > /dev/null 2> "$out/err"; rc=$?
[ $rc -eq 2 ] && grep -q -- '--steps' "$out/err"; check "bad --steps" $?
"$bin" bench train --rounds 0 --baseline > /dev/null 2> "$out/err"; rc=$?
[ $rc -eq 2 ] && grep -q -- '--rounds' "$out/err"; check "bad --rounds" $?
"$bin" bench train --model /nonexistent.json --steps 1 > /dev/null 2> "$out/err"; rc=$?
[ $rc -ne 0 ] && grep -q 'nonexistent.json' "$out/err"; check "missing model file" $?

"$bin" --help | grep 'bench train \[--steps N\] \[--baseline\]' > /dev/null; check "--help lists bench train" $?

echo "test_cli_bench_train: $fails failed"
[ $fails -eq 0 ] || exit 1
if [ -n "$skip" ]; then echo "SKIP --baseline: $skip"; exit 77; fi
