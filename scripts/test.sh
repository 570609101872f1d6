#!/usr/bin/env bash
# test.sh: installs what is missing, builds vktrain (warnings are errors), and runs the whole
# CTest suite on every Vulkan driver present (lavapipe and SwiftShader), with the Khronos
# validation layer on; then the same suite in an AddressSanitizer + UBSan build.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh" test

echo "== release build"
"$root/scripts/build.sh" "$root/build" -DVKT_WERROR=ON
(cd "$root/build" && ctest --output-on-failure -j 2)

echo "== sanitizer build (ASan + UBSan)"
"$root/scripts/build.sh" "$root/build-asan" -DVKT_WERROR=ON -DVKT_SANITIZE=ON
(cd "$root/build-asan" && ctest --output-on-failure -j 2 -L sanitize)
