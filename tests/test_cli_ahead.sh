#!/usr/bin/env bash
# test_cli_ahead.sh: compiling ahead on lavapipe (engine/core/ahead.c) where Mesa's shader cache
# keeps nothing: with MESA_SHADER_CACHE_DISABLE=true, then with a cache directory Mesa cannot
# create, the device would compile every kernel again, so compiling ahead stops after its probe
# (cache_keeps_nothing), the run still trains, and the summary and the JSON say so. The other way
# (a cache that works: no stop) is test_cli_first_step.sh's cold runs. In the sanitizer build too:
# the probe's path runs the helper device's builds again and drops the jobs. Args: VKTRAIN_BINARY
# SOURCE_DIR
set -uo pipefail
bin=$1
. "$(dirname "$0")/check.bash" # fails, check NAME STATUS
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

nocache() { # NAME ENV...: one run of fashion_mlp with ENV
    local name=$1; shift
    env "$@" VKT_CACHE_DIR="$work/nocache-$name" "$bin" train --device llvmpipe --max-steps 2 \
        --limit-train 256 --no-eval --json > "$work/nc-$name.txt" 2> "$work/nc-$name.err"
    check "$name: trains" $?
    grep -q "^first step after .* compiled ahead, then none: Mesa's shader cache keeps nothing" \
        "$work/nc-$name.txt"
    check "$name: the summary line says compiling ahead stopped" $?
    python3 - "$work/nc-$name.txt" <<'PY'
import json, sys
o = json.loads([l for l in open(sys.argv[1]) if l.strip().startswith("{")][-1])
f = o["first_step"]
assert f["compile_ahead_stopped"] == 1, f
assert 1 <= f["kernels_compiled_ahead"] < f["kernels_built"], f
PY
    check "$name: the JSON counts one stop and fewer kernels compiled ahead than built" $?
}
nocache disabled MESA_SHADER_CACHE_DISABLE=true
nocache unwritable MESA_SHADER_CACHE_DIR=/proc/vkt-no-such-dir

[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "all compile-ahead checks passed"
