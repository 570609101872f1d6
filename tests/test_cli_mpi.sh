#!/usr/bin/env bash
# test_cli_mpi.sh: `mpirun -np N vktrain train` (one run over N processes, docs/PARALLELISM.md
# "Across processes") over loopback, as CI runs it (root, oversubscribed cores).
#   - replicated, 2 ranks of one lavapipe each: the in-process 2-device parameters bit for bit,
#     and the single-device run's within the strategies' tolerance after 20 steps; 3 ranks
#     (lavapipe, SwiftShader, lavapipe + lavapipe: four replicas, two drivers); fashion_cnn
#     (batch norm: rank 0's running statistics; 10 steps) on 2 and 3 ranks against the same
#     replicas in one process;
#   - rank 0 alone writes the metrics (one line a step, not one per rank) and the checkpoint;
#   - layers over 2 ranks (fashion_mlp) and 3 ranks (fashion_cnn) within tolerance of single, and wide_mlp (a replica needs 101 MiB, its
#     largest layer 76 MiB) trains under --mem-limit 90M as layers over 2 ranks where
#     replicated refuses naming the rank, as `plan --device-per-rank` foresees;
#   - data x pipeline: fashion_cnn with --pipelines 2 over 2 ranks (a pipeline in each) and over
#     4 ranks (pipelines spanning ranks) within tolerance of the same replicas in one process;
#   - faults: kill -9 of rank 1 mid-run ends the job within 30 s with a message naming rank 1,
#     and the last checkpoint resumes on 3 ranks and on one process; a rank stopped (SIGSTOP)
#     ends the job within --rank-timeout plus a margin, naming the silent rank;
#   - refusals: --device-per-rank with the wrong count of entries, outside mpirun, tensor
#     across ranks.
# Args: VKTRAIN_BINARY SOURCE_DIR
set -uo pipefail
bin=$1 src=$2
. "$(dirname "$0")/check.bash"
work=$(mktemp -d)
trap 'pkill -9 -f "$work" 2> /dev/null; rm -rf "$work"' EXIT
if ! command -v mpirun > /dev/null; then
    echo "FAIL: mpirun is missing (scripts/setup.sh installs openmpi-bin and libopenmpi-dev)"
    exit 1
fi
"$bin" --help | grep -q -- --device-per-rank
check "vktrain was built with the MPI backend (--help names --device-per-rank)" $?
# Open MPI as root on one machine: more ranks than cores, loopback only. CMA (single-copy
# shared memory) is refused in some containers and then crawls: copies through shared memory.
mpi() { # mpi N ARGS...: one run over N ranks
    local n=$1; shift
    mpirun --allow-run-as-root --oversubscribe --mca btl self,vader,tcp \
        --mca btl_vader_single_copy_mechanism none -np "$n" "$bin" "$@"
}
mlp=$src/assets/models/fashion_mlp.json
cnn=$src/assets/models/fashion_cnn.json
common="--limit-train 1280 --limit-test 256 --batch 64 --max-steps 20 --seed 3 --quiet"
# fashion_cnn: one epoch of 10 steps (evaluated, as the MLP's 20). Its runs mix in SwiftShader,
# whose steps take 0.4 s there.
cnnc="--limit-train 640 --limit-test 256 --batch 64 --max-steps 10 --seed 3 --quiet"

# --- replicated ---------------------------------------------------------------------------------
"$bin" train --model "$mlp" $common --device llvmpipe --save "$work/single.safetensors"
check "fashion_mlp, single device, 20 steps" $?
"$bin" train --model "$mlp" $common --device llvmpipe,llvmpipe --strategy replicated \
    --save "$work/inproc2.safetensors"
check "fashion_mlp, replicated over 2 devices in one process" $?
mpi 2 train --model "$mlp" $common --device llvmpipe --strategy replicated \
    --save "$work/mpi2.safetensors" --metrics "$work/mpi2.jsonl"
check "fashion_mlp, replicated over 2 ranks" $?
same_tensors "$work/mpi2.safetensors" "$work/inproc2.safetensors"
check "2 ranks: the in-process 2-device parameters bit for bit" $?
close_tensors "$work/mpi2.safetensors" "$work/single.safetensors"
check "2 ranks: within tolerance of the single device" $?
[ "$(grep -c '"type": *"step"' "$work/mpi2.jsonl")" -eq 20 ]
check "rank 0 alone writes the metrics: 20 step lines ($(grep -c '"type": *"step"' "$work/mpi2.jsonl"))" $?
# Two ranks on one machine compile nothing ahead (engine/core/ahead.c; a cold 2-rank run on 2
# cores started its steps 2 s later with it): rank 0's summary counts no kernel compiled ahead
# where a lone lavapipe process counts some (with an empty Mesa cache, so that its thread cannot
# find every kernel already run by the device).
MESA_SHADER_CACHE_DIR="$work/mesa-cold" "$bin" train --model "$mlp" --limit-train 640 \
    --batch 64 --max-steps 3 --no-eval --device llvmpipe > "$work/ahead1.txt" 2>&1
ahead1=$(grep -o '[0-9]* compiled ahead' "$work/ahead1.txt")
grep -q "first step after" "$work/ahead1.txt" && [ -n "$ahead1" ]
check "one process on lavapipe compiles kernels ahead ($ahead1)" $?
mpi 2 train --model "$mlp" --limit-train 640 --batch 64 --max-steps 3 --no-eval \
    --device llvmpipe --strategy replicated > "$work/ahead2.txt" 2>&1
ahead2=$(grep -o '[0-9]* compiled ahead' "$work/ahead2.txt")
grep -q "first step after" "$work/ahead2.txt" && [ -z "$ahead2" ]
check "2 ranks on one machine compile nothing ahead (rank 0: ${ahead2:-none})" $?
mpi 3 train --model "$mlp" $common --device-per-rank llvmpipe,swiftshader,llvmpipe+llvmpipe \
    --strategy replicated --save "$work/mpi3.safetensors"
check "fashion_mlp, replicated over 3 ranks (lavapipe, SwiftShader, 2 x lavapipe)" $?
close_tensors "$work/mpi3.safetensors" "$work/single.safetensors"
check "3 ranks, two drivers: within tolerance of the single device" $?
# Batch norm: each replica normalises its shard (DDP without SyncBatchNorm), so the reference is
# the same replicas in one process.
"$bin" train --model "$cnn" $cnnc --device llvmpipe,swiftshader --strategy replicated \
    --save "$work/cnn1.safetensors"
check "fashion_cnn, replicated over lavapipe + SwiftShader in one process" $?
mpi 2 train --model "$cnn" $cnnc --device-per-rank llvmpipe,swiftshader --strategy replicated \
    --save "$work/cnn2.safetensors"
check "fashion_cnn, replicated over 2 ranks (lavapipe, SwiftShader)" $?
close_tensors "$work/cnn2.safetensors" "$work/cnn1.safetensors"
check "fashion_cnn, 2 ranks: within tolerance of the same replicas in one process (running statistics too)" $?
"$bin" train --model "$cnn" $cnnc --device llvmpipe,swiftshader,llvmpipe --strategy replicated \
    --save "$work/cnn1x3.safetensors"
check "fashion_cnn, replicated over lavapipe, SwiftShader, lavapipe in one process" $?
mpi 3 train --model "$cnn" $cnnc --device-per-rank llvmpipe,swiftshader,llvmpipe \
    --strategy replicated --save "$work/cnn3.safetensors"
check "fashion_cnn, replicated over 3 ranks (lavapipe, SwiftShader, lavapipe)" $?
close_tensors "$work/cnn3.safetensors" "$work/cnn1x3.safetensors"
check "fashion_cnn, 3 ranks: within tolerance of the same replicas in one process" $?

# --- layers -------------------------------------------------------------------------------------
mpi 2 train --model "$mlp" $common --device-per-rank llvmpipe,swiftshader --strategy layers \
    --micro-batches 4 --save "$work/layers2.safetensors"
check "fashion_mlp, layers over 2 ranks (lavapipe, SwiftShader), 4 micro-batches" $?
close_tensors "$work/layers2.safetensors" "$work/single.safetensors"
check "layers over 2 ranks: within tolerance of the single device" $?
# Batch norm over whole batches (one micro-batch): the single device is the reference. Both
# through columns and the matmul (VKT_CONV=columns): lavapipe's direct conv kernels sum in
# another order than SwiftShader's products, which 20 steps through batchnorm carried past the
# tolerance (test_parallel.c says more).
VKT_CONV=columns "$bin" train --model "$cnn" $cnnc --device llvmpipe --save "$work/cnn_single.safetensors"
check "fashion_cnn, single device" $?
VKT_CONV=columns mpi 3 train --model "$cnn" $cnnc --device-per-rank llvmpipe,swiftshader,llvmpipe \
    --strategy layers --micro-batches 1 --save "$work/cnn_layers3.safetensors"
check "fashion_cnn, layers over 3 ranks (lavapipe, SwiftShader, lavapipe)" $?
close_tensors "$work/cnn_layers3.safetensors" "$work/cnn_single.safetensors"
check "fashion_cnn, layers over 3 ranks: within tolerance of the single device" $?
# Data x pipeline (--pipelines 2, one micro-batch): each pipeline normalises its shard and keeps
# pipeline 0's running statistics, as replicas do, so replicated over one pipeline's drivers in
# one process is the reference. A replica runs every layer on its driver, a pipeline its second
# stage on SwiftShader: all three runs through columns and the matmul (VKT_CONV=columns), for
# lavapipe's direct conv kernels sum in another order (above).
VKT_CONV=columns "$bin" train --model "$cnn" $cnnc --device llvmpipe,swiftshader --strategy replicated \
    --save "$work/cnn_rep_ls.safetensors"
check "fashion_cnn, replicated over lavapipe + SwiftShader in one process" $?
VKT_CONV=columns mpi 2 train --model "$cnn" $cnnc --device-per-rank llvmpipe+swiftshader,llvmpipe+swiftshader \
    --strategy layers --pipelines 2 --micro-batches 1 --save "$work/pipe2.safetensors"
check "fashion_cnn, --pipelines 2 over 2 ranks (a pipeline of lavapipe + SwiftShader in each)" $?
close_tensors "$work/pipe2.safetensors" "$work/cnn_rep_ls.safetensors"
check "--pipelines 2, a pipeline per rank: within tolerance of the replicas in one process" $?
VKT_CONV=columns mpi 4 train --model "$cnn" $cnnc --device-per-rank llvmpipe,swiftshader,llvmpipe,swiftshader \
    --strategy layers --pipelines 2 --micro-batches 1 --save "$work/pipe4.safetensors"
check "fashion_cnn, --pipelines 2 over 4 ranks (each pipeline spans two ranks)" $?
close_tensors "$work/pipe4.safetensors" "$work/cnn_rep_ls.safetensors"
check "--pipelines 2, pipelines spanning ranks: within tolerance of the replicas in one process" $?
"$bin" plan --model "$cnn" --batch 64 --device 0,0,0,0 --pipelines 2 > "$work/plan_pipe.txt"
grep -q "pipelines 2: one pipeline of 2 stages at 32 rows" "$work/plan_pipe.txt"
check "plan --pipelines 2: one pipeline's two stages at 32 rows" $?
expect_error "--pipelines with replicated" "applies to --strategy layers" train --model "$mlp" \
    --device llvmpipe,llvmpipe --strategy replicated --pipelines 2
wide=$src/assets/models/wide_mlp.json
wcommon="--model $wide --limit-train 256 --limit-test 64 --batch 32 --max-steps 3 --quiet --mem-limit 90M --device llvmpipe"
"$bin" plan --model "$wide" --batch 32 --mem-limit 90M --device-per-rank llvmpipe,llvmpipe \
    > "$work/plan.txt"
grep -q "^recommended: layers" "$work/plan.txt" && grep -q "^tensor: not applicable" "$work/plan.txt" &&
    grep -q "rank 1 #1 llvmpipe" "$work/plan.txt"
check "plan --device-per-rank: ranks labelled, tensor not across ranks, layers recommended: $(grep '^recommended' "$work/plan.txt" | head -c 200)" $?
mpi 2 train $wcommon --strategy layers --json > "$work/wide.json" 2> "$work/wide.err"
check "wide_mlp (a replica above --mem-limit 90M) trains as layers over 2 ranks" $?
python3 -c "
import json, sys
r = json.loads(open('$work/wide.json').read().strip().splitlines()[-1])
peaks = [d['peak_memory_bytes'] for d in r['devices']]
print('rank 0 peaks', peaks)
sys.exit(0 if peaks and max(peaks) <= 90 * 2**20 else 1)"
check "wide_mlp layers over 2 ranks: rank 0's device peak under 90 MiB" $?
mpi 2 train $wcommon --strategy replicated > "$work/out" 2> "$work/err"
rc=$?
[ $rc -ne 0 ] && grep -q "rank [01].*needs.*--strategy layers" "$work/err"
check "wide_mlp: replicated over 2 ranks refuses, naming the rank (exit $rc): $(grep -m1 vktrain: "$work/err" | head -c 300)" $?

# --- faults -------------------------------------------------------------------------------------
# A long run that checkpoints every epoch (20 steps); rank 1 is killed once the first exists.
long="--model $mlp --limit-train 1280 --batch 64 --epochs 200 --seed 3 --quiet --no-eval"
mpi 2 train $long --device llvmpipe --save "$work/ck.safetensors" > "$work/kill.out" 2>&1 &
job=$!
for _ in $(seq 600); do [ -f "$work/ck.safetensors" ] && break; sleep 0.1; done
sleep 0.5
rank1=$(pgrep -f "$work/ck.safetensors" | while read -r p; do
    tr '\0' '\n' < /proc/$p/environ 2> /dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && echo $p; done | head -1)
t0=$(date +%s.%N)
[ -n "$rank1" ] && kill -9 "$rank1"
check "rank 1 found and killed mid-run (pid ${rank1:-none})" $?
for _ in $(seq 300); do kill -0 $job 2> /dev/null || break; sleep 0.1; done
elapsed=$(python3 -c "import time; print('%.1f' % (time.time() - $t0))")
if kill -0 $job 2> /dev/null; then kill -9 $job; fi
wait $job; rc=$?
python3 -c "import sys; sys.exit(0 if $elapsed < 30 else 1)" && [ $rc -ne 0 ] && grep -qi "rank 1" "$work/kill.out"
check "the job ended ${elapsed} s after kill -9 (exit $rc) naming rank 1: $(grep -im1 'rank 1' "$work/kill.out" | head -c 200)" $?
step=$(python3 -c "import json,struct; d=open('$work/ck.safetensors','rb').read(); n=struct.unpack('<Q',d[:8])[0]; print(json.loads(d[8:8+n])['__metadata__']['step'])")
[ "$step" -ge 20 ]
check "the last checkpoint is at step $step" $?
resume_to=$((step + 20))
mpi 3 train $long --device llvmpipe --resume "$work/ck.safetensors" --max-steps $resume_to \
    --save "$work/r3.safetensors"
check "the checkpoint resumes on 3 ranks (to step $resume_to)" $?
"$bin" train $long --device llvmpipe --resume "$work/ck.safetensors" --max-steps $resume_to \
    --save "$work/r1.safetensors"
check "the checkpoint resumes on one process" $?
close_tensors "$work/r3.safetensors" "$work/r1.safetensors"
check "3 ranks resumed within tolerance of one process resumed" $?

mpi 2 train $long --device llvmpipe --rank-timeout 5 > "$work/stop.out" 2>&1 &
job=$!
sleep 6
rank1=$(pgrep -f -- "--rank-timeout 5" | while read -r p; do
    tr '\0' '\n' < /proc/$p/environ 2> /dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && echo $p; done | head -1)
t0=$(date +%s.%N)
[ -n "$rank1" ] && kill -STOP "$rank1"
for _ in $(seq 300); do kill -0 $job 2> /dev/null || break; sleep 0.1; done
elapsed=$(python3 -c "import time; print('%.1f' % (time.time() - $t0))")
if kill -0 $job 2> /dev/null; then pkill -9 -f -- "--rank-timeout 5"; kill -9 $job; fi
wait $job; rc=$?
python3 -c "import sys; sys.exit(0 if $elapsed < 25 else 1)" && [ $rc -ne 0 ] &&
    grep -q "rank 1 \(sent\|took\) nothing for 5 s" "$work/stop.out"
check "a stopped rank 1 ends the job after ${elapsed} s (--rank-timeout 5, exit $rc): $(grep -m1 'rank 1 \(sent\|took\)' "$work/stop.out" | head -c 300)" $?

# --- refusals -----------------------------------------------------------------------------------
mpi 2 train --model "$mlp" $common --device-per-rank llvmpipe > "$work/out" 2> "$work/err"
rc=$?
[ $rc -ne 0 ] && grep -q "names 1 rank and the run has 2" "$work/err"
check "--device-per-rank with one entry for 2 ranks is refused (exit $rc)" $?
expect_error "--device-per-rank outside mpirun" "started by mpirun" train --model "$mlp" \
    --device-per-rank llvmpipe,llvmpipe
mpi 2 train --model "$mlp" $common --device llvmpipe --strategy tensor > "$work/out" 2> "$work/err"
rc=$?
[ $rc -ne 0 ] && grep -q "replicated or layers" "$work/err"
check "tensor across ranks is refused (exit $rc): $(grep -m1 vktrain: "$work/err" | head -c 200)" $?

echo "test_cli_mpi: $fails failed"
[ $fails -eq 0 ]
