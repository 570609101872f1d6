#!/usr/bin/env bash
# test_install.sh: libvktrain as an installed library. `cmake --install` of the build into a
# temporary prefix; the files it must hold (both libraries, the soname, the headers, the CMake
# package, vktrain.pc) and headers that compile on their own with no Vulkan header; then two
# programs from tests/install/ built outside the tree and run: through find_package(vktrain)
# (tests/install/cmake: train_arrays on the shared library, which trains an MLP from arrays in
# memory and checks that its loss falls and that its checkpoint evaluates the same, and devices
# on the static one), and through `pkg-config --cflags --libs vktrain` (devices on the shared
# library). In a sanitizer build the programs are built with the same -fsanitize flags.
# Args: VKTRAIN_BINARY SOURCE_DIR
set -uo pipefail
bin=$1 src=$2
. "$src/tests/check.bash" # fails, check NAME STATUS
build=$(cd "$(dirname "$bin")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

cmake --install "$build" --prefix "$prefix" > "$tmp/install.log" 2>&1
check "cmake --install $build --prefix \$tmp" $?
[ $fails -eq 0 ] || { cat "$tmp/install.log"; exit 1; }

# The library directory is GNUInstallDirs' (lib, or lib/<multiarch> for a /usr prefix).
pc=$(find "$prefix" -name vktrain.pc | head -n 1)
libdir=$(dirname "$(dirname "$pc")")
[ -n "$pc" ] && [ -f "$libdir/libvktrain.a" ] && [ -f "$libdir/libvktrain.so" ]
check "libvktrain.a, libvktrain.so and vktrain.pc in ${libdir#$tmp/}" $?
soname=$(readelf -d "$libdir/libvktrain.so" 2> /dev/null | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ -n "$soname" ] && [ -f "$libdir/$soname" ] && [ -L "$libdir/libvktrain.so" ]
check "the soname ($soname) is installed, libvktrain.so links to it" $?
[ -f "$libdir/cmake/vktrain/vktrainConfig.cmake" ] &&
    [ -f "$libdir/cmake/vktrain/vktrainConfigVersion.cmake" ]
check "the CMake package in ${libdir#$tmp/}/cmake/vktrain" $?
headers="$(cd "$src/engine/include/vktrain" && ls *.h) vkt_shaders.h" # and the generated kernel ids
missing=""
for h in $headers; do [ -f "$prefix/include/vktrain/$h" ] || missing+=" $h"; done
[ -z "$missing" ]; check "every public header in include/vktrain (missing:${missing:- none})" $?
[ -x "$prefix/bin/vktrain" ]; check "the CLI in bin" $?

# Sanitizer builds: the consumers must be built with the same runtime.
san=""
grep -q '^VKT_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" && san="-fsanitize=address,undefined"
cc=${CC:-cc}

# Every header compiles on its own from the installed include directory alone: no Vulkan or volk
# header, no private header.
bad=""
for h in $headers; do
    echo "#include <vktrain/$h>" | $cc -std=c11 -Wall -Wextra -Werror -fsyntax-only \
        -I"$prefix/include" -x c - 2> "$tmp/h.err" || bad+=" $h"
done
[ -z "$bad" ]; check "each installed header compiles alone (failed:${bad:- none})" $?
[ -n "$bad" ] && cat "$tmp/h.err"
! grep -lE '#include *[<"](vulkan/|volk)' "$prefix"/include/vktrain/*.h
check "no installed header includes a Vulkan or volk header" $?

# (a) find_package(vktrain): a CMake project of its own.
cmake -S "$src/tests/install/cmake" -B "$tmp/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="$san" \
    > "$tmp/consumer.log" 2>&1 &&
    cmake --build "$tmp/consumer" >> "$tmp/consumer.log" 2>&1
rc=$?
check "find_package(vktrain) project configures and builds" $rc
[ $rc -ne 0 ] && cat "$tmp/consumer.log"
if [ $rc -eq 0 ]; then
    ldd "$tmp/consumer/train_arrays" | grep "$libdir/$soname" > /dev/null
    check "train_arrays runs on the installed $soname (vktrain::vktrain)" $?
    ! ldd "$tmp/consumer/devices_static" | grep libvktrain > /dev/null
    check "devices_static has no libvktrain.so (vktrain::vktrain_static)" $?
    "$tmp/consumer/train_arrays" llvmpipe "$tmp/clusters.safetensors" > "$tmp/train.out" 2>&1
    rc=$?
    sed 's/^/    /' "$tmp/train.out"
    check "train_arrays: an MLP trained from arrays in memory, the loss falls" $rc
    "$tmp/consumer/devices_static" llvmpipe > "$tmp/dev.out" 2>&1
    rc=$?
    sed 's/^/    /' "$tmp/dev.out"
    check "devices_static: context, devices, a buffer round trip, a model" $rc
fi

# (b) pkg-config, linking the shared library (rpath to the prefix).
export PKG_CONFIG_PATH=$libdir/pkgconfig
flags=$(pkg-config --cflags --libs vktrain)
check "pkg-config --cflags --libs vktrain: $flags" $?
static_libs=$(pkg-config --static --libs vktrain)
case " $static_libs " in *" -lcjson "*" -lz "*) true ;; *) false ;; esac
check "pkg-config --static --libs vktrain adds cJSON and zlib: $static_libs" $?
# shellcheck disable=SC2086 # flags are words
$cc -std=c11 -Wall -Wextra -Werror $san -o "$tmp/devices_pc" "$src/tests/install/devices.c" \
    $flags -Wl,-rpath,"$libdir" > "$tmp/pc.log" 2>&1
rc=$?
check "devices.c builds with pkg-config's flags" $rc
[ $rc -ne 0 ] && cat "$tmp/pc.log"
if [ $rc -eq 0 ]; then
    ldd "$tmp/devices_pc" | grep "$libdir/$soname" > /dev/null
    check "devices_pc runs on the installed $soname" $?
    "$tmp/devices_pc" llvmpipe > "$tmp/pc.out" 2>&1
    rc=$?
    sed 's/^/    /' "$tmp/pc.out"
    check "devices_pc: context, devices, a buffer round trip, a model" $rc
fi

[ $fails -eq 0 ] && echo "test_install: all passed" || echo "test_install: $fails failed"
[ $fails -eq 0 ]
