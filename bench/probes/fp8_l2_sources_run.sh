#!/usr/bin/env bash
# Where the FP8 grouped GEMMs' L2 reads come from (issue 19), one device call: Nsight Compute
# counters for the first FP8 SwiGLU and down launches of `halcyon bench moe --dtype fp8` at
# 4096 tokens. The operands arrive by TMA; the only global loads through the LSU are the
# scale loads (the three scale-producing warps' strided 4-byte a_scale reads and the weight
# scales), so the LSU's global-load sectors that miss L1 are the scales' share of the L2 reads:
#   l1tex__t_sectors_pipe_lsu_mem_global_op_ld(.._lookup_hit / _lookup_miss)  scale sectors
#   lts__t_sectors_op_read, lts__t_sectors_srcunit_tex_op_read               all L2 reads
#   dram__bytes_read                                                           what DRAM gave
#   run(command="bash bench/probes/fp8_l2_sources_run.sh build-gpu",
#       carry=[".devdeps", ".commit", "build-gpu/bin/halcyon", "build-gpu/lib"])
set -u -o pipefail
B=${1:-build-gpu}
T=${2:-4096}
. "$(dirname "$0")/../gpu_run_env.sh"  # OUT, deps, LD_LIBRARY_PATH, HALCYON_CACHE_DIR, TREE
export LD_LIBRARY_PATH=$PWD/$B/lib:$LD_LIBRARY_PATH
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
log=$OUT/fp8_l2_sources.txt
{ date -u; echo "tree $TREE"; nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader; } | tee "$log"
m=lts__t_sectors_op_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum
m=$m,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum
m=$m,l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_miss.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum
m=$m,gpu__time_duration.sum
echo "\$ ncu --metrics $m -k regex:hc_moe_gemm_fp8 -c 2 halcyon bench moe --tokens $T --dtype fp8 --iters 1" | tee -a "$log"
timeout 240 "$ncu" --clock-control none --cache-control all --metrics "$m" -k regex:hc_moe_gemm_fp8 -c 2 \
  "$B/bin/halcyon" bench moe --device cuda:0 --tokens "$T" --dtype fp8 --iters 1 > "$OUT/ncu_fp8_l2_$T.txt" 2>&1
echo "rc=$?" | tee -a "$log"
grep -E "^  hc_moe|lts__|dram__|l1tex__|gpu__time|==ERR|==WARN" "$OUT/ncu_fp8_l2_$T.txt" | head -40 | tee -a "$log"
date -u | tee -a "$log"
