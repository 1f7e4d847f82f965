#!/usr/bin/env bash
# One device call for attention_mla_decode's Hopper kernels (kernels/ptx/attention/attention_mla_sm90*.cu:
# "sm90.pair.blk" / "sm90.pair" chosen where BS % 64 = 0, "sm90.ws" elsewhere), under 8 minutes: build
# halcyon_cli and halcyon_ptx_attention_tests into build-gpu, the kernels' register counts, the
# GPU tests (every PTX implementation by name against the CPU reference), the CTS's attention
# cases on cuda:0, `halcyon bench attention mla`, the torch composition (bench/attention_vs_torch.py
# --only mla) in the same call, Nsight Compute on one launch of each new kernel, then
# compute-sanitizer racecheck and memcheck over the CTS's MLA cases (the chosen implementations),
# racecheck over the GPU test's MLA cases (every implementation by name). Logs go to $OUT (8 files).
#   bash bench/mla_gpu_run.sh [build dir, default build-gpu] [build|sass|tests|cts|bench|torch|ncu|sanitize ...]
# Needs .devdeps (fmt, doctest), as bench/attention_gpu_run.sh.
set -u -o pipefail
B=${1:-build-gpu}
shift || true
what=${*:-build sass tests cts bench torch ncu sanitize}
. "$(dirname "$0")/gpu_run_env.sh"  # OUT, deps, LD_LIBRARY_PATH, HALCYON_CACHE_DIR
log=$OUT/mla.txt
t0=$SECONDS
# TREE: the commit this copy was made from (gpu_run_env.sh: .commit, or this checkout's HEAD).
{ date -u; echo "tree $TREE"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; } | tee "$log"
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for w in $what; do
  echo "--- $w ($((SECONDS - t0)) s)" | tee -a "$log"
  case $w in
    build)
      { cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$deps" -DHALCYON_WERROR=ON \
          -DHALCYON_ENABLE_CUDA=ON && timeout 300 ninja -C "$B" halcyon_cli halcyon_ptx_attention_tests; } > "$OUT/build.log" 2>&1
      echo "build rc=$?" | tee -a "$log"
      grep -E "error" "$OUT/build.log" | head -10 | tee -a "$log"
      tail -2 "$OUT/build.log" | tee -a "$log" ;;
    sass)
      for c in "$B"/kernels/ptx/attention/attention_mla_sm90*.cubin; do
        [ -f "$c" ] && cuobjdump -res-usage "$c" 2>&1 | grep -E "Function|REG" | tee -a "$log"
      done ;;
    tests)
      echo "\$ halcyon_ptx_attention_tests" | tee -a "$log"
      timeout 150 "$B/tests/cuda/halcyon_ptx_attention_tests" > "$OUT/tests.log" 2>&1
      echo "rc=$?" | tee -a "$OUT/tests.log" | tee -a "$log"
      grep -E "attention_mla|FAILED|ERROR|CHECK|test cases|assertions|SKIPPED" "$OUT/tests.log" | grep -v "rel err" | head -30 | tee -a "$log"
      grep "rel err" "$OUT/tests.log" | grep -i mla | sort | uniq -c | sort -rn | head -8 | tee -a "$log" ;;
    cts)
      echo "\$ halcyon cts --device cuda:0 --filter 'numeric.attention*'" | tee -a "$log"
      timeout 60 "$B/bin/halcyon" cts --device cuda:0 --filter 'numeric.attention*' --progress plain > "$OUT/cts.txt" 2>&1
      echo "rc=$?" >> "$OUT/cts.txt"
      tail -12 "$OUT/cts.txt" | tee -a "$log" ;;
    bench)
      echo "\$ halcyon bench attention mla --device cuda:0 --iters 20" | tee -a "$log"
      timeout 100 "$B/bin/halcyon" bench attention mla --device cuda:0 --iters 20 --json "$OUT/bench.json" 2>&1 | tee -a "$log" ;;
    torch)
      echo "\$ python3 bench/attention_vs_torch.py --only mla" | tee -a "$log"
      timeout 100 python3 bench/attention_vs_torch.py --only mla --json "$OUT/torch.json" 2>&1 | tee -a "$log" ;;
    ncu)
      # The chosen kernels at their shapes: sm90.pair.blk's first launch (Sq 1, where it is the
      # selected implementation and runs first) and every sm90.pair launch up to 8 (its Sq 1 runs
      # by name, then Sq 2, where it is selected: the Grid Size line tells them apart, 128 CTAs a
      # launch at Sq 1 and 256 at Sq 2); then sm90.ws.tma by name (its first launch, Sq 1).
      : > "$OUT/ncu.txt"
      for job in 'hc_attn_mla_sm90_pair_blk$|1' 'hc_attn_mla_sm90_pair$|8' 'hc_attn_mla_sm90ws_tma$|1'; do
        IFS='|' read -r k c <<< "$job"
        echo "\$ ncu -k regex:$k -c $c halcyon bench attention mla --iters 1" | tee -a "$log" "$OUT/ncu.txt"
        timeout 150 "$ncu" --kernel-name regex:"$k" --launch-count "$c" \
          --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section LaunchStats \
          --metrics 'sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active' \
          "$B/bin/halcyon" bench attention mla --device cuda:0 --iters 1 >> "$OUT/ncu.txt" 2>&1
        echo "rc=$?" >> "$OUT/ncu.txt"
      done
      grep -E "hc_attn|Grid Size|Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Compute \(SM\)|Registers Per|Warp Cycles Per Issued|mma|==ERR|rc=" \
        "$OUT/ncu.txt" | head -120 | tee -a "$log"
      grep -iE "barrier|stall" "$OUT/ncu.txt" | head -16 | tee -a "$log" ;;
    sanitize)
      # One file, $OUT/sanitize.txt (8 files at most). The CTS's MLA cases run the chosen
      # implementation: sm90.pair.blk / sm90.pair where BS is a multiple of 64 (cases 1 and 2),
      # sm90.ws elsewhere.
      : > "$OUT/sanitize.txt"
      for tool in racecheck memcheck; do
        echo "\$ compute-sanitizer --tool $tool halcyon cts --device cuda:0 --filter 'numeric.attention_mla*'" | tee -a "$log" "$OUT/sanitize.txt"
        # --report-api-errors no: the backend's probing driver calls fail by design (scripts/gpu_check.sh).
        timeout 100 "$san" --tool "$tool" --report-api-errors no "$B/bin/halcyon" cts --device cuda:0 --filter 'numeric.attention_mla*' \
          --progress plain > "$OUT/$tool.tmp" 2>&1
        echo "rc=$?" >> "$OUT/$tool.tmp"
        grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Race reported|Invalid|PASSED|FAILED|rc=" "$OUT/$tool.tmp" | sort | uniq -c | head -30 | tee -a "$log"
        head -c 100000 "$OUT/$tool.tmp" >> "$OUT/sanitize.txt"; rm -f "$OUT/$tool.tmp"
      done
      # Every MLA implementation by name (the GPU test's MLA cases).
      echo "\$ compute-sanitizer --tool racecheck halcyon_ptx_attention_tests -tc='attention_mla*'" | tee -a "$log" "$OUT/sanitize.txt"
      timeout 180 "$san" --tool racecheck --report-api-errors no "$B/tests/cuda/halcyon_ptx_attention_tests" -tc='attention_mla*' \
        > "$OUT/rt.tmp" 2>&1
      echo "rc=$?" >> "$OUT/rt.tmp"
      grep -E "Race reported|RACECHECK SUMMARY|test cases|assertions|rc=" "$OUT/rt.tmp" | sed -E 's/\+0x[0-9a-f]+//' | sort | uniq -c | head -30 | tee -a "$log"
      grep -oE "attention_mla_decode \([a-z0-9.]+\) out" "$OUT/rt.tmp" | sort | uniq -c | tee -a "$log"
      head -c 200000 "$OUT/rt.tmp" >> "$OUT/sanitize.txt"; rm -f "$OUT/rt.tmp" ;;
  esac
done
echo "--- done ($((SECONDS - t0)) s)" | tee -a "$log"
date -u | tee -a "$log"
