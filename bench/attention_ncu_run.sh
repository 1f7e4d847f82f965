#!/usr/bin/env bash
# One device call: Nsight Compute on the chosen Hopper attention kernels at issue 15's shapes,
# with the warp-state (stall) and scheduler sections: paged decode `sm90.tma` (launches 1-3 of
# hc_attn_decode_d128_s3: Hkv 16; launch 4: Hkv 2) and MLA decode `sm90.ws.tma` (its first
# launch: Sq 1). Runs carried binaries (build-gpu/bin/halcyon); full reports in $OUT.
#   run(command="bash bench/attention_ncu_run.sh", carry=[".devdeps", ".commit", "build-gpu/bin/halcyon", "build-gpu/lib"])
set -u -o pipefail
. "$(dirname "$0")/gpu_run_env.sh"  # OUT, deps, TREE
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
H=build-gpu/bin/halcyon
log=$OUT/attention_ncu.txt
{ date -u; echo "tree: $TREE"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee "$log"
sections=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats
          --section WarpStateStats --section SchedulerStats)
for job in "decode:regex:hc_attn_decode_d128_s3_sm90:4" "mla:regex:hc_attn_mla_sm90ws_tma\$:1"; do
  fam=${job%%:*} rest=${job#*:}
  k=${rest%:*} c=${rest##*:}
  echo "\$ ncu --clock-control none ${sections[*]} -k $k -c $c halcyon bench attention $fam --device cuda:0 --iters 1" | tee -a "$log"
  timeout 240 "$ncu" --clock-control none "${sections[@]}" -k "$k" -c "$c" "$H" bench attention "$fam" --device cuda:0 \
    --iters 1 > "$OUT/ncu_$fam.txt" 2>&1
  echo "rc=$?" | tee -a "$log"
  grep -E "hc_attn_.*\(|Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|Issued Warp Per|No Eligible|Stall|==ERR|==WARN" \
    "$OUT/ncu_$fam.txt" | head -80 | tee -a "$log"
done
date -u | tee -a "$log"
