#!/usr/bin/env bash
# run_fuzz.sh: one fuzz test (tests/fuzz/CMakeLists.txt). Usage:
#   run_fuzz.sh HARNESS CORPUS DICT SECONDS ARTIFACT_DIR
# Fuzzes a copy of the seed corpus CORPUS (in a temporary directory, so the repository's corpus
# is not modified) for SECONDS under ASan + UBSan, with the dictionary DICT when it exists. Any
# finding (crash, UBSan report, leak, an input taking over 10 s, over 2 GiB of memory) fails the
# test; the input that caused it is kept as ARTIFACT_DIR/<harness>-crash-<sha1> (or leak-,
# timeout-, oom-): reproduce with `HARNESS FILE`.
set -euo pipefail
bin=$1 corpus=$2 dict=$3 seconds=$4 artifacts=$5
name=$(basename "$bin")
if [ ! -d "$corpus" ] || [ -z "$(ls -A "$corpus")" ]; then
    echo "run_fuzz.sh: no seed corpus in $corpus" >&2
    exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -R "$corpus" "$tmp/corpus"
mkdir -p "$artifacts"
seeds=$(ls "$tmp/corpus" | wc -l)
args=(-max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
      -artifact_prefix="$artifacts/$name-")
[ -f "$dict" ] && args+=(-dict="$dict")
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
rc=0
"$bin" "${args[@]}" "$tmp/corpus" || rc=$?
echo "$name: corpus $seeds -> $(ls "$tmp/corpus" | wc -l) inputs, exit status $rc"
exit "$rc"
