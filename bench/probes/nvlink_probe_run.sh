#!/usr/bin/env bash
# One nvidia-h200-x2 call: the NVLink per-SM rate probe (nvlink_sm_rate.cu, see its header) and
# which channels and transport NCCL's grouped send/recv used in `halcyon bench ep` (NCCL_DEBUG
# lines), so that the EP kernels' rates can be read against the hardware's and NCCL's.
#   run(command="bash bench/probes/nvlink_probe_run.sh", carry=[".devdeps", ".commit",
#       "build-gpu/bin/halcyon", "build-gpu/lib"], kind="nvidia-h200-x2")
set -u -o pipefail
export NCCL_NVLS_ENABLE=0
. "$(dirname "$0")/../gpu_run_env.sh"  # OUT, deps, TREE
log=$OUT/nvlink_probe.txt
{ date -u; echo "tree: $TREE"; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv; } | tee "$log"
nvcc -O3 -std=c++17 -arch=sm_90a bench/probes/nvlink_sm_rate.cu -o "$OUT/nvlink_sm_rate" 2>&1 | tee -a "$log"
timeout 200 "$OUT/nvlink_sm_rate" 512 2>&1 | tee -a "$log"
rm -f "$OUT/nvlink_sm_rate"
if [ -x build-gpu/bin/halcyon ]; then
  name=probe-$$
  for r in 0 1; do
    NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P,TUNING timeout 150 build-gpu/bin/halcyon bench ep --rank $r --ranks 2 \
      --rendezvous "$name" --device cuda:$r --tokens 4096 --iters 5 --comm-units 20 --chunk-bytes 524288 \
      > "$OUT/bench_ep_nccl_rank$r.txt" 2>&1 &
  done
  wait
  grep -E "Channel|via|nChannels|P2P|NCCL version|proto|Proto" "$OUT/bench_ep_nccl_rank0.txt" | sort | uniq -c | sort -rn | head -40 | tee -a "$log"
  grep -vE "NCCL INFO" "$OUT/bench_ep_nccl_rank0.txt" | tail -30 | tee -a "$log"
fi
date -u | tee -a "$log"
