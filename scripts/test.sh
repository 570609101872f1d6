#!/usr/bin/env bash
# test.sh: installs what is missing, builds vktrain (warnings are errors), and runs the whole
# CTest suite on every Vulkan driver present (lavapipe and SwiftShader), with the Khronos
# validation layer on; then the same suite in an AddressSanitizer + UBSan build; then the
# libFuzzer harnesses of the file readers, 20 s each (tests/fuzz, docs/TESTING.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh" test

echo "== release build"
"$root/scripts/build.sh" "$root/build" -DVKT_WERROR=ON
(cd "$root/build" && ctest --output-on-failure -j 2)

echo "== sanitizer build (ASan + UBSan)"
"$root/scripts/build.sh" "$root/build-asan" -DVKT_WERROR=ON -DVKT_SANITIZE=ON
(cd "$root/build-asan" && ctest --output-on-failure -j 2 -L sanitize)

echo "== fuzz build (libFuzzer + ASan + UBSan)"
# Only the harnesses and the instrumented library they link (target vkt_fuzz): the builds above
# compile and test everything else. clang comes from setup.sh test, so a missing one is a
# failure here, never a skip.
if ! command -v clang >/dev/null; then
    echo "test.sh: clang is not installed (scripts/setup.sh test installs clang and" \
         "libclang-rt-14-dev): cannot build the fuzz harnesses" >&2
    exit 1
fi
CC=clang cmake -S "$root" -B "$root/build-fuzz" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DVKT_WERROR=ON -DVKT_FUZZ=ON >/dev/null
cmake --build "$root/build-fuzz" --target vkt_fuzz -j "$(nproc)"
(cd "$root/build-fuzz" && ctest --output-on-failure -j 2 -L fuzz)
