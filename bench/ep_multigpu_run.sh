#!/usr/bin/env bash
# Expert parallelism across GPUs of one host (issue 20's targets, for nvidia-h200-x2; NOT RUN
# yet: the machine was not lent). One rank per GPU:
#   1. ptx.ep: the dispatch/combine kernels in the world form on cuda:0 (a quick sanity check);
#   2. halcyon_ep_ipc_test --ranks G --gpus G: peer-mapped writes between GPUs, then the EP layer
#      (NCCL all-to-all, peer writes, the dispatch/combine kernels over NVLink) against the
#      single-rank layer;
#   3. halcyon bench ep, one process per GPU started here (--rank/--rendezvous), DeepSeek-V3
#      shape per GPU: dispatch/combine GB/s over NCCL's grouped send/recv, a plain peer copy and
#      the ep_dispatch/ep_combine kernels on a 20-SM comm partition (chunks of 512 KiB), and
#      the layer over each (the kernels' beside the GEMMs on the other 112 SMs), whole and in 2
#      micro-batches against its grouped GEMMs alone (target 1.1x); every figure also in
#      $OUT/bench_ep.json.
# NVLink multicast (NVLS) stays off, as the machine's notes ask: set here by the caller's
# script, never by halcyon's library code.
#   run(command="bash bench/ep_multigpu_run.sh", carry=[".devdeps"], kind="nvidia-h200-x2")
set -u -o pipefail
export NCCL_NVLS_ENABLE=0
B=${1:-build-gpu}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
deps=$PWD/.devdeps/usr
[ -d "$deps" ] && export LD_LIBRARY_PATH=$deps/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export HALCYON_CACHE_DIR=${HALCYON_CACHE_DIR:-$(mktemp -d)}
G=$(nvidia-smi -L | wc -l)
log=$OUT/ep_multigpu.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; nvidia-smi topo -m; echo "GPUs: $G"; } | tee "$log"
if [ ! -x "$B/tests/cuda/halcyon_ep_ipc_test" ] || [ ! -x "$B/bin/halcyon" ]; then
  { cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$deps" -DHALCYON_WERROR=ON \
      -DHALCYON_ENABLE_CUDA=ON && timeout 330 ninja -C "$B" halcyon_cli halcyon_ep_ipc_test halcyon_ptx_ep_tests; } \
    > "$OUT/ep_build.log" 2>&1
  echo "build rc=$?" | tee -a "$log"
fi
echo "\$ halcyon_ptx_ep_tests" | tee -a "$log"
timeout 90 "$B/tests/cuda/halcyon_ptx_ep_tests" 2>&1 | tail -6 | tee -a "$log"
echo "\$ halcyon_ep_ipc_test --ranks $G --gpus $G" | tee -a "$log"
timeout 200 "$B/tests/cuda/halcyon_ep_ipc_test" --ranks "$G" --gpus "$G" 2>&1 | tail -30 | tee -a "$log"
name=bench-ep-$$
echo "\$ halcyon bench ep --rank r --ranks $G --rendezvous $name --device cuda:r --tokens 4096 --iters 10 --comm-units 20 --chunk-bytes 524288 --micro-batches 2 --json $OUT/bench_ep.json" | tee -a "$log"
for ((r = 0; r < G; r++)); do
  timeout 200 "$B/bin/halcyon" bench ep --rank $r --ranks "$G" --rendezvous "$name" --device cuda:$r --tokens 4096 \
    --iters 10 --comm-units 20 --chunk-bytes 524288 --micro-batches 2 --json "$OUT/bench_ep.json" \
    > "$OUT/bench_ep_rank$r.txt" 2>&1 &
done
wait
cat "$OUT/bench_ep_rank0.txt" | tee -a "$log"
date -u | tee -a "$log"
