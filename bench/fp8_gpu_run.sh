#!/usr/bin/env bash
# One device call for the FP8 MoE operators (issue 19), from a clean tree: configure and build
# the targets it needs, the machine code check (HGMMA present, no local-memory spills), the GPU
# tests against the CPU reference (halcyon_ptx_fp8_tests), the numeric CTS's FP8 cases on
# cuda:0, `halcyon bench moe --dtype fp8` at 4096, 512 and 128 tokens beside the bf16 layer, and
# the torch side (bench/moe_vs_torch.py --dtype fp8) in the same call, and the FP8 layer against
# torch eager bf16 call against call (paired_vs_torch.py --only moe). Logs and JSON go to $OUT.
#   run(command="bash bench/fp8_gpu_run.sh", carry=[".devdeps"], kind="nvidia-h100-x1")
#   bash bench/fp8_gpu_run.sh [build dir, default build-gpu] [build|sass|tests|cts|bench|compare-NAME[:T,T]|torch|paired ...]
# compare-NAME times the FP8 GEMMs built as sm90.NAME (swapw, swapw5, wide, tall, tallpf, talls) by name
# at 4096, 512 and 128 tokens, or at the sizes after the colon (compare-wide:4096).
# Needs .devdeps (fmt, doctest) made by /work/shared/device/pack-deps.sh, as scripts/gpu_check.sh.
set -u -o pipefail
B=${1:-build-gpu}
shift || true
what=${*:-build sass tests cts bench compare-wide:4096 compare-tallpf:4096 torch paired}
. "$(dirname "$0")/gpu_run_env.sh"  # OUT, deps, LD_LIBRARY_PATH, HALCYON_CACHE_DIR
log=$OUT/fp8.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; } | tee "$log"
H=$B/bin/halcyon
for w in $what; do
  case $w in
    build)
      if [ ! -x "$H" ] || [ ! -x "$B/tests/cuda/halcyon_ptx_fp8_tests" ]; then
        { cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$deps" -DHALCYON_WERROR=ON \
            -DHALCYON_ENABLE_CUDA=ON && ninja -C "$B" halcyon_cli halcyon_ptx_fp8_tests; } > "$OUT/fp8_build.log" 2>&1
        echo "build rc=$?" | tee -a "$log"
        tail -5 "$OUT/fp8_build.log" | tee -a "$log"
      fi ;;
    sass)  # HGMMA (wgmma) present, no LDL/STL (spilled accumulators) in the FP8 cubin
      for c in $(find "$B" -name 'moe_gemm_sm90_fp8*.cubin'); do
        echo "$c: $(cuobjdump -sass "$c" | grep -c -E 'QGMMA|HGMMA') QGMMA/HGMMA (FP8 wgmma is QGMMA), $(cuobjdump -sass "$c" | grep -c -E 'LDL|STL') LDL/STL" | tee -a "$log"
        # Where the spills of the tall build sit (ptxas reports a few bytes): the instructions
        # around each LDL/STL, to tell the tile setup from the k loop (QGMMA / FFMA around them).
        cuobjdump -sass -fun hc_moe_gemm_fp8_swiglu_sm90tall "$c" > "$OUT/tall.sass" 2>&1
        echo "tall SwiGLU: $(grep -c QGMMA "$OUT/tall.sass") QGMMA, $(grep -c -E 'LDL|STL' "$OUT/tall.sass") LDL/STL, the first at lines: $(grep -n -E 'LDL|STL' "$OUT/tall.sass" | cut -d: -f1 | head -30 | tr '\n' ' ')" | tee -a "$log"
        grep -n -B3 -A3 -E 'LDL|STL' "$OUT/tall.sass" | head -60 >> "$log"
      done ;;
    tests)
      timeout 240 "$B/tests/cuda/halcyon_ptx_fp8_tests" 2>&1 | tee "$OUT/fp8_tests.log" | tail -40 | tee -a "$log" ;;
    cts)
      echo "\$ halcyon cts --device cuda:0 --filter '*fp8*'" | tee -a "$log"
      timeout 90 "$H" cts --device cuda:0 --filter '*fp8*' --progress plain > "$OUT/fp8_cts.txt" 2>&1
      echo "rc=$?" >> "$OUT/fp8_cts.txt"
      tail -30 "$OUT/fp8_cts.txt" | tee -a "$log" ;;
    bench)
      # FP8 at the three sizes; the bf16 layer at 4096 beside it (its other sizes: docs/PERFORMANCE.md).
      for run in "4096 fp8" "4096 bf16" "512 fp8" "128 fp8"; do
        set -- $run
        echo "\$ halcyon bench moe --device cuda:0 --tokens $1 --dtype $2" | tee -a "$log"
        timeout 100 "$H" bench moe --device cuda:0 --tokens "$1" --dtype "$2" --json "$OUT/bench_$2_$1.json" 2>&1 | tee -a "$log"
      done ;;
    compare-*)  # the FP8 GEMMs by name (the gather form too where that build has one)
      spec=${w#compare-}; b=sm90.${spec%%:*}; sizes="4096 512 128"
      [ "$spec" != "${spec%%:*}" ] && sizes=$(echo "${spec#*:}" | tr ',' ' ')
      v="--impl moe_grouped_gemm_fp8_swiglu=$b --impl moe_grouped_gemm_fp8=$b"
      case $b in sm90.swapw|sm90.swapw5|sm90.wide) v="$v --impl moe_grouped_gemm_fp8_swiglu_gather=$b" ;; esac
      for T in $sizes; do
        echo "\$ halcyon bench moe --device cuda:0 --tokens $T --dtype fp8 $v" | tee -a "$log"
        timeout 100 "$H" bench moe --device cuda:0 --tokens "$T" --dtype fp8 $v --json "$OUT/bench_fp8_${b}_$T.json" 2>&1 \
          | grep -E "fp8|quantize|experts|layer|rows" | tee -a "$log"
      done ;;
    racecheck)  # the SwiGLU and down GEMM builds (where racecheck reported the scale-ring hazards before)
      for tc in swiglu down; do
        echo "\$ compute-sanitizer --tool racecheck halcyon_ptx_fp8_tests -tc='*$tc*'" | tee -a "$log"
        timeout 200 compute-sanitizer --tool racecheck --print-limit 5 "$B/tests/cuda/halcyon_ptx_fp8_tests" -tc="*$tc*" \
          > "$OUT/fp8_racecheck_$tc.log" 2>&1
        echo "rc=$?" | tee -a "$log"
        grep -E "RACECHECK SUMMARY|hazard|Error|test cases|assertions" "$OUT/fp8_racecheck_$tc.log" | tail -12 | tee -a "$log"
      done ;;
    paired)  # the FP8 layer (Python MoeLayer) against torch eager's bf16 layer, call against call
      echo "\$ python3 bench/paired_vs_torch.py --only moe" | tee -a "$log"
      HALCYON_LIBRARY=$PWD/$B/lib/libhalcyon_runtime.so timeout 200 python3 bench/paired_vs_torch.py --only moe \
        --json "$OUT/paired_moe.json" 2>&1 | grep -v -i "warn" | tee -a "$log" ;;
    deepgemm)  # the two FP8 GEMMs against DeepGEMM's on the same rows (a checkout in .cache/deepgemm: bench/README.md)
      echo "\$ python3 bench/paired_vs_torch.py --only deepgemm" | tee -a "$log"
      PYTHONPATH=$PWD/.cache/deepgemm DG_JIT_CACHE_DIR=$(mktemp -d) HALCYON_LIBRARY=$PWD/$B/lib/libhalcyon_runtime.so \
        timeout 400 python3 bench/paired_vs_torch.py --only deepgemm --json "$OUT/paired_deepgemm.json" 2>&1 \
        | grep -v -i "warn" | tee -a "$log" ;;
    torch)
      echo "\$ python3 bench/moe_vs_torch.py --dtype fp8" | tee -a "$log"
      timeout 150 python3 bench/moe_vs_torch.py --dtype fp8 --json "$OUT/torch_fp8.json" 2>&1 | tee -a "$log" ;;
  esac
done
date -u | tee -a "$log"
