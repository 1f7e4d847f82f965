#!/usr/bin/env bash
# One device call for the attention operators, from a clean tree: configure and build the two
# targets it needs (when $1 has no bin/halcyon yet), then the GPU tests
# (halcyon_ptx_attention_tests: long sequences, split-KV, MLA 128 heads), the numeric CTS's
# attention cases on cuda:0, `halcyon bench attention`, and the torch side
# (bench/attention_vs_torch.py) in the same call, then (ncu) Nsight Compute's speed-of-light,
# memory and occupancy sections for one launch of the MLA and paged-decode kernels (the figures
# that miss their targets). Logs and JSON go to $OUT (7 files).
#   run(command="bash bench/attention_gpu_run.sh", carry=[".devdeps"], kind="nvidia-h100-x1")
#   bash bench/attention_gpu_run.sh [build dir, default build-gpu] [build|tests|cts|bench|torch|ncu ...]
# Needs .devdeps (fmt, doctest) made by /work/shared/device/pack-deps.sh, as scripts/gpu_check.sh.
set -u -o pipefail
B=${1:-build-gpu}
shift || true
what=${*:-build tests cts bench torch ncu}
. "$(dirname "$0")/gpu_run_env.sh"  # OUT, deps, LD_LIBRARY_PATH, HALCYON_CACHE_DIR
log=$OUT/attention.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; } | tee "$log"
for w in $what; do
  case $w in
    build)
      if [ ! -x "$B/bin/halcyon" ] || [ ! -x "$B/tests/cuda/halcyon_ptx_attention_tests" ]; then
        { cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$deps" -DHALCYON_WERROR=ON \
            -DHALCYON_ENABLE_CUDA=ON && ninja -C "$B" halcyon_cli halcyon_ptx_attention_tests; } > "$OUT/attention_build.log" 2>&1
        echo "build rc=$?" | tee -a "$log"
        tail -5 "$OUT/attention_build.log" | tee -a "$log"
      fi ;;
    tests)
      timeout 150 "$B/tests/cuda/halcyon_ptx_attention_tests" 2>&1 | tee "$OUT/attention_tests.log" | grep -v "rel err" | tail -40 | tee -a "$log"
      grep "rel err" "$OUT/attention_tests.log" | sort | uniq -c | sort -rn | head -12 | tee -a "$log" ;;
    cts)
      echo "\$ halcyon cts --device cuda:0 --filter 'numeric.attention*'" | tee -a "$log"
      timeout 60 "$B/bin/halcyon" cts --device cuda:0 --filter 'numeric.attention*' --progress plain > "$OUT/attention_cts.txt" 2>&1
      echo "rc=$?" >> "$OUT/attention_cts.txt"
      tail -25 "$OUT/attention_cts.txt" | tee -a "$log" ;;
    bench)
      echo "\$ halcyon bench attention --device cuda:0" | tee -a "$log"
      timeout 100 "$B/bin/halcyon" bench attention --device cuda:0 --iters 10 --json "$OUT/attention_bench.json" 2>&1 | tee -a "$log" ;;
    torch)
      echo "\$ python3 bench/attention_vs_torch.py" | tee -a "$log"
      timeout 120 python3 bench/attention_vs_torch.py --json "$OUT/attention_torch.json" 2>&1 | tee -a "$log" ;;
    ncu)
      # One launch each, the first that matches (the bench runs the selected implementation
      # first: the Sq 1 and Hkv 16 configs): the MLA kernel (sm90) and the key-split decode
      # (sm80.ksplit). Run 3 (docs/PERFORMANCE.md) profiled sm90.ov here instead.
      ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
      for spec in "mla hc_attn_mla_sm90 1" "decode hc_attn_fwd_d128_s3_ks 1"; do
        set -- $spec
        echo "\$ ncu -k regex:$2 -c $3 halcyon bench attention $1" | tee -a "$log"
        timeout 90 "$ncu" --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
          --section LaunchStats -k "regex:$2" -c "$3" "$B/bin/halcyon" bench attention "$1" --device cuda:0 --iters 1 \
          >> "$OUT/attention_ncu.txt" 2>&1
        echo "rc=$?" >> "$OUT/attention_ncu.txt"
      done
      grep -E "hc_attn|Duration|Memory Throughput|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Block Limit|Theoretical Occ|==ERR|rc=" \
        "$OUT/attention_ncu.txt" | head -60 | tee -a "$log" ;;
  esac
done
date -u | tee -a "$log"
