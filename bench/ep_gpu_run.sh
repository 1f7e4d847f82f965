#!/usr/bin/env bash
# One device call for expert parallelism on ONE GPU (issue 20; docs/expert_parallel.md): build
# the targets it needs into build-gpu, then
#   1. ptx.ep: the ep_dispatch/ep_combine kernels in the contracts' world form (every rank's
#      blocks in one grid), over generations, and on a 16-SM comm partition;
#   2. the conformance suite's ep_dispatch/ep_combine cases on cuda:0 against the CPU reference;
#   3. halcyon_ep_ipc_test: two spawned processes on cuda:0 share cuMemCreate memory through
#      IPC (POSIX fd over a unix socket) and write each other's buffers; then the EP MoE layer
#      (2 ranks, one GPU) against the single-rank layer over the staged all-to-all, peer
#      writes, and the dispatch/combine kernels (flags in peer memory, no host wait);
#   4. halcyon bench ep --device cuda:0 --ranks 2 --comm-units 16: dispatch/combine per rank (staged
#      all-to-all, peer copies, the kernels), the layer over each transport;
#   5. compute-sanitizer memcheck over ptx.ep (the DeepSeek-size case excluded: time).
# Two processes on one GPU time-slice: flag waits between them measure the scheduler, not a
# link. On a multi-GPU machine use bench/ep_multigpu_run.sh (it sets NCCL_NVLS_ENABLE=0).
#   run(command="bash bench/ep_gpu_run.sh", carry=[".devdeps"], kind="nvidia-h100-x1")
set -u -o pipefail
B=${1:-build-gpu}
. "$(dirname "$0")/gpu_run_env.sh"  # OUT, deps, LD_LIBRARY_PATH, HALCYON_CACHE_DIR
log=$OUT/ep.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; git log --oneline -1 2>/dev/null; } | tee "$log"
if [ ! -x "$B/tests/cuda/halcyon_ep_ipc_test" ] || [ ! -x "$B/bin/halcyon" ] || [ ! -x "$B/tests/cuda/halcyon_ptx_ep_tests" ]; then
  { cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$deps" -DHALCYON_WERROR=ON \
      -DHALCYON_ENABLE_CUDA=ON && timeout 300 ninja -C "$B" halcyon_cli halcyon_ep_ipc_test halcyon_ptx_ep_tests; } \
    > "$OUT/ep_build.log" 2>&1
  echo "build rc=$?" | tee -a "$log"
  grep -m5 -B2 -A8 "error" "$OUT/ep_build.log" | tee -a "$log"
  tail -3 "$OUT/ep_build.log" | tee -a "$log"
fi
echo "\$ halcyon_ptx_ep_tests" | tee -a "$log"
timeout 90 "$B/tests/cuda/halcyon_ptx_ep_tests" > "$OUT/ptx_ep.txt" 2>&1
echo "rc=$?" >> "$OUT/ptx_ep.txt"
tail -25 "$OUT/ptx_ep.txt" | tee -a "$log"
echo "\$ halcyon cts --device cuda:0 --filter 'numeric.ep_*'" | tee -a "$log"
timeout 60 "$B/bin/halcyon" cts --device cuda:0 --filter 'numeric.ep_*' --progress plain 2>&1 | tail -20 | tee -a "$log"
echo "\$ halcyon_ep_ipc_test" | tee -a "$log"
timeout 150 "$B/tests/cuda/halcyon_ep_ipc_test" > "$OUT/ep_ipc.txt" 2>&1
echo "rc=$?" >> "$OUT/ep_ipc.txt"
tail -30 "$OUT/ep_ipc.txt" | tee -a "$log"
echo "\$ halcyon bench ep --device cuda:0 --ranks 2 --tokens 512 --experts 32 --hidden 2048 --inter 1024 --iters 5 --comm-units 16" | tee -a "$log"
timeout 90 "$B/bin/halcyon" bench ep --device cuda:0 --ranks 2 --tokens 512 --experts 32 --hidden 2048 --inter 1024 \
  --iters 5 --comm-units 16 2>&1 | tail -25 | tee -a "$log"
echo "\$ compute-sanitizer --tool memcheck halcyon_ptx_ep_tests -tce='*DeepSeek*'" | tee -a "$log"
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
timeout 150 "$cs" --tool memcheck --error-exitcode 99 --report-api-errors no \
  "$B/tests/cuda/halcyon_ptx_ep_tests" -tce='*DeepSeek*' > "$OUT/memcheck_ptx_ep.txt" 2>&1
echo "memcheck rc=$?" | tee -a "$OUT/memcheck_ptx_ep.txt" | tee -a "$log"
tail -8 "$OUT/memcheck_ptx_ep.txt" | tee -a "$log"
date -u | tee -a "$log"
