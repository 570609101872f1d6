#!/usr/bin/env bash
# test_cli_generate.sh: `vktrain generate` samples from what a language model learned.
# 1. A small GPT (embedding, position embedding, one attention block and one MLP block) trained
#    on lavapipe on text that repeats "abcdefgh" must continue a prompt with the cycle: greedy
#    (--temperature 0) from "abc" prints exactly "abc" and the next 45 bytes of the cycle, past
#    the model's window of 16 bytes (the window slides); --top-k 1 at any temperature is the same
#    text; the same on SwiftShader from the same checkpoint.
# 2. Sampling: the same --seed gives the same text, byte for byte; another seed another text (from
#    the untrained parameters, where every byte has about the same probability), and the output
#    is the prompt, --tokens bytes and a newline.
# 3. Refusals: no --init, a model that is not a language model, --tokens 0, a negative
#    temperature, --top-k -1, a prompt byte the vocabulary lacks.
# Args: VKTRAIN_BINARY SOURCE_DIR
set -uo pipefail
bin=$1 src=$2
. "$(dirname "$0")/check.bash" # fails, check, expect_error
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

gpt=$work/tiny_gpt.json # [16] byte ids -> [16, 256] next-byte logits
cat > "$gpt" <<'JSON'
{"name": "tiny_gpt", "input": [16],
 "layers": [
  {"type": "embedding", "num_embeddings": 256, "embedding_dim": 32},
  {"type": "position_embedding", "max_len": 16},
  {"type": "residual", "layers": [{"type": "layernorm"}, {"type": "causal_self_attention", "heads": 2}]},
  {"type": "residual", "layers": [{"type": "layernorm"}, {"type": "dense", "units": 64},
                                  {"type": "gelu"}, {"type": "dense", "units": 32}]},
  {"type": "layernorm"},
  {"type": "dense", "units": 256}],
 "loss": "softmax_cross_entropy"}
JSON
python3 -c "open('$work/abc.txt', 'w').write('abcdefgh' * 3000)"

# 1. What it learned
"$bin" train --model "$gpt" --data-text "$work/abc.txt" --device llvmpipe --optimizer adamw \
    --lr 0.01 --batch 16 --epochs 1 --limit-train 1600 --save "$work/ck.safetensors" --quiet \
    --json > "$work/train.json" 2> "$work/train.err"
check "a small GPT trains on the cycle (validation accuracy $(jfield "$work/train.json" test_accuracy 2> /dev/null))" \
    "$(python3 -c "import json; r = json.loads(open('$work/train.json').read().splitlines()[-1]); print(0 if r['test_accuracy'] > 0.99 else 1)" 2> /dev/null || echo 1)"
want=$(python3 -c "print(('abcdefgh' * 7)[:48])")
gen() { "$bin" generate --model "$gpt" --init "$work/ck.safetensors" "$@" 2> "$work/gen.err"; }
got=$(gen --device llvmpipe --prompt abc --tokens 45 --temperature 0)
check "greedy from \"abc\" continues the cycle past the 16-byte window on lavapipe: $got" \
    "$([ "$got" = "$want" ] && echo 0 || echo 1)"
got=$(gen --device llvmpipe --prompt abc --tokens 45 --temperature 1.5 --top-k 1 --seed 9)
check "--top-k 1 at temperature 1.5 is the greedy text" "$([ "$got" = "$want" ] && echo 0 || echo 1)"
got=$(gen --device swiftshader --prompt abc --tokens 45 --temperature 0)
check "greedy on SwiftShader from the same checkpoint: $got" "$([ "$got" = "$want" ] && echo 0 || echo 1)"

# 2. Sampling from the untrained parameters (a run of one step at a tiny rate).
"$bin" train --model "$gpt" --data-text "$work/abc.txt" --device llvmpipe --optimizer sgd \
    --lr 1e-9 --batch 1 --max-steps 1 --no-eval --save "$work/init.safetensors" --quiet \
    > /dev/null 2> "$work/init.err" || cat "$work/init.err"
sample() {
    "$bin" generate --model "$gpt" --init "$work/init.safetensors" --device llvmpipe \
        --prompt xy --tokens 200 "$@" > "$work/s.$*" 2> "$work/gen.err"
}
sample --seed 3; sample --seed 3 --temperature 1; sample --seed 4
cmp -s "$work/s.--seed 3" "$work/s.--seed 3 --temperature 1"
check "the same seed gives the same 200 sampled bytes" $?
! cmp -s "$work/s.--seed 3" "$work/s.--seed 4"
check "another seed gives other bytes" $?
n=$(wc -c < "$work/s.--seed 3")
check "the output is the prompt (2 bytes), 200 tokens and a newline: $n bytes" \
    "$([ "$n" -eq 203 ] && head -c 2 "$work/s.--seed 3" | grep -qx xy && echo 0 || echo 1)"

# 3. Refusals
expect_error "no --init" "needs --init" generate --model "$gpt" --device llvmpipe
expect_error "not a language model" "is not a language model" generate --init \
    "$work/ck.safetensors" --model "$src/assets/models/tiny_mlp.json" --device llvmpipe
expect_error "--tokens 0" "--tokens must be" generate --model "$gpt" --init "$work/ck.safetensors" \
    --tokens 0
expect_error "a negative temperature" "--temperature must be" generate --model "$gpt" \
    --init "$work/ck.safetensors" --temperature -1
expect_error "--top-k -1" "--top-k must be" generate --model "$gpt" --init "$work/ck.safetensors" \
    --top-k -1
small=$work/small_vocab.json # 16 token ids: the byte 'z' (122) is not one of them
sed -e 's/"num_embeddings": 256/"num_embeddings": 16/' -e 's/"units": 256/"units": 16/' "$gpt" > "$small"
python3 - "$work" <<'PY'
import struct, sys
def save(path, rows):  # int32 [N, 16], as numpy.save writes it
    head = "{'descr': '<i4', 'fortran_order': False, 'shape': (%d, 16), }" % len(rows)
    head += " " * ((64 - (10 + len(head) + 1) % 64) % 64) + "\n"
    flat = [v for r in rows for v in r]
    open(path, "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head.encode()
                           + struct.pack("<%di" % len(flat), *flat))
save(sys.argv[1] + "/x.npy", [[(i + k) % 16 for k in range(16)] for i in range(8)])
save(sys.argv[1] + "/y.npy", [[(i + k + 1) % 16 for k in range(16)] for i in range(8)])
PY
"$bin" train --model "$small" --data-npy "$work/x.npy,$work/y.npy" --device llvmpipe --max-steps 1 \
    --no-eval --save "$work/small.safetensors" --quiet > /dev/null 2> "$work/small.err" ||
    cat "$work/small.err"
expect_error "a prompt byte outside the vocabulary" "is not a token of this model (V = 16)" generate \
    --model "$small" --init "$work/small.safetensors" --device llvmpipe --prompt z

exit $((fails > 0))
