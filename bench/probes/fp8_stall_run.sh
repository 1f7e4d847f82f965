#!/usr/bin/env bash
# What the FP8 grouped GEMMs' warps stall on (issue 19), one device call: Nsight Compute's
# warp-state section and every per-issue stall ratio for the first FP8 SwiGLU and down launches
# of `halcyon bench moe --dtype fp8` at 4096 tokens (experts of 68-228 rows: tall tiles, a token
# count per consumer that changes from tile to tile) and at 512 (4-32 rows), plus the size of
# each kernel's code (the tall kernels hold one k-loop and epilogue per 16-row token count).
#   run(command="bash bench/probes/fp8_stall_run.sh build-gpu",
#       carry=[".devdeps", ".commit", "build-gpu/bin/halcyon", "build-gpu/lib"])
set -u -o pipefail
B=${1:-build-gpu}
. "$(dirname "$0")/../gpu_run_env.sh"  # OUT, deps, LD_LIBRARY_PATH, HALCYON_CACHE_DIR, TREE
export LD_LIBRARY_PATH=$PWD/$B/lib:$LD_LIBRARY_PATH
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
log=$OUT/fp8_stall.txt
{ date -u; echo "tree $TREE"; nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader; } | tee "$log"
for T in 4096 512; do
  echo "\$ ncu WarpStateStats + stall ratios -k regex:hc_moe_gemm_fp8 -c 2 halcyon bench moe --tokens $T --dtype fp8" | tee -a "$log"
  timeout 240 "$ncu" --clock-control none --section WarpStateStats --section SpeedOfLight --section SourceCounters \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' -k regex:hc_moe_gemm_fp8 -c 2 \
    "$B/bin/halcyon" bench moe --device cuda:0 --tokens $T --dtype fp8 --iters 1 > "$OUT/ncu_fp8_$T.txt" 2>&1
  echo "rc=$?" | tee -a "$log"
  grep -E "^  hc_moe|Duration|Compute \(SM\) Throughput|DRAM Throughput|Stall|stalled_[a-z_]*_per_issue_active.ratio +[a-z]* +[0-9.]*[1-9]|Warp Cycles Per Issued|Issued Warp|No Eligible" \
    "$OUT/ncu_fp8_$T.txt" | head -120 | tee -a "$log"
done
cubin=$(ls $B/kernels/ptx/moe/moe_gemm_sm90_fp8.sm_90a.cubin 2>/dev/null)
if [ -n "$cubin" ] && command -v cuobjdump > /dev/null; then
  cuobjdump -sass "$cubin" > "$OUT/fp8_sass.txt" 2>&1
  awk '/Function :/ {f=$3} /^ +\/\*[0-9a-f]+\*\// {n[f]++} END {for (k in n) print n[k], k}' "$OUT/fp8_sass.txt" | sort -n | tee -a "$log"
fi
date -u | tee -a "$log"
