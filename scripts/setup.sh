#!/usr/bin/env bash
# setup.sh: installs the Debian packages vktrain needs, and only those that are missing, so a
# second run installs nothing and returns at once. Usage: scripts/setup.sh [run|test]
#   run  (default) building and training: compiler, Vulkan loader/headers, volk, glslc, lavapipe,
#        GLFW, cJSON, zlib, stb, Open MPI (openmpi-bin for mpirun, libopenmpi-dev: runs across
#        processes and machines, parallel/world.c), Fashion-MNIST, fortunes (the default text of byte-level language
#        models, /usr/share/games/fortunes: docs/DATA.md), a font
#   test everything above plus what the suite needs: the validation layer, SwiftShader (a second
#        Vulkan driver from a second vendor, in chromium-common), Xvfb and x11-apps for window
#        tests (x11-utils: xwininfo finds the window), python3 for checking JSON, python3-torch for
#        the step-for-step comparison with PyTorch, and OpenBLAS twice: libopenblas0-pthread
#        becomes the system BLAS (libblas.so.3), which Debian's python3-torch and numpy load, so
#        that `bench train --baseline` and the PyTorch scripts (scripts/*.py) run PyTorch as a
#        user who cares about CPU speed runs it (on netlib's reference BLAS it is several times
#        slower); its ILP64 build libopenblas64-pthread-dev, for `bench matmul --baseline`
#        (optional at build time, so not in run; CI must build and test it); clang and
#        libclang-rt-14-dev (libFuzzer, ASan and UBSan for clang: a Recommends of clang, which
#        --no-install-recommends skips) for the fuzz build (tests/fuzz, docs/TESTING.md).
set -euo pipefail

mode=${1:-run}
pkgs=(cmake ninja-build gcc libc6-dev pkg-config glslc libvulkan1 libvulkan-dev libvulkan-volk-dev
      mesa-vulkan-drivers vulkan-validationlayers libglfw3-dev libcjson-dev zlib1g-dev libstb-dev
      dataset-fashion-mnist fortunes fonts-dejavu-core openmpi-bin libopenmpi-dev)
if [ "$mode" = test ]; then
    pkgs+=(chromium-common xvfb x11-apps x11-utils libxtst6 python3 python3-numpy python3-torch
          libopenblas0-pthread libopenblas64-pthread-dev clang libclang-rt-14-dev)
elif [ "$mode" != run ]; then
    echo "usage: scripts/setup.sh [run|test]" >&2
    exit 2
fi

missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup.sh: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    sudo=sudo
fi
echo "setup.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
