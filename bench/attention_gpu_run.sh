#!/usr/bin/env bash
# One device call for the attention operators: the GPU tests (halcyon_ptx_attention_tests,
# the numeric CTS's attention cases on cuda:0), `halcyon bench attention`, and the torch side
# (bench/attention_vs_torch.py) in the same call. Run from the repository root on the GPU
# machine with a build in $1 (default build); logs and JSON go to $OUT.
#   bash bench/attention_gpu_run.sh [build] [tests|cts|bench|torch ...]
set -u -o pipefail
B=${1:-build}
shift || true
what=${*:-tests cts bench torch}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
log=$OUT/attention.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; } | tee "$log"
for w in $what; do
  case $w in
    tests)
      timeout 240 "$B/tests/cuda/halcyon_ptx_attention_tests" 2>&1 | tee "$OUT/attention_tests.log" | tail -40 | tee -a "$log" ;;
    cts)
      echo "\$ halcyon cts --device cuda:0 --filter 'numeric.attention*'" | tee -a "$log"
      timeout 120 "$B/bin/halcyon" cts --device cuda:0 --filter 'numeric.attention*' --progress plain > "$OUT/attention_cts.txt" 2>&1
      echo "rc=$?" >> "$OUT/attention_cts.txt"
      tail -25 "$OUT/attention_cts.txt" | tee -a "$log" ;;
    bench)
      echo "\$ halcyon bench attention --device cuda:0" | tee -a "$log"
      timeout 200 "$B/bin/halcyon" bench attention --device cuda:0 --iters 10 --json "$OUT/attention_bench.json" 2>&1 | tee -a "$log" ;;
    torch)
      echo "\$ python3 bench/attention_vs_torch.py" | tee -a "$log"
      timeout 200 python3 bench/attention_vs_torch.py --json "$OUT/attention_torch.json" 2>&1 | tee -a "$log" ;;
  esac
done
date -u | tee -a "$log"
