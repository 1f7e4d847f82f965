#!/usr/bin/env bash
# One device call: Nsight Compute on chosen Hopper kernels at their issues' shapes, with the
# throughput, memory, compute and warp-state (stall) sections; runs carried binaries
# (build-gpu/bin/halcyon); full reports in $OUT.
#   attention: paged decode `sm90.tma.k128` (the d128 choice; launches 1-3 of hc_attn_decode_d128_s3_k128: Hkv 16; launch
#              4: Hkv 2) and MLA decode `sm90.pair.blk` (its first launch: Sq 1, where the registry
#              chooses it; bench/mla_gpu_run.sh's ncu step also profiles `sm90.pair` at Sq 2 and
#              `sm90.ws.tma`), issue 15;
#   moe:       the FP8 `sm90.tall` SwiGLU and down GEMMs at 4096 tokens (issue 19) and the bf16
#              `sm90.swapw` GEMMs beside them, with the L2 and DRAM counters.
#   run(command="bash bench/ncu_run.sh moe", carry=[".devdeps", ".commit", "build-gpu/bin/halcyon", "build-gpu/lib"])
# (It was bench/attention_ncu_run.sh before it took the MoE GEMMs.)
set -u -o pipefail
. "$(dirname "$0")/gpu_run_env.sh"  # OUT, deps, TREE
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
H=build-gpu/bin/halcyon
family=${1:-attention}
log=$OUT/${family}_ncu.txt
{ date -u; echo "tree: $TREE"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee "$log"
sections=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section Occupancy
          --section LaunchStats --section WarpStateStats --section SchedulerStats)
metrics=()
# Each job: name|kernel regex|launches|halcyon arguments.
case $family in
  attention)
    jobs=("decode|regex:hc_attn_decode_d128_s3_k128_sm90|4|bench attention decode --device cuda:0 --iters 1"
          "mla|regex:hc_attn_mla_sm90_pair_blk\$|1|bench attention mla --device cuda:0 --iters 1") ;;
  moe)
    metrics=(--metrics lts__t_sectors_op_read.sum,lts__t_bytes.sum.per_second,dram__bytes_read.sum.per_second,lts__t_sector_hit_rate.pct,sm__cycles_elapsed.avg.per_second,sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active)
    jobs=("fp8|regex:hc_moe_gemm_fp8_(swiglu_)?sm90|2|bench moe --device cuda:0 --tokens 4096 --dtype fp8 --iters 1"
          "bf16|regex:hc_moe_gemm_(swiglu_)?sm90swapw\$|2|bench moe --device cuda:0 --tokens 4096 --dtype bf16 --iters 1") ;;
  *) echo "usage: ncu_run.sh attention|moe" >&2; exit 2 ;;
esac
for job in "${jobs[@]}"; do
  IFS='|' read -r name k c args <<< "$job"
  echo "\$ ncu --clock-control none ${sections[*]} ${metrics[*]} -k $k -c $c halcyon $args" | tee -a "$log"
  # shellcheck disable=SC2086  # args split into words on purpose
  timeout 280 "$ncu" --clock-control none "${sections[@]}" "${metrics[@]}" -k "$k" -c "$c" "$H" $args > "$OUT/ncu_$name.txt" 2>&1
  echo "rc=$?" | tee -a "$log"
  grep -E "hc_.*\(|Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|Issued Warp Per|No Eligible|Stall|gmma|lts__|dram__|sm__cycles|==ERR|==WARN" \
    "$OUT/ncu_$name.txt" | head -80 | tee -a "$log"
done
date -u | tee -a "$log"
