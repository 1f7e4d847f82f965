#!/usr/bin/env bash
# Committed copy of the script behind the 2026-11-25 H200 figures (docs/PERFORMANCE.md). Run from the repo root:
#   run(command="bash bench/h200_gpu_run.sh", carry=[".devdeps"], kind="nvidia-h200")
# The H200 figures of issues 15, 16, 19 in one call: build, overlap (host and device
# destinations), attention beside torch, MoE bf16/fp8 beside torch.
set -u -o pipefail
export OUT=${OUT:-/tmp/out}; mkdir -p $OUT
deps=$PWD/.devdeps/usr
export LD_LIBRARY_PATH=$deps/lib/x86_64-linux-gnu PYTHONUNBUFFERED=1
export HALCYON_CACHE_DIR=$(mktemp -d)
B=/tmp/bh; H=$B/bin/halcyon; log=$OUT/h200.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee $log
{ cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH=$deps -DHALCYON_WERROR=ON -DHALCYON_ENABLE_CUDA=ON \
  && ninja -C $B halcyon_cli halcyon_ptx_fp8_tests; } > $OUT/h200_build.log 2>&1; echo "build rc=$?" | tee -a $log
for d in host device; do
  echo "\$ halcyon bench overlap --device cuda:0 --dest $d --fine --comm-units 8,12,16,20,24,32,40 --iters 10" | tee -a $log
  timeout 110 $H bench overlap --device cuda:0 --dest $d --fine --comm-units 8,12,16,20,24,32,40 --iters 10 \
    --save-rates $OUT/partition_rates_h200.txt --json $OUT/overlap_${d}_h200.json 2>&1 | grep -vE "^ +[0-9]+ +[0-9]+ " | tee -a $log
done
echo '$ compute-sanitizer --tool racecheck halcyon_ptx_fp8_tests' | tee -a $log
(cd $B/tests/cuda && timeout 150 $(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer) --tool racecheck --error-exitcode 99 --report-api-errors no --print-limit 5 ./halcyon_ptx_fp8_tests > $OUT/racecheck_fp8.txt 2>&1; echo "racecheck rc=$?" | tee -a $log)
grep -E "RACECHECK SUMMARY|test cases|assertions" $OUT/racecheck_fp8.txt | tee -a $log
echo '$ halcyon bench attention --device cuda:0 --iters 10' | tee -a $log
timeout 100 $H bench attention --device cuda:0 --iters 10 2>&1 | tee -a $log
echo '$ python3 bench/attention_vs_torch.py' | tee -a $log
timeout 100 python3 bench/attention_vs_torch.py 2>&1 | grep -v Warning | grep -v "fn = lambda" | tee -a $log
for T in 4096 512 128; do for dt in fp8 bf16; do
  [ $T != 4096 ] && [ $dt = bf16 ] && continue
  echo "\$ halcyon bench moe --device cuda:0 --tokens $T --dtype $dt" | tee -a $log
  timeout 60 $H bench moe --device cuda:0 --tokens $T --dtype $dt 2>&1 | grep -E "T=|copy rate|experts|whole layer|layer path" | tee -a $log
done; done
echo '$ python3 bench/moe_vs_torch.py --dtype fp8' | tee -a $log
timeout 120 python3 bench/moe_vs_torch.py --dtype fp8 2>&1 | tee -a $log
date -u | tee -a $log
