#!/usr/bin/env bash
# One device call for paged decode (issue 15's decode targets), from a clean tree, in under 8
# minutes on an H100 or an H200: build halcyon_cli and the attention GPU test, then
#   tests  halcyon_ptx_attention_tests (every PTX implementation by name against the CPU
#          reference; decode and prefill cases only: the MLA cases are the mla branch's)
#   cts    the CTS's attention cases on cuda:0 (the selected implementations)
#   bench  `halcyon bench attention decode` (every decode implementation, copy rate in the run)
#   small  the same bench at batch 4 and 1 (small grids: the split rule's other end)
#   torch  `python3 bench/attention_vs_torch.py --only decode` (cuDNN, flash, copy rate)
#   san    compute-sanitizer racecheck and memcheck on the small decode test case
#   ncu    Nsight Compute on sm90.tma and sm80.ksplit (Hkv 16: the first 3 launches, Hkv 2: the 4th)
# Logs go to $OUT (at most 8 files); the key lines to stdout.
#   bash bench/decode_gpu_run.sh [build dir, default build-gpu] [build|tests|cts|bench|small|torch|san|ncu ...]
set -u -o pipefail
B=${1:-build-gpu}
shift || true
what=${*:-build tests cts bench small torch san ncu}
. "$(dirname "$0")/gpu_run_env.sh"  # OUT, deps, LD_LIBRARY_PATH, HALCYON_CACHE_DIR
log=$OUT/decode.txt
T=$B/tests/cuda/halcyon_ptx_attention_tests
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; git log -1 --oneline 2>/dev/null; } | tee "$log"
for w in $what; do
  case $w in
    build)
      if [ ! -x "$B/bin/halcyon" ] || [ ! -x "$T" ]; then
        { cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$deps" -DHALCYON_WERROR=ON \
            -DHALCYON_ENABLE_CUDA=ON && ninja -C "$B" halcyon_cli halcyon_ptx_attention_tests; } > "$OUT/decode_build.log" 2>&1
        echo "build rc=$?" | tee -a "$log"
        tail -3 "$OUT/decode_build.log" | tee -a "$log"
      fi ;;
    tests)
      echo "\$ $T -tce='*mla*'" | tee -a "$log"
      timeout 120 "$T" -tce='*mla*' > "$OUT/decode_tests.log" 2>&1
      echo "rc=$?" | tee -a "$log"
      grep -v "rel err" "$OUT/decode_tests.log" | tail -15 | tee -a "$log"
      # The worst relative error each decode implementation had, per output.
      grep "attention_decode (" "$OUT/decode_tests.log" | sed -E 's/.*attention_decode \(([^)]*)\) ([a-z_]+): rel err ([0-9.e+-]+).*/\1 \2 \3/' |
        sort -k1,2 -k3g | awk '{w[$1" "$2]=$3} END {for (k in w) print "  worst rel err", k, w[k]}' | sort | tee -a "$log" ;;
    cts)
      echo "\$ halcyon cts --device cuda:0 --filter 'numeric.attention*'" | tee -a "$log"
      timeout 60 "$B/bin/halcyon" cts --device cuda:0 --filter 'numeric.attention*' --progress plain > "$OUT/decode_cts.txt" 2>&1
      echo "rc=$?" >> "$OUT/decode_cts.txt"
      tail -6 "$OUT/decode_cts.txt" | tee -a "$log" ;;
    bench)
      echo "\$ halcyon bench attention decode --device cuda:0 --iters 20" | tee -a "$log"
      timeout 90 "$B/bin/halcyon" bench attention decode --device cuda:0 --iters 20 --json "$OUT/decode_bench.json" 2>&1 | tee -a "$log" ;;
    small)
      for b in 4 1; do
        echo "\$ halcyon bench attention decode --device cuda:0 --iters 20 --batch $b" | tee -a "$log"
        timeout 60 "$B/bin/halcyon" bench attention decode --device cuda:0 --iters 20 --batch $b 2>&1 | grep "decode Hq" | tee -a "$log"
      done ;;
    torch)
      echo "\$ python3 bench/attention_vs_torch.py --only decode" | tee -a "$log"
      timeout 90 python3 bench/attention_vs_torch.py --only decode --json "$OUT/decode_torch.json" 2>&1 | tee -a "$log" ;;
    san)
      cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
      for tool in racecheck memcheck; do
        echo "\$ compute-sanitizer --tool $tool $T -tc='attention_decode: edge cases*'" | tee -a "$log"
        timeout 100 "$cs" --tool "$tool" $([ $tool = memcheck ] && echo --report-api-errors no) "$T" -tc='attention_decode: edge cases*' > "$OUT/decode_san_$tool.txt" 2>&1
        echo "rc=$?" | tee -a "$log"
        grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|test cases" "$OUT/decode_san_$tool.txt" | sort | uniq -c | head -8 | tee -a "$log"
      done ;;
    ncu)
      ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
      # --iters 1: each implementation runs 3 times a config (2 warm-ups), so the 4th launch of
      # either kernel is its first at Hkv 2.
      for k in hc_attn_decode_d128_s3 hc_attn_fwd_d128_s3_ks; do
        echo "\$ ncu -k regex:$k -c 4 halcyon bench attention decode --iters 1" | tee -a "$log"
        timeout 90 "$ncu" --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
          --section LaunchStats -k "regex:$k" -c 4 "$B/bin/halcyon" bench attention decode --device cuda:0 --iters 1 \
          >> "$OUT/decode_ncu.txt" 2>&1
        echo "rc=$?" >> "$OUT/decode_ncu.txt"
      done
      grep -E "hc_attn_(decode|fwd).*\(|Duration|DRAM Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|==ERR|rc=" \
        "$OUT/decode_ncu.txt" | head -60 | tee -a "$log" ;;
  esac
done
date -u | tee -a "$log"
