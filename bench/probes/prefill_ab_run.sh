#!/usr/bin/env bash
# One device call: attention_prefill's GPU tests and CTS cases with the libraries in build-gpu,
# then bench/paired_vs_torch.py (prefill beside cuDNN, call against call) with the libraries in
# each directory named, in turn: an A/B of two builds, each as its ratio to cuDNN in the same
# process. Binaries built here and carried:
#   run(command="bash bench/probes/prefill_ab_run.sh build-a/lib build-gpu/lib",
#       carry=[".devdeps", ".commit", "build-gpu/bin/halcyon", "build-gpu/lib", "build-a/lib",
#              "build-gpu/tests/cuda/halcyon_ptx_attention_tests"])
# The other operators the same way: --only "mla prefill" (paired_vs_torch.py's --only) and
# --tests PATTERN (the GPU test cases run, doctest's -tc; default 'attention_prefill*'):
#   bash bench/probes/prefill_ab_run.sh --only "mla prefill" --tests '*' build-a/lib build-gpu/lib
set -u -o pipefail
only=prefill
tests='attention_prefill*'
while [ $# -gt 0 ]; do
  case $1 in
    --only) only=$2; shift 2 ;;
    --tests) tests=$2; shift 2 ;;
    *) break ;;
  esac
done
. "$(dirname "$0")/../gpu_run_env.sh"  # OUT, deps, LD_LIBRARY_PATH, HALCYON_CACHE_DIR, TREE
base=$LD_LIBRARY_PATH
log=$OUT/prefill_ab.txt
{ date -u; echo "tree $TREE"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee "$log"
export LD_LIBRARY_PATH=$PWD/build-gpu/lib:$base
timeout 240 build-gpu/tests/cuda/halcyon_ptx_attention_tests -s -tc="$tests" > "$OUT/tests.log" 2>&1
echo "tests rc=$?" | tee -a "$log"
grep -E "test cases|assertions|FAILED|ERROR" "$OUT/tests.log" | tail -4 | tee -a "$log"
grep -c -E "\((sm90.wsp|sm90.ws1|sm90.ws)\)" "$OUT/tests.log" | sed 's/^/sm90.ws* result lines: /' | tee -a "$log"
timeout 100 build-gpu/bin/halcyon cts --device cuda:0 --filter 'numeric.attention*' --progress plain > "$OUT/cts.txt" 2>&1
echo "cts rc=$?" | tee -a "$log"
tail -3 "$OUT/cts.txt" | tee -a "$log"
for lib in "$@"; do
  echo "# paired $only with $lib" | tee -a "$log"
  LD_LIBRARY_PATH=$PWD/$lib:$base HALCYON_LIBRARY=$PWD/$lib/libhalcyon_runtime.so timeout 200 \
    python3 bench/paired_vs_torch.py --only $only --json "$OUT/paired_$(echo "$lib" | tr / _).json" 2>&1 \
    | grep -v -i warn | tee -a "$log"
done
for op in $only; do
  timeout 120 build-gpu/bin/halcyon bench attention "$op" --device cuda:0 --json "$OUT/bench_$op.json" 2>&1 | tee -a "$log"
done
date -u | tee -a "$log"
