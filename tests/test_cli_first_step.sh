#!/usr/bin/env bash
# test_cli_first_step.sh: the time to the first step that `vktrain train` and `vktrain bench
# train` report (engine/run/train.c vkt_first_step, the counters of engine/core/tune.c). A short
# layers run on SwiftShader + lavapipe (wide_mlp: shapes SwiftShader measures), twice with one
# fresh VKT_CACHE_DIR: both give
# first_step_seconds and its parts (context, data, setup, kernel builds, tuning, the step), none
# negative and together no more than the total; the first run measured matmul shapes and says
# "cold", the second measured none, took every choice from the cache, says "warm" and spent less
# time tuning than the first. bench train reports the same, in its text and its JSON, cold then
# warm; VKT_TUNE=off measures nothing and says "none". On lavapipe with Mesa's shader cache empty,
# the run after the cold one compiles nothing (fashion_mlp, fashion_cnn, char_gpt and bench
# matmul), and compiling ahead there never takes the cache for one that keeps nothing
# (test_cli_ahead.sh checks the other way). No wall-time speedup is asserted (the machine is
# shared). Args: VKTRAIN_BINARY
# SOURCE_DIR
set -uo pipefail
bin=$1 src=$2
. "$(dirname "$0")/check.bash" # fails, check NAME STATUS
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# verify FILE CACHE [COLD_FILE]: the last JSON line of FILE reports a first step whose parts add
# up, with tuning_cache CACHE; warm: nothing measured, and less tuning time than COLD_FILE's.
verify() {
    python3 - "$@" <<'PY'
import json, sys
def last(p):
    return json.loads([l for l in open(p) if l.strip().startswith("{")][-1])
o, cache = last(sys.argv[1]), sys.argv[2]
f, total = o["first_step"], o["first_step_seconds"]
parts = ["context_seconds", "data_seconds", "setup_seconds", "kernel_build_seconds",
         "tuning_seconds", "step_seconds"]
assert total > 0, o
assert all(f[k] >= 0 for k in parts), f
assert sum(f[k] for k in parts) <= total * (1 + 1e-9) + 1e-6, (total, f)
assert f["step_seconds"] > 0 and f["later_step_seconds"] > 0, f
assert f["kernels_built"] > 0, f  # a first step builds its pipelines
assert f["tuning_cache"] == cache, f
if cache == "cold":
    assert f["tuning_shapes_measured"] > 0 and f["tuning_variants_measured"] >= 2, f
    assert f["tuning_seconds"] > 0, f
elif cache == "warm":
    assert f["tuning_shapes_measured"] == 0 and f["tuning_variants_measured"] == 0, f
    assert f["tuning_choices_cached"] > 0, f
    cold = last(sys.argv[3])["first_step"]
    assert f["tuning_seconds"] < cold["tuning_seconds"], (f, cold)
else:
    assert f["tuning_shapes_measured"] == 0 and f["tuning_choices_cached"] == 0, f
    assert f["tuning_seconds"] == 0, f
print("  first step %.2f s: %s" % (total, ", ".join("%s %.3f" % (k[:-8], f[k]) for k in parts)))
PY
}

# Shapes SwiftShader measures: wide_mlp's first layer at batch 32 (784 -> 8192: 2^27.6
# multiply-adds a product, where its 32-row tile joins the 16-row one; below 2^27 it has one
# candidate for a product, lavapipe one for every product, and nothing is measured).
wide="--model $src/assets/models/wide_mlp.json --batch 32"

# 1. train: layers over SwiftShader and lavapipe (a stage thread each; the first layer on
# SwiftShader), cold then warm.
export VKT_CACHE_DIR=$work/cache
run="train $wide --device swiftshader,llvmpipe --strategy layers --max-steps 3 --limit-train 384 --no-eval --json"
"$bin" $run > "$work/cold.txt" 2> "$work/cold.err"
check "train, cold cache" $?
verify "$work/cold.txt" cold; check "train cold: parts add up, shapes measured" $?
grep -q "^first step after .* (cold cache: tuning measured [1-9][0-9]* shapes" "$work/cold.txt"
check "train cold: the summary line says so" $?
"$bin" $run > "$work/warm.txt" 2> "$work/warm.err"
check "train, warm cache" $?
verify "$work/warm.txt" warm "$work/cold.txt"; check "train warm: nothing measured, less tuning" $?
grep -q "^first step after .* (warm cache: all [1-9][0-9]* matmul choices from the cache)" "$work/warm.txt"
check "train warm: the summary line says so" $?

# 2. bench train on SwiftShader (one device), with a cache of its own: cold, then warm.
export VKT_CACHE_DIR=$work/bench-cache
bench="bench train $wide --device swiftshader --steps 1 --json"
"$bin" $bench > "$work/bcold.txt" 2> "$work/bcold.err"
check "bench train, cold cache" $?
verify "$work/bcold.txt" cold; check "bench train cold: parts add up, shapes measured" $?
grep -q "^  first step after .* (cold cache: tuning measured" "$work/bcold.txt"
check "bench train cold: the text says so" $?
"$bin" $bench > "$work/bwarm.txt" 2> "$work/bwarm.err"
check "bench train, warm cache" $?
verify "$work/bwarm.txt" warm "$work/bcold.txt"; check "bench train warm: nothing measured" $?
grep -q "^  first step after .* (warm cache: all" "$work/bwarm.txt"
check "bench train warm: the text says so" $?

# 3. Tuning off: nothing measured or looked up, no tuning time.
VKT_TUNE=off VKT_CACHE_DIR=$work/off-cache "$bin" train --device llvmpipe --max-steps 2 \
    --limit-train 256 --no-eval --json > "$work/off.txt" 2> "$work/off.err"
check "train, VKT_TUNE=off" $?
verify "$work/off.txt" none; check "VKT_TUNE=off: no tuning, says none" $?

# 4. lavapipe with Mesa's shader cache empty, twice: the second run compiles nothing (Mesa's
# cache gains no file). Mesa 22.3 compiled a kernel once per texel-view size class and missed the
# second such compile in the next run (engine/core/cmd.c, texel_view): fashion_mlp's first hidden
# layers gave 17 cache files in the cold run and 2 more in the one after it; fashion_cnn's
# convolution (its layer scratch) 37 and 2 more; char_gpt's attention backward 31 and 3 more;
# bench matmul's own operands 5 and 1 more.
mesa_twice() { # NAME ARGS...: cold and warm with a fresh Mesa cache of its own
    local name=$1; shift
    export MESA_SHADER_CACHE_DIR=$work/mesa-$name VKT_CACHE_DIR=$work/mesa-vkt-$name
    "$bin" "$@" > "$work/m1-$name.txt" 2>&1; check "$name, Mesa's cache empty" $?
    local n1 n2
    n1=$(find "$work/mesa-$name" -type f | wc -l)
    "$bin" "$@" > "$work/m2-$name.txt" 2>&1; check "$name, Mesa's cache from the run before" $?
    n2=$(find "$work/mesa-$name" -type f | wc -l)
    echo "  $name: Mesa's cache $n1 files after the cold run, $n2 after the next"
    [ "$n1" -gt 0 ] && [ "$n2" -eq "$n1" ]; check "$name: the run after a cold one compiles nothing" $?
    ! grep -q "keeps nothing" "$work/m1-$name.txt" "$work/m2-$name.txt"
    check "$name: compiling ahead did not take a working cache for one that keeps nothing" $?
    unset MESA_SHADER_CACHE_DIR VKT_CACHE_DIR
}
mesa_twice fashion_mlp train --device llvmpipe --max-steps 3 --limit-train 384 --no-eval
mesa_twice fashion_cnn train --model "$src/assets/models/fashion_cnn.json" --device llvmpipe \
    --max-steps 2 --limit-train 256 --no-eval
mesa_twice char_gpt train --model "$src/assets/models/char_gpt.json" --device llvmpipe \
    --max-steps 2 --batch 4 --limit-train 8 --no-eval
mesa_twice bench_matmul bench matmul --sizes 256 --device llvmpipe

[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "all first-step checks passed"
