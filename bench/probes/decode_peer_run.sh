#!/usr/bin/env bash
# One device call (issue 15): the paged-layout read probe at Hkv 16 and 2, and Nsight Compute's
# launch, occupancy and throughput sections for torch SDPA's cuDNN and flash decode kernels and
# for halcyon's `sm90.tma` at the same shape (b64 Hq16 kv8192 d128). Logs under $OUT.
#   run(command="bash bench/probes/decode_peer_run.sh", carry=[".devdeps", ".commit", "build-gpu/bin/halcyon", "build-gpu/lib"])
set -u -o pipefail
. "$(dirname "$0")/../gpu_run_env.sh"  # OUT, deps, TREE
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
log=$OUT/decode_peer.txt
{ date -u; echo "tree: $TREE"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee "$log"
nvcc -O3 -std=c++17 -arch=sm_90a bench/probes/paged_read_rate.cu -o "$OUT/paged_read_rate" 2>&1 | tee -a "$log"
for shape in "64 16" "64 2" "256 2"; do
  echo "\$ paged_read_rate $shape" | tee -a "$log"
  # shellcheck disable=SC2086
  "$OUT/paged_read_rate" $shape 2>&1 | tee -a "$log"
done
rm -f "$OUT/paged_read_rate"
sections=(--section SpeedOfLight --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis)
keep='^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|Grid Size|Block Size|Registers Per|Shared Memory Configuration Size|Dynamic Shared|Static Shared|Waves Per SM|Achieved Occupancy|Theoretical Occupancy|Block Limit|==ERR|==WARN'
for b in cudnn flash; do
  echo "\$ ncu --nvtx --nvtx-include sdpa/ ${sections[*]} python3 bench/probes/sdpa_decode_once.py $b" | tee -a "$log"
  timeout 200 "$ncu" --clock-control none --nvtx --nvtx-include "sdpa/" "${sections[@]}" \
    python3 bench/probes/sdpa_decode_once.py $b > "$OUT/ncu_sdpa_$b.txt" 2>&1
  echo "rc=$?" | tee -a "$log"
  grep -E "$keep" "$OUT/ncu_sdpa_$b.txt" | head -80 | tee -a "$log"
done
echo "\$ ncu ${sections[*]} -k regex:hc_attn -c 8 halcyon bench attention decode --device cuda:0 --iters 1" | tee -a "$log"
timeout 200 "$ncu" --clock-control none "${sections[@]}" -k regex:hc_attn -c 8 build-gpu/bin/halcyon bench attention decode \
  --device cuda:0 --iters 1 > "$OUT/ncu_halcyon.txt" 2>&1
echo "rc=$?" | tee -a "$log"
grep -E "$keep" "$OUT/ncu_halcyon.txt" | head -80 | tee -a "$log"
date -u | tee -a "$log"
