#!/usr/bin/env bash
# Committed copy of the script behind the 2026-11-24/25 figures (docs/partitions.md). Run from the repo root:
#   run(command="bash bench/partition_gpu_run.sh", carry=[".devdeps"], kind="nvidia-h100-x1")
# Partitions (issue 16): GEMM %smid test, overlap bench into pinned host memory and device
# memory (rates saved), ncu L2 hit rates of the GEMM and comm_dispatch.
set -u -o pipefail
. "$(dirname "$0")/gpu_run_env.sh"  # OUT, deps, LD_LIBRARY_PATH, HALCYON_CACHE_DIR, TREE
B=${B:-build-gpu}
log=$OUT/part.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "tree: $TREE"; } | tee $log
if [ ! -x $B/bin/halcyon ] || [ "${REBUILD:-1}" = 1 ]; then
  { cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH=$deps -DHALCYON_WERROR=ON -DHALCYON_ENABLE_CUDA=ON \
    && ninja -C $B halcyon_cli halcyon_partition_ops_tests halcyon_cuda_gpu_tests halcyon_runtime_tests; } > $OUT/part_build.log 2>&1
  echo "build rc=$?" | tee -a $log; tail -3 $OUT/part_build.log | tee -a $log
fi
H=$B/bin/halcyon
echo '$ halcyon_partition_ops_tests' | tee -a $log
timeout 120 $B/tests/cuda/halcyon_partition_ops_tests 2>&1 | tail -15 | tee -a $log
echo '$ halcyon_cuda_gpu_tests -tc=*partition*' | tee -a $log
timeout 120 $B/tests/cuda/halcyon_cuda_gpu_tests -tc='*partition*' 2>&1 | tail -4 | tee -a $log
for d in host device; do
  echo "\$ halcyon bench overlap --device cuda:0 --dest $d --fine --comm-units 8,12,16,20,24,32,40 --iters 12 --save-rates rates.txt" | tee -a $log
  timeout 200 $H bench overlap --device cuda:0 --dest $d --fine --comm-units 8,12,16,20,24,32,40 --iters 12 \
    --save-rates $OUT/partition_rates.txt --json $OUT/overlap_$d.json --svg $OUT/overlap_$d.svg 2>&1 | tee -a $log
done
echo '$ ncu L2 hit rate: GEMM and comm_dispatch (each alone, as ncu serializes)' | tee -a $log
timeout 150 ncu --metrics lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
  -k 'regex:hc_moe_gemm_sm90swapw|hc_comm_dispatch' --launch-skip 0 --launch-count 4 \
  $H bench overlap --device cuda:0 --dest device --fine --comm-units 20 --chunks 64 --iters 1 > $OUT/ncu_l2.txt 2>&1
grep -E "hc_|lts__|dram__|gpu__time" $OUT/ncu_l2.txt | head -40 | tee -a $log
