#!/usr/bin/env bash
# test_cli_text.sh: `vktrain train` / `eval` on data with a label per position, end to end.
# 1. Token ids from .npy (int32 X [N, T], int64 Y [N, T]) for a model of existing kinds whose
#    output is [T, V] (input [T, 1], dense layers along the last dimension): the loss falls on
#    lavapipe and SwiftShader, and eval's loss and accuracy of the checkpoint equal the mean
#    cross-entropy over every position and the fraction of correct positions that Python computes
#    in double precision from the checkpoint's tensors.
# 2. The refusals: labels per sample that are not the model's targets per sample (both ways), a
#    label >= V and a negative or too large token id (named by row / sample and position), text
#    for a model that is not input [T] / output [T, 256], empty and missing text, two sources at
#    once, malformed --data-text lists.
# 3. Text (--data-text), with a byte-level model: input [T] through an `embedding` layer (the
#    transformer kinds; this part runs only when that kind is in the build): the loss falls, the
#    same seed gives the same parameters bit for bit, a resumed run equals an uninterrupted one,
#    and a directory, several files, a too-short text and --augment are handled as documented.
# The windows themselves are checked in test_data. Args: VKTRAIN_BINARY SOURCE_DIR
set -uo pipefail
bin=$1 src=$2
. "$(dirname "$0")/check.bash" # fails, check NAME STATUS
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# ---------------------------------------------------------------------------------------------
# 1. Token ids and a label per position from .npy

seq=$work/seq.json # [6, 1] -> [6, 32] -> [6, 8]: eight classes at each of six positions
cat > "$seq" <<'JSON'
{"name": "seq", "input": [6, 1],
 "layers": [{"type": "dense", "units": 32}, {"type": "relu"}, {"type": "dense", "units": 8}],
 "loss": "softmax_cross_entropy"}
JSON
one=$work/one.json # [6] -> [8]: one label per sample
cat > "$one" <<'JSON'
{"name": "one", "input": [6], "layers": [{"type": "dense", "units": 8}],
 "loss": "softmax_cross_entropy"}
JSON
python3 - "$work" <<'PY'
import random, struct, sys
d = sys.argv[1]
def save(name, rows, code, descr):  # a .npy file (format 1.0), as numpy.save writes it
    shape = f"({len(rows)},)" if not isinstance(rows[0], list) else f"({len(rows)}, {len(rows[0])})"
    flat = [v for r in rows for v in (r if isinstance(r, list) else [r])]
    head = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}"
    head += " " * ((64 - (10 + len(head) + 1) % 64) % 64) + "\n"
    open(f"{d}/{name}", "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head.encode() + struct.pack(f"<{len(flat)}{code}", *flat))
random.seed(3)
x = [[random.randrange(8) for _ in range(6)] for _ in range(256)]
y = [[(v + 1) % 8 for v in r] for r in x]   # the next class of each position's id
save("x.npy", x, "i", "<i4"); save("y.npy", y, "q", "<i8")
save("y1.npy", [r[0] for r in y], "q", "<i8")  # one label per sample
bad = [r[:] for r in y]; bad[1][2] = 9; save("ybig.npy", bad, "q", "<i8")
neg = [r[:] for r in x]; neg[3][4] = -1; save("xneg.npy", neg, "i", "<i4")
big = [r[:] for r in x]; big[5][0] = 1 << 24; save("xbig.npy", big, "q", "<i8")
PY
check "write the .npy files" $?

npy="--model $seq --data-npy $work/x.npy,$work/y.npy --batch 32 --epochs 6 --optimizer adamw --lr 0.02 --seed 4 --quiet"
for dev in llvmpipe swiftshader; do
    "$bin" train $npy --device $dev --json --metrics "$work/$dev.jsonl" --save "$work/$dev.safetensors" > "$work/$dev.json"
    check "train on int32 ids and int64 labels per position ($dev)" $?
    python3 - "$work/$dev.jsonl" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"step"' in l and json.loads(l)["type"] == "step"]
first, last = steps[0]["loss"], steps[-1]["loss"]
print(f"     loss {first:.4f} -> {last:.4f} over {len(steps)} steps")
sys.exit(0 if first > 2.0 and last < 1.0 and last < 0.5 * first else 1)
PY
    check "$dev: the loss starts at chance (ln 8 = 2.08) or above and falls below half of it and below 1" $?
    "$bin" eval --model "$seq" --init "$work/$dev.safetensors" --data-npy "$work/x.npy,$work/y.npy" --batch 48 --device $dev --json > "$work/$dev.eval.json"
    check "eval on $dev" $?
    python3 - "$work/$dev.safetensors" "$work/$dev.eval.json" "$work" <<'PY'
import json, math, struct, sys
ck, ev, d = sys.argv[1:4]
def load(p):  # safetensors (F32) or .npy (format 1.0) as flat lists
    raw = open(p, "rb").read()
    if p.endswith(".npy"):
        n = struct.unpack("<H", raw[8:10])[0]; code = "i" if "<i4" in raw[10:10 + n].decode() else "q"
        return list(struct.unpack(f"<{(len(raw) - 10 - n) // struct.calcsize(code)}{code}", raw[10 + n:]))
    n = struct.unpack("<Q", raw[:8])[0]; h = json.loads(raw[8:8 + n])
    return {k: struct.unpack(f"<{(v['data_offsets'][1] - v['data_offsets'][0]) // 4}f", raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in h.items() if k != "__metadata__"}
t = load(ck); x = load(f"{d}/x.npy"); y = load(f"{d}/y.npy")
w0, b0, w2, b2 = t["0.weight"], t["0.bias"], t["2.weight"], t["2.bias"]  # [32, 1], [32], [8, 32], [8]
loss, correct = 0.0, 0
for xi, yi in zip(x, y):  # every position of every sample: dense(1 -> 32), relu, dense(32 -> 8)
    h = [max(0.0, w0[j] * xi + b0[j]) for j in range(32)]
    z = [sum(w2[c * 32 + j] * h[j] for j in range(32)) + b2[c] for c in range(8)]
    m = max(z); lse = m + math.log(sum(math.exp(v - m) for v in z))
    loss += lse - z[yi]; correct += z.index(m) == yi
loss /= len(y); acc = correct / len(y)
r = json.loads(open(ev).read().strip().splitlines()[-1])
print(f"     eval loss {r['test_loss']:.6f} accuracy {r['test_accuracy']:.6f}; in double: {loss:.6f} {acc:.6f} ({correct} of {len(y)} positions)")
ok = abs(r["test_loss"] - loss) <= 1e-4 * max(1, loss) and abs(r["test_accuracy"] - acc) < 0.5 / len(y)
sys.exit(0 if ok else 1)
PY
    check "$dev: eval = the mean cross-entropy over positions and correct positions / (samples x 6), in double" $?
done

# ---------------------------------------------------------------------------------------------
# 2. Refusals

printf 'a few bytes of text, enough to read\n' > "$work/short.txt"
: > "$work/empty.txt"
expect_error "one label per sample for an output [6, 8]" "expects 6 labels per sample.*has 1 per sample" \
    train --model "$seq" --data-npy "$work/x.npy,$work/y1.npy" --device llvmpipe
expect_error "six labels per sample for an output [8]" "expects one label per sample.*has 6 per sample" \
    train --model "$one" --data-npy "$work/x.npy,$work/y.npy" --device llvmpipe
expect_error "a label >= V, by sample and position" "label 9 at sample 1, position 2.*8 classes" \
    train --model "$seq" --data-npy "$work/x.npy,$work/ybig.npy" --device llvmpipe
expect_error "a negative token id, by row" "row 3, column 4 holds token id -1" \
    train --model "$seq" --data-npy "$work/xneg.npy,$work/y.npy" --device llvmpipe
expect_error "a token id of 2^24, by row" "row 5, column 0 holds token id 16777216" \
    train --model "$seq" --data-npy "$work/xbig.npy,$work/y.npy" --device llvmpipe
expect_error "text for a model that is not input [T]" "input \[T\].*output \[T, 256\].*has input \[784\], output \[10\]" \
    train --data-text "$work/short.txt" --device llvmpipe
expect_error "text for an output [6, 8]" "has input \[6, 1\], output \[6, 8\]" \
    train --model "$seq" --data-text "$work/short.txt" --device llvmpipe
expect_error "empty text" "empty" train --data-text "$work/empty.txt" --device llvmpipe
expect_error "missing text" "cannot open $work/nothing.txt" \
    train --data-text "$work/short.txt,$work/nothing.txt" --device llvmpipe
expect_error "text and .npy at once" "one source of data" \
    train --model "$seq" --data-text "$work/short.txt" --data-npy "$work/x.npy,$work/y.npy" --device llvmpipe
expect_error "--data-text a,,b" "FILE\[,FILE...\]" train --data-text "a,,b"
expect_error "--data-text ''" "FILE\[,FILE...\]" train --data-text ""
expect_error "--data-text without a value" "needs a value" train --data-text

# ---------------------------------------------------------------------------------------------
# 3. Text, with a byte-level model (an embedding, then dense layers per position)

lm=$work/byte_mlp.json # [16] ids -> [16, 24] -> [16, 64] -> [16, 256]: a bigram model per position
cat > "$lm" <<'JSON'
{"name": "byte_mlp", "input": [16],
 "layers": [{"type": "embedding", "num_embeddings": 256, "embedding_dim": 24},
            {"type": "dense", "units": 64}, {"type": "relu"}, {"type": "dense", "units": 256}],
 "loss": "softmax_cross_entropy"}
JSON
"$bin" model "$lm" > /dev/null
check "the byte-level model parses" $?
mkdir -p "$work/corpus"
python3 - "$work/corpus" <<'PY'
import sys, random
d = sys.argv[1]
random.seed(1)
words = "the cat sat on a mat and the dog ran to its bed while rain fell on the town".split()
for name in ("b.txt", "a.txt"):
    open(f"{d}/{name}", "w").write("\n".join(" ".join(random.choice(words) for _ in range(9)) for _ in range(150)) + "\n")
open(f"{d}/a.txt.dat", "wb").write(bytes(range(256)) * 4)  # an index file: never read
PY
txt="--model $lm --data-text $work/corpus --batch 16 --epochs 2 --limit-train 160 --limit-test 40 --optimizer adamw --lr 0.01 --seed 3 --quiet --device llvmpipe"
"$bin" train $txt --json --metrics "$work/text.jsonl" --save "$work/t1.safetensors" > "$work/text.json"
check "train on a directory of text" $?
python3 - "$work/text.jsonl" "$work/text.json" <<'PY'
import json, math, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if json.loads(l)["type"] == "step"]
r = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
first, last = steps[0]["loss"], steps[-1]["loss"]
print(f"     {len(steps)} steps, loss {first:.3f} -> {last:.3f}; validation loss {r['test_loss']:.3f} accuracy {r['test_accuracy']:.3f}")
ok = len(steps) == 20 and abs(first - math.log(256)) < 1.0 and last < 3.5 and r["test_loss"] < 3.5 and r["test_accuracy"] > 0.15
sys.exit(0 if ok else 1)
PY
check "text: 10 steps an epoch (160 windows / 16), the loss falls from ln 256 to below 3.5" $?
"$bin" train $txt --no-eval --save "$work/t2.safetensors"; check "the same text run again" $?
same_tensors "$work/t1.safetensors" "$work/t2.safetensors"; check "text: the same seed gives the same parameters, bit for bit" $?
"$bin" train $txt --no-eval --seed 4 --save "$work/t3.safetensors"; check "another seed" $?
! same_tensors "$work/t1.safetensors" "$work/t3.safetensors"; check "text: another seed gives other parameters" $?
"$bin" train $txt --no-eval --max-steps 7 --save "$work/tp.safetensors"; check "text run stopped at step 7" $?
"$bin" train $txt --no-eval --resume "$work/tp.safetensors" --save "$work/tp.safetensors"; check "text run resumed" $?
same_tensors "$work/t1.safetensors" "$work/tp.safetensors"; check "text: resume = uninterrupted, bit for bit" $?
"$bin" eval --model "$lm" --init "$work/t1.safetensors" --data-text "$work/corpus" --limit-test 40 --batch 7 --device llvmpipe --json > "$work/te.json"
check "eval on the validation windows" $?
a1=$(jfield "$work/text.json" test_loss) a2=$(jfield "$work/te.json" test_loss)
python3 -c "import sys; sys.exit(0 if abs($a1 - $a2) < 1e-4 else 1)"; check "eval of the checkpoint gives the validation loss training reported ($a1, $a2)" $?
# The directory is a.txt then b.txt (sorted, the .dat skipped): naming them so is the same run.
"$bin" train ${txt/$work\/corpus/$work/corpus/a.txt,$work/corpus/b.txt} --no-eval --save "$work/t4.safetensors"
check "text from a comma list of files" $?
same_tensors "$work/t1.safetensors" "$work/t4.safetensors"; check "the directory = its files in sorted order, without .dat" $?
"$bin" train ${txt/$work\/corpus/$work/corpus/b.txt --data-text $work/corpus/a.txt} --no-eval --save "$work/t5.safetensors"
check "text from repeated --data-text" $?
! same_tensors "$work/t1.safetensors" "$work/t5.safetensors"; check "files in another order give another corpus" $?
"$bin" train ${txt/llvmpipe/swiftshader} --json > "$work/ss.json"; check "train on text on SwiftShader" $?
l1=$(jfield "$work/ss.json" test_loss)
python3 -c "import sys; sys.exit(0 if abs($a1 - $l1) < 0.05 else 1)"; check "SwiftShader's validation loss $l1 is lavapipe's $a1 within 0.05" $?
expect_error "text shorter than ten windows" "too short.*at least 170 bytes" \
    train --model "$lm" --data-text "$work/short.txt" --device llvmpipe
expect_error "--augment on text" "does not apply to text" train $txt --augment flip
# No data named and a byte-level model: fortunes, Debian's (scripts/setup.sh installs it).
if [ -d /usr/share/games/fortunes ] || [ "${CI:-}" = true ]; then
    "$bin" train --model "$lm" --max-steps 2 --batch 8 --limit-test 16 --device llvmpipe --json > "$work/f.json"
    check "a byte-level model trains on fortunes by default" $?
    grep -q '"steps":2' "$work/f.json"; check "two steps on fortunes" $?
fi

echo "test_cli_text: $fails failed"
[ $fails -eq 0 ]
