#!/usr/bin/env bash
# run.sh: installs what is missing, builds vktrain, and runs the main job on the best device.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh" run
"$root/scripts/build.sh" "$root/build"
exec "$root/build/vktrain" devices
