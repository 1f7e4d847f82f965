#!/usr/bin/env bash
# One device call for expert parallelism on ONE GPU (issue 20; docs/expert_parallel.md): build
# the targets it needs into build-gpu, then
#   1. halcyon_ep_ipc_test: two spawned processes on cuda:0 share cuMemCreate memory through
#      IPC (POSIX fd over a unix socket) and write each other's buffers through the peer
#      mapping; then the EP MoE layer (2 ranks, one GPU) against the single-rank layer;
#   2. halcyon bench ep --device cuda:0 --ranks 2 (the staged all-to-all: for orientation only);
#   3. the CPU communicator's tests (unit.comm, unit.moe_ep) for comparison.
# Logs go to $OUT. On a multi-GPU machine the caller also sets NCCL_NVLS_ENABLE=0 (not needed
# here: nothing loads NCCL yet).
#   run(command="bash bench/ep_gpu_run.sh", carry=[".devdeps"], kind="nvidia-h100-x1")
set -u -o pipefail
B=${1:-build-gpu}
. "$(dirname "$0")/gpu_run_env.sh"  # OUT, deps, LD_LIBRARY_PATH, HALCYON_CACHE_DIR
log=$OUT/ep.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; git log --oneline -1 2>/dev/null; } | tee "$log"
if [ ! -x "$B/tests/cuda/halcyon_ep_ipc_test" ] || [ ! -x "$B/bin/halcyon" ]; then
  { cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$deps" -DHALCYON_WERROR=ON \
      -DHALCYON_ENABLE_CUDA=ON && timeout 330 ninja -C "$B" halcyon_cli halcyon_ep_ipc_test halcyon_comm_tests \
      halcyon_moe_ep_tests; } > "$OUT/ep_build.log" 2>&1
  echo "build rc=$?" | tee -a "$log"
  grep -m5 -B2 -A8 "error" "$OUT/ep_build.log" | tee -a "$log"
  tail -3 "$OUT/ep_build.log" | tee -a "$log"
fi
echo "\$ halcyon_ep_ipc_test" | tee -a "$log"
timeout 150 "$B/tests/cuda/halcyon_ep_ipc_test" > "$OUT/ep_ipc.txt" 2>&1
echo "rc=$?" >> "$OUT/ep_ipc.txt"
tail -30 "$OUT/ep_ipc.txt" | tee -a "$log"
echo "\$ halcyon bench ep --device cuda:0 --ranks 2 --tokens 512 --experts 32 --hidden 2048 --inter 1024 --iters 5" | tee -a "$log"
timeout 80 "$B/bin/halcyon" bench ep --device cuda:0 --ranks 2 --tokens 512 --experts 32 --hidden 2048 --inter 1024 --iters 5 2>&1 | tail -15 | tee -a "$log"
echo "\$ CPU communicator tests" | tee -a "$log"
(cd "$B" && timeout 60 ctest -R 'unit.comm|unit.moe_ep' --output-on-failure 2>&1 | tail -6) | tee -a "$log"
date -u | tee -a "$log"
