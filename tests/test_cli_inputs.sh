#!/usr/bin/env bash
# test_cli_inputs.sh: inputs that are not what they claim to be get a clear error, in bounded time,
# from every reader of the CLI: a FIFO, a directory or a device given where a file is expected
# (model, data, text, checkpoint, trace; a FIFO used to block the run forever), numbers past what
# a flag can hold (each used to be converted to an integer with undefined behaviour), and the
# messages that named the wrong flag, a matmul variant list (VKT_MATMUL_VARIANT) that names no
# variant, and a VKT_* variable set to a word it does not take. Also: a checkpoint's "model" metadata is the model's name.
# Args: VKTRAIN_BINARY SOURCE_DIR
set -uo pipefail
bin=$1 src=$2
. "$(dirname "$0")/check.bash" # fails, check NAME STATUS, expect_error
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tiny=$src/assets/models/tiny_mlp.json
dev="--device llvmpipe"

# A small data set: 64 samples of tiny_mlp's 784 features (.npy, written by hand: no numpy).
PYTHONPATH="$src/tests" python3 - "$work" <<'PY'
import random, sys
from npy_write import npy
random.seed(1)
npy(sys.argv[1] + "/x.npy", "<f4", (64, 784), [random.random() for _ in range(64 * 784)])
npy(sys.argv[1] + "/y.npy", "<i8", (64,), [random.randrange(10) for _ in range(64)])
PY
data="--data-npy $work/x.npy,$work/y.npy"
"$bin" train --model "$tiny" $data $dev --epochs 1 --quiet --save "$work/ck.safetensors"
check "train tiny_mlp on the .npy arrays" $?
python3 - "$work/ck.safetensors" <<'PY'
import json, struct, sys
d = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", d[:8])[0]
sys.exit(0 if json.loads(d[8:8 + n])["__metadata__"]["model"] == "tiny_mlp" else 1)
PY
check "the checkpoint's model metadata is the model's name (tiny_mlp)" $?

# 1. Not a regular file. Each reader refuses a FIFO (with no writer: opening one for reading used to
# wait for a writer forever), a directory and a character device, saying what the path is; the
# run is bounded by timeout so that a regression fails instead of hanging the suite.
mkfifo "$work/fifo"
bounded() { timeout 20 "$bin" "$@"; }
nonreg() { # nonreg NAME PATTERN ARGS... (with FILE where the path goes)
    local name=$1 pattern=$2; shift 2
    local paths=("$work/fifo" /dev/zero "$work")
    [ "$name" = "text file" ] && paths=("$work/fifo" /dev/zero) # a directory: its files
    for path in "${paths[@]}"; do
        local args=() kind
        case $path in "$work/fifo") kind="a FIFO" ;; /dev/zero) kind="a character device" ;; *) kind="a directory" ;; esac
        for a in "$@"; do args+=("${a//FILE/$path}"); done
        bounded "${args[@]}" > "$work/out" 2> "$work/err"; local rc=$?
        if [ $rc -ne 0 ] && [ $rc -lt 124 ] && grep -q "is $kind" "$work/err" && grep -qi -- "$pattern" "$work/err"; then
            echo "ok   $name, $kind: $(head -c 200 "$work/err")"
        else
            echo "FAIL $name, $kind (exit $rc): $(cat "$work/err")"; fails=$((fails + 1))
        fi
    done
}
nonreg "model file" "model file" train --model FILE $data $dev --epochs 1
nonreg "data .npy (features)" "data file" train --model "$tiny" --data-npy "FILE,$work/y.npy" $dev --epochs 1
nonreg "data .npy (labels)" "data file" train --model "$tiny" --data-npy "$work/x.npy,FILE" $dev --epochs 1
nonreg "checkpoint (eval --init)" "checkpoint" eval --model "$tiny" --init FILE $data $dev
nonreg "checkpoint (--resume)" "checkpoint" train --model "$tiny" --resume FILE $data $dev
nonreg "trace (view --png)" "trace file" view FILE --png "$work/t.png"
# A text corpus file (--data-text) is read as bytes, by the same reader.
nonreg "text file" "data file" train --model "$src/assets/models/char_gpt.json" --data-text FILE $dev --epochs 1
# IDX files in a --data directory: a FIFO in place of the labels file.
mkdir "$work/idx"
mkfifo "$work/idx/train-images-idx3-ubyte" "$work/idx/train-labels-idx1-ubyte"
timeout 20 "$bin" train --model "$tiny" --data "$work/idx" $dev --epochs 1 > "$work/out" 2> "$work/err"; rc=$?
[ $rc -ne 0 ] && [ $rc -lt 124 ] && grep -q "is a FIFO" "$work/err"
check "IDX directory with FIFOs: $(head -c 200 "$work/err")" $?

# 2. A missing checkpoint for eval names the path, not another command's flag.
expect_error "eval --init missing" "cannot open checkpoint $work/missing.safetensors" \
    eval --model "$tiny" --init "$work/missing.safetensors" $data $dev
grep -q -- "--resume" "$work/err"; [ $? -ne 0 ]; check "eval --init missing does not mention --resume" $?

# 3. Numbers past what a flag holds: refused with the flag's range, never converted with undefined
# behaviour (the sanitizer build runs this test with UBSan's float-cast-overflow).
expect_error "--mem-limit 1e300" "1 byte to 8E" train --model "$tiny" $data $dev --mem-limit 1e300
expect_error "--mem-limit 0.2 (under a byte; 0 meant no limit)" "1 byte to 8E" train --model "$tiny" $data $dev --mem-limit 0.2
expect_error "--mem-limit 16E" "1 byte to 8E" plan --model "$tiny" $dev --mem-limit 17179869184G
expect_error "bench matmul --reps 99999999999" "1 to 1000" bench matmul $dev --reps 99999999999
expect_error "bench train --steps 1e10" "1 to 100000" bench train --model "$tiny" $dev --steps 99999999999
expect_error "--balance 1e300" "non-negative numbers" train --model "$tiny" $data \
    --device llvmpipe,llvmpipe --strategy replicated --balance 1e300,1
expect_error "view --size 99999999999x10" "WIDTHxHEIGHT" view "$work/missing.json" --size 99999999999x10

# A limit above the device's memory is the device's memory, in plan and in train alike (plan said
# fits and the allocation failed with a Vulkan error).
"$bin" plan --model "$tiny" $dev --mem-limit 100000G --json > "$work/plan.json"
check "plan with --mem-limit 100000G" $?
"$bin" devices $dev --json > "$work/devices.json"
python3 - "$work/plan.json" "$work/devices.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["devices"][0]
has = json.load(open(sys.argv[2]))
has = (has[0] if isinstance(has, list) else has["devices"][0])["memory_bytes"]
print("limit", d["memory_limit_bytes"], "device memory", has)
sys.exit(0 if d["memory_limit_bytes"] == has else 1)
PY
check "plan: --mem-limit past the device's memory is the device's memory" $?
"$bin" train --model "$tiny" $data $dev --epochs 1 --quiet --mem-limit 100000G
check "train with --mem-limit 100000G" $?

# 4. A matmul variant list that names no variant (a misspelt VKT_MATMUL_VARIANT used to be ignored
# without a word, so a benchmark "of" a variant measured the default): an error naming it and
# listing the variants; a list of real names still runs.
VKT_MATMUL_VARIANT=wide64t-r32c8-g8,wide64t-r32c16 expect_error \
    "VKT_MATMUL_VARIANT naming no variant" 'names "wide64t-r32c16", which is no variant' \
    train --model "$tiny" $data $dev --max-steps 1 --quiet
grep -q "wide64t-r32c16-g8, " "$work/err"; check "the message lists the variants" $?
VKT_MATMUL_VARIANT=wide64t-r32c16-g8,none "$bin" train --model "$tiny" $data $dev --max-steps 1 \
    --quiet
check "VKT_MATMUL_VARIANT of real names runs" $?

# 5. The other VKT_* variables that take words (a misspelt one used to count as the default, or as
# "on": VKT_NET_FUSE=off fused): an error naming the variable, the value and the words, from
# train, bench and view alike; each variable's other spellings still run.
for bad in VKT_TUNE=forse VKT_NET_FUSE=never VKT_CONV=column VKT_AHEAD=no VKT_VALIDATION=yes; do
    env "$bad" "$bin" train --model "$tiny" $data $dev --max-steps 1 --quiet > "$work/out" \
        2> "$work/err"
    rc=$?
    [ $rc -eq 1 ] && grep -q "^vktrain: $bad is not a setting it takes: use .* or " "$work/err"
    check "train with $bad: exit 1 and a message naming it ($(head -c 160 "$work/err"))" $?
done
VKT_TUNE=forse expect_error "bench matmul with VKT_TUNE=forse" "VKT_TUNE=forse is not a setting" \
    bench matmul --sizes 64 $dev
VKT_AHEAD=no expect_error "view with VKT_AHEAD=no" "VKT_AHEAD=no is not a setting" \
    view "$work/missing.json" --png "$work/v.png"
VKT_TUNE=on VKT_NET_FUSE=off VKT_CONV=auto VKT_AHEAD=0 VKT_VALIDATION=off "$bin" train \
    --model "$tiny" $data $dev --max-steps 1 --quiet
check "the variables' other words run (on, off, auto, 0)" $?

[ $fails -eq 0 ] && echo "all passed" || echo "$fails failed"
[ $fails -eq 0 ]
