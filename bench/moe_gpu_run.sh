#!/usr/bin/env bash
# One device call for the PTX operators: GPU tests against the CPU reference, `halcyon bench
# moe` at 4096/512/128 tokens, the torch side (bench/moe_vs_torch.py) in the same call, and
# `halcyon cts --device cuda:0` when the CLI has it. Run from the repository root on the GPU
# machine with prebuilt binaries in $1 (default .bench: bin/halcyon, halcyon_ptx_ops_tests,
# lib/) and .devdeps (fmt); logs and JSON go to $OUT (at most 8 files).
#   bash bench/moe_gpu_run.sh [.bench] [tests|bench|torch|cts ...]
set -u -o pipefail
B=${1:-.bench}
shift || true
what=${*:-sass tests bench torch cts}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/$B/lib:$PWD/.devdeps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
log=$OUT/bench.txt
# The grouped GEMMs' Hopper kernel by implementation name (sm90.swapw|swap|tma|basic): the
# --impl flags of `halcyon bench moe` (the library reads no environment variables).
grouped() { echo "--impl moe_grouped_gemm_swiglu=sm90.$1 --impl moe_grouped_gemm=sm90.$1"; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv; } \
  | tee "$log"
for w in $what; do
  case $w in
    sass)  # the Hopper GEMM's machine code: HGMMA (wgmma) present?
      for c in "$B"/*.cubin; do
        [ -f "$c" ] && echo "$c: $(cuobjdump -sass "$c" | grep -c HGMMA) HGMMA, $(cuobjdump -sass "$c" | grep -c -E 'LDL|STL') LDL/STL" | tee -a "$log"
      done ;;
    tests)
      timeout 200 "$B/halcyon_ptx_ops_tests" 2>&1 | tee "$OUT/tests.log" | tail -40 ;;
    bench)
      for T in 4096 512 128; do
        echo "\$ halcyon bench moe --device cuda:0 --tokens $T" | tee -a "$log"
        timeout 100 "$B/bin/halcyon" bench moe --device cuda:0 --tokens "$T" --json "$OUT/bench_$T.json" 2>&1 | tee -a "$log"
      done ;;
    bench-copy)  # the layer on the permuted copy instead of the gather path, for comparison
      echo "\$ halcyon bench moe --device cuda:0 --tokens 4096 --path copy" | tee -a "$log"
      timeout 100 "$B/bin/halcyon" bench moe --device cuda:0 --tokens 4096 --path copy --json "$OUT/bench_copy.json" 2>&1 | tee -a "$log" ;;
    demo)
      echo "\$ halcyon demo --iters 5" | tee -a "$log"
      timeout 200 "$B/bin/halcyon" demo --iters 5 2>&1 | tail -30 | tee -a "$log" ;;
    bench-basic)  # the cp.async Hopper GEMMs instead of the TMA and split-K ones, for comparison
      a="$(grouped basic) --impl gemm_bf16=sm90.basic --impl moe_grouped_gemm_swiglu_gather=sm80"
      echo "\$ halcyon bench moe --device cuda:0 --tokens 4096 $a" | tee -a "$log"
      timeout 100 "$B/bin/halcyon" bench moe --device cuda:0 --tokens 4096 $a --json "$OUT/bench_basic.json" 2>&1 | tee -a "$log" ;;
    compare)  # the row-tile and the swap-AB TMA kernels (both builds) alternately in one call: 4096 tokens twice each, 512 and 128 once
      for T in 4096 4096 512 128; do
        for v in tma swap swapw; do
          echo "\$ halcyon bench moe --device cuda:0 --tokens $T $(grouped $v)" | tee -a "$log"
          timeout 100 "$B/bin/halcyon" bench moe --device cuda:0 --tokens $T $(grouped $v) 2>&1 \
            | grep -E "rows|copy|swiglu|down|experts|layer" | tee -a "$log"
        done
      done ;;
    bench-tma|bench-swap)  # one Hopper GEMM variant by name, 4096 and 512 tokens, for comparison
      v=${w#bench-}
      for T in 4096 512; do
        echo "\$ halcyon bench moe --device cuda:0 --tokens $T $(grouped $v)" | tee -a "$log"
        timeout 100 "$B/bin/halcyon" bench moe --device cuda:0 --tokens $T $(grouped $v) 2>&1 | tee -a "$log"
      done ;;
    bench-plan1)  # moe_permute with the single-block plan, for comparison
      echo "\$ halcyon bench moe --device cuda:0 --tokens 4096 --impl moe_permute=sm80.one" | tee -a "$log"
      timeout 100 "$B/bin/halcyon" bench moe --device cuda:0 --tokens 4096 --impl moe_permute=sm80.one --json "$OUT/bench_plan1.json" 2>&1 | tee -a "$log" ;;
    ncu)  # one launch of each grouped GEMM at the DeepSeek shape: where the time goes
      echo "\$ ncu (SOL, memory workload) on hc_moe_gemm_swiglu_sm90tma / hc_moe_gemm_sm90tma, T=4096" | tee -a "$log"
      timeout 240 ncu --kernel-name regex:'hc_moe_gemm_(swiglu_)?sm90(tma)?$' --launch-count 2 --clock-control none \
        --section SpeedOfLight --section MemoryWorkloadAnalysis \
        "$B/bin/halcyon" bench moe --device cuda:0 --tokens 4096 --iters 1 > "$OUT/ncu.txt" 2>&1
      timeout 150 ncu --kernel-name regex:'hc_moe_(gate|permute_plan|permute_scatter|combine)' --launch-count 4 --clock-control none \
        --section SpeedOfLight "$B/bin/halcyon" bench moe --device cuda:0 --tokens 4096 --iters 1 >> "$OUT/ncu.txt" 2>&1
      grep -E "hc_moe|Duration|Throughput|L2 Hit|Mem Busy|Max Bandwidth|DRAM|L1/TEX Hit|SM Busy|Memory \[%\]" "$OUT/ncu.txt" \
        | head -80 | tee -a "$log" ;;
    torch)
      echo "\$ python3 bench/moe_vs_torch.py" | tee -a "$log"
      timeout 200 python3 bench/moe_vs_torch.py --json "$OUT/torch.json" 2>&1 | tee -a "$log" ;;
    cts)
      echo "\$ halcyon cts --device cuda:0" | tee -a "$log"
      timeout 90 "$B/bin/halcyon" cts --device cuda:0 > "$OUT/cts.txt" 2>&1
      echo "rc=$?" >> "$OUT/cts.txt"
      tail -25 "$OUT/cts.txt" | tee -a "$log" ;;
  esac
done
date -u | tee -a "$log"
