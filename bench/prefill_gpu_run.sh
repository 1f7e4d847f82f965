#!/usr/bin/env bash
# One device call for attention_prefill's warp-specialised Hopper kernel ("sm90.ws",
# kernels/ptx/attention/attention_sm90_ws.cu), from a clean tree: build halcyon_cli and
# halcyon_ptx_attention_tests into build-gpu, then the machine code counts (HGMMA, LDL/STL) of
# the attention cubins, the GPU tests (every PTX implementation against the CPU reference), the
# CTS's attention cases on cuda:0, `halcyon bench attention prefill` at s4096 and at 16k tokens
# (b1; FlashAttention-3's published configuration), torch SDPA (cuDNN, flash) in the same call,
# and ncu (SpeedOfLight, warp states) on one launch of the d128 kernel. Logs go to $OUT.
#   bash bench/prefill_gpu_run.sh [build dir, default build-gpu] [build|sass|tests|cts|bench|torch|ncu ...]
# Needs .devdeps (fmt, doctest), as bench/attention_gpu_run.sh.
set -u -o pipefail
B=${1:-build-gpu}
shift || true
what=${*:-build sass tests cts bench torch ncu}
. "$(dirname "$0")/gpu_run_env.sh"  # OUT, deps, LD_LIBRARY_PATH, HALCYON_CACHE_DIR
log=$OUT/prefill.txt
{ date -u; echo "tree: $TREE"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; } | tee "$log"
for w in $what; do
  case $w in
    build)
      { cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$deps" -DHALCYON_WERROR=ON \
          -DHALCYON_ENABLE_CUDA=ON && timeout 400 ninja -C "$B" halcyon_cli halcyon_ptx_attention_tests; } > "$OUT/build.log" 2>&1
      echo "build rc=$?" | tee -a "$log"
      grep -E "ptxas|error" "$OUT/build.log" | grep -i -E "attention|error" | head -10 | tee -a "$log"
      tail -3 "$OUT/build.log" | tee -a "$log" ;;
    sass)
      for c in "$B"/kernels/ptx/attention/attention_sm90*.cubin; do
        [ -f "$c" ] && echo "$(basename "$c"): $(cuobjdump -sass "$c" | grep -c HGMMA) HGMMA, $(cuobjdump -sass "$c" | grep -c -E 'LDL|STL') LDL/STL" | tee -a "$log"
      done
      cuobjdump -res-usage "$B"/kernels/ptx/attention/attention_sm90_ws.sm_90a.cubin 2>&1 | grep -E "Function|REG" | tee -a "$log" ;;
    tests)
      echo "\$ halcyon_ptx_attention_tests" | tee -a "$log"
      timeout 150 "$B/tests/cuda/halcyon_ptx_attention_tests" > "$OUT/tests.log" 2>&1
      echo "rc=$?" | tee -a "$OUT/tests.log" | tee -a "$log"
      grep -E "sm90.ws|FAILED|ERROR|CHECK|test cases|assertions|SKIPPED" "$OUT/tests.log" | head -40 | tee -a "$log" ;;
    cts)
      echo "\$ halcyon cts --device cuda:0 --filter 'numeric.attention*'" | tee -a "$log"
      timeout 60 "$B/bin/halcyon" cts --device cuda:0 --filter 'numeric.attention*' --progress plain > "$OUT/cts.txt" 2>&1
      echo "rc=$?" >> "$OUT/cts.txt"
      tail -15 "$OUT/cts.txt" | tee -a "$log" ;;
    bench)
      echo "\$ halcyon bench attention prefill --device cuda:0 --iters 20" | tee -a "$log"
      timeout 120 "$B/bin/halcyon" bench attention prefill --device cuda:0 --iters 20 --json "$OUT/bench.json" 2>&1 | tee -a "$log"
      echo "\$ halcyon bench attention prefill --device cuda:0 --iters 5 --seqlen 16384 --batch 1" | tee -a "$log"
      timeout 120 "$B/bin/halcyon" bench attention prefill --device cuda:0 --iters 5 --seqlen 16384 --batch 1 2>&1 | tee -a "$log" ;;
    torch)
      echo "\$ python3 bench/attention_vs_torch.py" | tee -a "$log"
      timeout 150 python3 bench/attention_vs_torch.py --json "$OUT/torch.json" 2>&1 | grep -E "prefill|copy|torch|cuda" | tee -a "$log" ;;
    ncu)
      echo "\$ ncu --section SpeedOfLight --section WarpStateStats -k regex:sm90ws -c 1 halcyon bench attention prefill --iters 1" | tee -a "$log"
      timeout 150 ncu --kernel-name regex:'hc_attn_prefill_d128_sm90ws' --launch-count 1 --clock-control none \
        --section SpeedOfLight --section WarpStateStats --section Occupancy \
        "$B/bin/halcyon" bench attention prefill --device cuda:0 --iters 1 > "$OUT/ncu.txt" 2>&1
      grep -E "hc_attn|Duration|Throughput|SM Busy|Memory \[%\]|Stall|Warp Cycles|Registers|Achieved|Issued" "$OUT/ncu.txt" | head -40 | tee -a "$log"
      # Where the warps wait (stall reasons, % of active warps) and how busy the tensor pipe is.
      timeout 120 ncu --kernel-name regex:'hc_attn_prefill_d128_sm90ws' --launch-count 1 --clock-control none \
        --metrics 'regex:smsp__warp_issue_stalled_.*_per_warp_active\.pct$,regex:sm__pipe_tensor.*cycles_active.*pct_of_peak_sustained_active$,regex:sm__inst_executed_pipe_xu.*pct.*' \
        "$B/bin/halcyon" bench attention prefill --device cuda:0 --iters 1 >> "$OUT/ncu.txt" 2>&1
      sed -n '/pct/p' "$OUT/ncu.txt" | grep -v -E " 0(\.0+)?$" | sed 's/  */ /g' | head -40 | tee -a "$log" ;;
  esac
done
date -u | tee -a "$log"
