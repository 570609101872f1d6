#!/usr/bin/env bash
# test_torch_equiv.sh: vktrain's SGD and AdamW steps equal PyTorch's (tests/torch_equiv.py), on
# lavapipe and on SwiftShader (char_gpt on lavapipe only: the fused attention kernel is 5-10x
# slower than products on SwiftShader, docs/PERFORMANCE.md). Args: VKTRAIN_BINARY SOURCE_DIR
# Debian's python3-torch is for Debian's interpreter: /usr/bin/python3, whatever python3 is on PATH.
set -uo pipefail
bin=$1 src=$2
. "$(dirname "$0")/check.bash" # need_torch
need_torch
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rc=0
/usr/bin/python3 "$src/tests/torch_equiv.py" "$bin" "$src" "$work/lvp" --device llvmpipe --parallel || rc=1
/usr/bin/python3 "$src/tests/torch_equiv.py" "$bin" "$src" "$work/ss" --device swiftshader --models fashion_mlp,residual_mlp,fashion_cnn,resnet_small || rc=1
exit $rc
