#!/usr/bin/env bash
# test_cli_compare.sh: `vktrain compare`. Args: VKTRAIN_BINARY SOURCE_DIR
# Three results in the bench suite format (tests/compare_check.py fixtures: lavapipe and
# SwiftShader under --mem-limit 256M, and a --quick lavapipe run, so one device twice) are compared
# with --png, --html and --layout, drawn on lavapipe and on SwiftShader with the validation layer
# on (a message fails the command). tests/compare_check.py then reads the pictures back: every PNG
# is there, has its axes, one curve per device in the device's colour through points whose pixels
# map back to the JSON's values, the capacity and peak lines at their height; the tables' numbers
# are the JSON's and the crossover lines follow the rule; the HTML page embeds the same PNGs and
# refers to nothing outside itself; both drivers drew the same pictures. The checker is shown to
# fail on a moved point, swapped pictures and a changed number. Refusals: format versions 0 and
# 2, another "format", truncated JSON, a missing field, a wrong type, 17 files, bad options.
set -uo pipefail
bin=$1
src=$2
. "$(dirname "$0")/check.bash" # fails, check NAME STATUS, expect_error
in_ci=0
[ "${CI:-}" = true ] && in_ci=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
checker="$src/tests/compare_check.py"
fx="$work/fx"
start=$(date +%s)

python3 "$checker" fixtures "$fx"; check "fixtures written" $?
results=("$fx/lavapipe.json" "$fx/swiftshader.json" "$fx/lavapipe-quick.json")

# Which drivers draw: both in CI, whatever there is elsewhere.
devices=()
"$bin" devices > "$work/devices.txt" 2>&1
for d in llvmpipe swiftshader; do
    if grep -qi "$d" "$work/devices.txt"; then devices+=("$d")
    elif [ $in_ci -eq 1 ]; then echo "FAIL CI=true but there is no $d device"; fails=$((fails + 1))
    else echo "note: no $d device; not drawn there"; fi
done

# ---------------------------------------------------------------------------------------------
# The pictures and tables, on each driver, validation on.
for d in "${devices[@]}"; do
    o="$work/$d"
    mkdir -p "$o"
    VKT_VALIDATION=1 "$bin" compare "${results[@]}" --png "$o/png" --html "$o/page.html" \
        --layout "$o/layout.json" --device "$d" > "$o/out.txt" 2> "$o/err.txt"
    rc=$?
    cat "$o/err.txt"
    [ $rc -eq 0 ] && ! grep -qi validation "$o/err.txt"; check "$d: compare draws, no validation message" $?
    python3 "$checker" check "$o/out.txt" "$o/png" "$o/layout.json" "${results[@]}"
    check "$d: pictures and tables show the results" $?
    python3 "$checker" html "$o/page.html" "$o/png" "$o/layout.json"
    check "$d: the HTML page is self-contained and embeds the pictures" $?
    ! ls "$o/png" | grep -q tmp && ! ls "$o" | grep -q tmp; check "$d: no temporary file left" $?
done
if [ ${#devices[@]} -eq 2 ]; then
    python3 "$checker" same "$work/llvmpipe/png" "$work/swiftshader/png" "$work/llvmpipe/layout.json"
    check "lavapipe and SwiftShader draw the same pictures" $?
fi
d=${devices[0]:-llvmpipe}
o="$work/$d"
sed -n '/^== where one device/,$p' "$o/out.txt" | head -12

# --html alone draws the same page (nothing in a PNG directory); tables alone open no device.
VKT_VALIDATION=1 "$bin" compare "${results[@]}" --html "$work/alone.html" --device "$d" > /dev/null
check "--html alone writes the page" $?
cmp -s "$work/alone.html" "$o/page.html"; check "--html alone: the same page" $?
VK_ICD_FILENAMES=/nonexistent.json VK_DRIVER_FILES=/nonexistent.json VK_ADD_DRIVER_FILES= \
    "$bin" compare "${results[@]}" > "$work/tables.txt" 2>&1
check "tables without --png or --html need no Vulkan device" $?
tables() { grep -v '^picture: \|^wrote ' "$1" | cat -s; }
diff <(tables "$o/out.txt") <(tables "$work/tables.txt") > /dev/null; check "the same tables" $?
"$bin" compare "$fx/swiftshader.json" --png "$work/one" --layout "$work/one.json" --device "$d" > "$work/one.txt"
check "one result: compare draws it" $?
python3 "$checker" check "$work/one.txt" "$work/one" "$work/one.json" "$fx/swiftshader.json"
check "one result: pictures and tables" $?
"$bin" compare "${results[@]:0:2}" --png "$work/big" --size 1600x900 --layout "$work/big.json" --device "$d" > "$work/big.txt"
python3 "$checker" check "$work/big.txt" "$work/big" "$work/big.json" "${results[@]:0:2}"
check "--size 1600x900: pictures and tables" $?

# The checker fails on pictures that do not show the data.
t="$work/tamper"
cp -r "$o" "$t"
python3 - "$t/layout.json" <<'PY'
import json, sys
L = json.load(open(sys.argv[1]))
p = next(p for p in L["pictures"] if p["kind"] == "throughput")
p["series"][1]["points"][4]["py"] += 4  # drawn 4 pixels off where the layout says
json.dump(L, open(sys.argv[1], "w"))
PY
! python3 "$checker" check "$t/out.txt" "$t/png" "$t/layout.json" "${results[@]}" > /dev/null
check "checker fails on a point 4 pixels off" $?
cp -r "$o" "$t.2"
mv "$t.2/png/fashion_mlp-throughput.png" "$t.2/x.png"
mv "$t.2/png/fashion_cnn-throughput.png" "$t.2/png/fashion_mlp-throughput.png"
mv "$t.2/x.png" "$t.2/png/fashion_cnn-throughput.png"
! python3 "$checker" check "$t.2/out.txt" "$t.2/png" "$t.2/layout.json" "${results[@]}" > /dev/null
check "checker fails on swapped pictures" $?
cp -r "$o" "$t.3"
python3 - "$t.3/out.txt" <<'PY'
import re, sys
lines = open(sys.argv[1]).read().split("\n")
i = next(i for i, l in enumerate(lines) if l.startswith("fashion_mlp: samples/s"))
k = next(k for k in range(i, len(lines)) if lines[k].startswith("  8 "))
m = re.search(r"(\d+)(\.\d+)?  ", lines[k][4:])  # the first device's figure
a, b = 4 + m.start(1), 4 + m.end(1)
lines[k] = lines[k][:a] + str(int(lines[k][a:b]) + 1).rjust(b - a) + lines[k][b:]
open(sys.argv[1], "w").write("\n".join(lines))
PY
! cmp -s "$o/out.txt" "$t.3/out.txt" && ! python3 "$checker" check "$t.3/out.txt" "$t.3/png" "$t.3/layout.json" "${results[@]}" > /dev/null
check "checker fails on a changed number" $?

# ---------------------------------------------------------------------------------------------
# Refusals: one clear line, exit 1 (files) or 2 (usage).
expect_error "format version 0" "version 0, but this vktrain .* reads version 1: rerun .vktrain bench suite" \
    compare "$fx/lavapipe.json" "$fx/version0.json"
expect_error "format version 2" "version2.json: result format version 2, but this vktrain .* reads version 1" \
    compare "$fx/version2.json"
expect_error "another format" 'not a vktrain bench suite result (its "format" is "vktrain-bench-matmul"' \
    compare "$fx/format.json"
expect_error "truncated JSON" "truncated.json: invalid JSON: the text ends early .*cut short" \
    compare "$fx/truncated.json"
expect_error "a missing field" "missing.json: train\[3\].samples_per_sec is missing (expected a number" \
    compare "$fx/missing.json"
expect_error "a field of the wrong type" "wrongtype.json: peak.fma_gflops is a string, expected a number" \
    compare "$fx/wrongtype.json"
expect_error "no device label" "device.label is missing" compare "$fx/nolabel.json"
expect_error "a missing file" "cannot open result file" compare "$work/nope.json"
expect_error "a directory" "is a directory" compare "$work"
seventeen=()
for i in $(seq 17); do seventeen+=("$fx/lavapipe.json"); done
expect_error "17 results" "at most 16 results" compare "${seventeen[@]}"
expect_error "no result" "which results" compare --png "$work/x"
expect_error "--layout without pictures" "needs --png or" compare "$fx/lavapipe.json" --layout "$work/l.json"
expect_error "bad --size" "WIDTHxHEIGHT" compare "$fx/lavapipe.json" --png "$work/x" --size 12
expect_error "unknown option" "unknown option" compare "$fx/lavapipe.json" --frobnicate
expect_error "a PNG directory that cannot be made" "cannot create directory" \
    compare "$fx/lavapipe.json" --png /dev/null/x --device "$d"
expect_error "a drawing device that is not there" "matches no device" \
    compare "$fx/lavapipe.json" --png "$work/x" --device nosuchgpu
# Best-practices checks always warn about something: a validation message fails the command.
VKT_VALIDATION=1 VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_BEST_PRACTICES_EXT \
    "$bin" compare "$fx/lavapipe.json" --png "$work/bp" --device "$d" > /dev/null 2> "$work/bp.err"
rc=$?
[ $rc -eq 1 ] && grep -q "validation message" "$work/bp.err"; check "a validation message fails the command (exit $rc)" $?

echo "test_cli_compare: $fails failed ($(($(date +%s) - start)) s)"
[ $fails -eq 0 ]
