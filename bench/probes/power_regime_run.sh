#!/usr/bin/env bash
# How far the GPU's power cap moves the benches' figures. On the H200 the FP8 SwiGLU GEMM at
# 4096 tokens runs ~2.8 ms for its first timed runs and ~3.1-3.3 ms once the SM clock drops under
# the software power cap (nvidia-smi throttle reason 0x4); a median of 20 runs lands on either
# side (the "bimodal" spread of earlier sessions). This samples clocks, power and throttle reasons
# every 20 ms while it runs the benches with many timed runs, each printing every run's time
# ("us_each" in the JSON), halcyon's and torch's (triton do_bench) in the same call:
#   run(command="bash bench/probes/power_regime_run.sh build-gpu moe prefill torch-prefill",
#       carry=[".devdeps", ".commit", "build-gpu/bin/halcyon", "build-gpu/lib"])
#   bash bench/probes/power_regime_run.sh [build dir] [moe|moe-bf16|preheat|prefill|torch-prefill|paired|torch-moe|tests-attn|cts ...]
set -u -o pipefail
B=${1:-build-gpu}
shift || true
what=${*:-moe prefill torch-prefill}
. "$(dirname "$0")/../gpu_run_env.sh"  # OUT, deps, LD_LIBRARY_PATH, HALCYON_CACHE_DIR, TREE
export LD_LIBRARY_PATH=$PWD/$B/lib:$LD_LIBRARY_PATH
H=$B/bin/halcyon
log=$OUT/power.txt
{ date -u; echo "tree $TREE"; nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv; } | tee "$log"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv,noheader -lms 20 > "$OUT/smi.csv" 2>&1 &
smi=$!
mark() { echo "# $1 $(date -u +%H:%M:%S.%N)" | tee -a "$log"; }
for w in $what; do
  mark "start $w"
  case $w in
    moe)  # 200 timed runs a stage: the power state settles inside each stage's series
      timeout 200 "$H" bench moe --device cuda:0 --tokens 4096 --dtype fp8 --iters 200 --json "$OUT/moe_fp8.json" 2>&1 \
        | grep -E "grouped_gemm|experts|layer|copy rate" | tee -a "$log" ;;
    preheat)  # the benches' --preheat-ms: each stage or call after 1 s of runs (the capped clock)
      timeout 200 "$H" bench moe --device cuda:0 --tokens 4096 --dtype fp8 --preheat-ms 1000 --json "$OUT/moe_fp8_preheat.json" 2>&1 \
        | grep -E "grouped_gemm|experts|layer|note" | tee -a "$log"
      timeout 200 "$H" bench attention prefill --device cuda:0 --preheat-ms 1000 --json "$OUT/prefill_preheat.json" 2>&1 \
        | grep -E "sm90.ws \(|note" | tee -a "$log" ;;
    moe-bf16)
      timeout 200 "$H" bench moe --device cuda:0 --tokens 4096 --iters 100 --json "$OUT/moe_bf16.json" 2>&1 \
        | grep -E "grouped_gemm|experts|layer|copy rate" | tee -a "$log" ;;
    prefill)  # the default 20 runs, then 300 (about 0.3 s of each shape)
      for n in 20 300; do
        timeout 200 "$H" bench attention prefill --device cuda:0 --iters $n --json "$OUT/prefill_$n.json" 2>&1 \
          | grep -E "prefill|iterations" | tee -a "$log"
        mark "prefill $n done"
      done ;;
    torch-prefill)
      timeout 200 python3 bench/attention_vs_torch.py --only prefill --json "$OUT/torch_prefill.json" 2>&1 | tee -a "$log" ;;
    paired)  # halcyon and the peer call against call in one process (bench/paired_vs_torch.py)
      HALCYON_LIBRARY=$PWD/$B/lib/libhalcyon_runtime.so timeout 400 python3 bench/paired_vs_torch.py \
        --json "$OUT/paired.json" 2>&1 | tee -a "$log" ;;
    torch-moe)  # the torch side at 4096 tokens, every timed run of its layers in the JSON
      timeout 200 python3 bench/moe_vs_torch.py --tokens 4096 --dtype fp8 --json "$OUT/torch_moe.json" 2>&1 | tee -a "$log" ;;
    tests-attn)  # the attention GPU test, every case and every implementation by name
      timeout 300 "$B/tests/cuda/halcyon_ptx_attention_tests" > "$OUT/attn_tests.log" 2>&1
      echo "rc=$?" | tee -a "$log"
      grep -E "test cases|assertions|FAILED|ERROR" "$OUT/attn_tests.log" | tail -4 | tee -a "$log" ;;
    cts)  # the whole conformance suite on the GPU
      timeout 300 "$H" cts --device cuda:0 --progress plain > "$OUT/cts.txt" 2>&1
      echo "rc=$?" | tee -a "$log"
      tail -4 "$OUT/cts.txt" | tee -a "$log" ;;
  esac
  mark "end $w"
done
kill "$smi" 2>/dev/null
date -u | tee -a "$log"
