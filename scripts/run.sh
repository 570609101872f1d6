#!/usr/bin/env bash
# run.sh: installs what is missing, builds vktrain, and runs the main job: fashion_mlp.json
# trained on Fashion-MNIST on the best device (3 epochs of SGD with momentum), shown live in the
# viewer when a display exists. Extra arguments go to `vktrain train`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh" run
"$root/scripts/build.sh" "$root/build"
view=()
if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]; then
    view=(--view)
fi
mkdir -p "$root/runs"
exec "$root/build/vktrain" train --model "$root/assets/models/fashion_mlp.json" \
    --save "$root/runs/fashion_mlp.safetensors" --metrics "$root/runs/fashion_mlp.jsonl" \
    --trace "$root/runs/fashion_mlp.trace.json" "${view[@]}" "$@"
