#!/usr/bin/env bash
# test_layering.sh: the folders are the layers, and a lower layer never includes a header of a
# higher one. Bottom to top:
#   0 core      engine/core/     Vulkan context, devices, memory, kernels, command streams, tuning,
#                                the trace; shaders/vkt_abi.h
#   1 ops       engine/ops/      what records dispatches (matmul, elementwise, losses, optimizers)
#   2 nn        engine/nn/       layers (one file per kind) and networks
#   3 parallel  parallel/        strategies over devices, the communicator, the memory planner
#   4 run       engine/run/      the training run: loop, data, checkpoints
#   4 viewer    viewer/          the trace viewer (beside the run: it reads traces, never a net)
#   5 cli       engine/cli/      the command line
# A header lives in its layer's folder, or in engine/include/vktrain/ (the installed public
# headers), whose layers are the table below. The public headers must also never include a
# private one (they are installed without them). Prints every include with its layers on
# failure, and a count per layer on success. Args: VKTRAIN_BINARY SOURCE_DIR (the binary unused).
set -uo pipefail
src=$2
source "$src/tests/check.bash"
cd "$src" || exit 1

declare -A level=([core]=0 [ops]=1 [nn]=2 [parallel]=3 [run]=4 [viewer]=4 [cli]=5)
# Public headers (engine/include/vktrain/) and the layer each belongs to.
declare -A public=([vktrain.h]=core [trace.h]=core [ops.h]=ops [layer.h]=nn [model.h]=nn
                   [network.h]=nn [strategy.h]=parallel [plan.h]=parallel [data.h]=run
                   [checkpoint.h]=run [train.h]=run [world.h]=parallel)

layer_of_dir() {
    case "$1" in
        engine/core/*) echo core ;;
        engine/ops/*) echo ops ;;
        engine/nn/*) echo nn ;;
        parallel/*) echo parallel ;;
        engine/run/*) echo run ;;
        viewer/*) echo viewer ;;
        engine/cli/*) echo cli ;;
        shaders/*) echo core ;;
        engine/include/vktrain/*) echo "${public[$(basename "$1")]:-}" ;;
        *) echo "" ;;
    esac
}

# Where each header name is defined (a name is unique across the tree).
declare -A header_path
while IFS= read -r h; do
    header_path[$(basename "$h")]=$h
done < <(find engine parallel viewer shaders -name '*.h' | sort)

bad=0 checked=0
declare -A per_layer
for f in $(find engine parallel viewer -name '*.[ch]' | sort); do
    fl=$(layer_of_dir "$f")
    if [ -z "$fl" ]; then
        echo "FAIL $f: in no layer (a public header missing from the table in $0?)"
        bad=$((bad + 1))
        continue
    fi
    per_layer[$fl]=$((${per_layer[$fl]:-0} + 1))
    while IFS= read -r inc; do
        checked=$((checked + 1))
        case "$inc" in vkt_shaders.h | *.spv.inc) continue ;; esac
        hp=${header_path[$inc]:-}
        if [ -z "$hp" ]; then
            echo "FAIL $f includes \"$inc\", which is no header of the tree"
            bad=$((bad + 1))
            continue
        fi
        hl=$(layer_of_dir "$hp")
        if [ -z "$hl" ] || [ "${level[$hl]}" -gt "${level[$fl]}" ]; then
            echo "FAIL $f ($fl) includes $hp (${hl:-no layer}): a lower layer includes a higher one"
            bad=$((bad + 1))
        elif [ "$fl:$hl" = viewer:run ] || [ "$fl:$hl" = run:viewer ]; then
            echo "FAIL $f ($fl) includes $hp ($hl): the viewer and the run are separate"
            bad=$((bad + 1))
        fi
        case "$f" in
            engine/include/vktrain/*)
                case "$hp" in
                    engine/include/vktrain/*) ;;
                    *)
                        echo "FAIL public header $f includes the private $hp (not installed)"
                        bad=$((bad + 1))
                        ;;
                esac
                ;;
        esac
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done

summary=""
for l in core ops nn parallel run viewer cli; do summary+=" $l=${per_layer[$l]:-0}"; done
echo "files per layer:$summary; $checked includes checked, $bad out of order"
[ "$bad" -eq 0 ]
check "every include goes to the same layer or a lower one" $?
[ "$checked" -gt 100 ]
check "the check saw includes at all" $?
[ "$fails" -eq 0 ]
