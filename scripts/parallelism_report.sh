#!/usr/bin/env bash
# parallelism_report.sh: the measurements behind docs/PARALLELISM.md. For a layers run with p
# stages and m micro-batches, each device's measured idle fraction beside GPipe's bubble
# (p-1)/(m+p-1); for replicated runs, how much of a step communication takes and how much of it
# the bucketed overlap hides. Usage: scripts/parallelism_report.sh [BUILD_DIR] [STEPS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build}/vktrain
steps=${2:-12}
model=$root/assets/models/fashion_mlp.json
balanced=$root/assets/models/pipeline_mlp.json # equal stages, so the bubble is the schedule's
common=(--model "$model" --batch 256 --max-steps "$steps" --limit-train $((256 * steps)) --no-eval --quiet --json)
devs() { local d=llvmpipe; for ((i = 1; i < $1; i++)); do d="$d,llvmpipe"; done; echo "$d"; }

echo "### Layer-partitioned: measured idle fraction against GPipe's (p-1)/(m+p-1)"
echo
echo "| p | m | schedule | GPipe bubble | idle per device (measured) | samples/s |"
echo "|---|---|---|---|---|---|"
for p in 2 3; do
    for m in 1 2 4 8; do
        for sched in gpipe 1f1b; do
            out=$("$bin" train "${common[@]}" --model "$balanced" --device "$(devs $p)" --strategy layers --micro-batches $m --schedule $sched | tail -1)
            python3 - "$p" "$m" "$sched" "$out" <<'PY'
import json, sys
p, m, sched, r = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
idle = " / ".join("%.2f" % d["idle_fraction"] for d in r["devices"])
print("| %d | %d | %s | %.2f | %s | %.0f |" % (p, m, sched, (p - 1) / (m + p - 1), idle, r["samples_per_sec"]))
PY
        done
    done
done
echo
echo "### Replicated: communication per step and the part the overlap hides"
echo
echo "| devices | samples/s | comm s per step (per device) | hidden by overlap | bytes moved per step |"
echo "|---|---|---|---|---|"
single=$("$bin" train "${common[@]}" --device llvmpipe | tail -1)
python3 -c "import json,sys; r=json.loads(sys.argv[1]); print('| 1 (single) | %.0f | - | - | - |' % r['samples_per_sec'])" "$single"
for spec in llvmpipe,llvmpipe llvmpipe,llvmpipe,llvmpipe llvmpipe,swiftshader; do
    out=$(VK_ADD_DRIVER_FILES=/usr/lib/chromium/vk_swiftshader_icd.json "$bin" train "${common[@]}" --device $spec --strategy replicated --balance auto | tail -1)
    python3 - "$spec" "$steps" "$out" <<'PY'
import json, sys
spec, steps, r = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
d = r["devices"][0]
comm = d["communication_seconds"] / steps
hidden = d.get("communication_hidden_seconds", 0) / steps
print("| %s | %.0f | %.4f | %.0f%% | %.1f MiB |" % (spec, r["samples_per_sec"], comm, 100 * hidden / comm if comm else 0, d["bytes_moved"] / steps / 1048576))
PY
done
echo
echo "reproduce: scripts/parallelism_report.sh ${1:-build} $steps"
