#!/usr/bin/env bash
# Is a kernel's time set once per process? The FP8 tall SwiGLU GEMM at 4096 tokens took ~2.9 or
# ~3.25 ms "from one process to the next" (docs/PERFORMANCE.md, 2026-11-29 second session). This
# runs the same `halcyon bench moe` N times as separate processes while nvidia-smi samples the
# clocks, power and throttle reasons every 100 ms, so that each process's stage times can be set
# beside the clocks it ran at. One device call, binaries built here and carried:
#   run(command="bash bench/probes/process_spread_run.sh build-gpu 8 4096 fp8",
#       carry=[".devdeps", ".commit", "build-gpu/bin/halcyon", "build-gpu/lib"])
#   bash bench/probes/process_spread_run.sh [build dir] [N] [tokens] [dtype] [extra bench args...]
set -u -o pipefail
B=${1:-build-gpu}; N=${2:-8}; T=${3:-4096}; DT=${4:-fp8}
shift 4 2>/dev/null || shift $#
. "$(dirname "$0")/../gpu_run_env.sh"  # OUT, deps, LD_LIBRARY_PATH, HALCYON_CACHE_DIR, TREE
export LD_LIBRARY_PATH=$PWD/$B/lib:$LD_LIBRARY_PATH
log=$OUT/spread.txt
{ date -u; echo "tree $TREE"; nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv; } | tee "$log"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv,noheader -lms 100 > "$OUT/smi.csv" 2>&1 &
smi=$!
for i in $(seq 1 "$N"); do
  echo "# process $i start $(date -u +%H:%M:%S.%N)" | tee -a "$log"
  timeout 120 "$B/bin/halcyon" bench moe --device cuda:0 --tokens "$T" --dtype "$DT" "$@" \
    --json /tmp/run.json > /tmp/run.txt 2>&1
  echo "rc=$? end $(date -u +%H:%M:%S.%N)" | tee -a "$log"
  grep -E "grouped_gemm|experts|layer" /tmp/run.txt | tee -a "$log"
  { echo "# process $i"; cat /tmp/run.txt; } >> "$OUT/runs.txt"
  { cat /tmp/run.json; echo "#"; } >> "$OUT/runs.json"  # one JSON object a process, '#' between
done
kill "$smi" 2>/dev/null
date -u | tee -a "$log"
