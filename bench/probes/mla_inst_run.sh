#!/usr/bin/env bash
# One device call: where the MLA decode kernel's consumers wait. bench/probes/mla_inst_source.py
# writes the instrumented kernel; its library is built here and carried as build-inst/lib (two
# runtime libraries are over the 64 MiB a call carries, so builds are compared by name in one
# library instead: `halcyon bench attention mla` times every implementation):
#   python3 bench/probes/mla_inst_source.py kernels/ptx/attention/attention_mla_sm90_ws.cu
#   ninja -C build-gpu halcyon_cli && cp -a build-gpu/lib build-inst/lib && git checkout kernels/
#   run(command="bash bench/probes/mla_inst_run.sh",
#       carry=[".devdeps", ".commit", "build-gpu/bin/halcyon", "build-inst/lib"])
# Prints, for four CTAs of each launch, each consumer warpgroup's cycles in each wait (MLAINST
# lines; the wgmma waits read ~4 cycles each: the clock is read before the wait takes effect, so
# only the mbarrier waits are meaningful) and the producer's waits for free stages.
set -u -o pipefail
. "$(dirname "$0")/../gpu_run_env.sh"  # OUT, deps, LD_LIBRARY_PATH, HALCYON_CACHE_DIR, TREE
log=$OUT/mla_inst.txt
{ date -u; echo "tree $TREE"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee "$log"
LD_LIBRARY_PATH=$PWD/build-inst/lib:$LD_LIBRARY_PATH timeout 120 build-gpu/bin/halcyon bench attention mla \
  --device cuda:0 --iters 2 > "$OUT/inst_raw.txt" 2>&1
echo "inst rc=$?" | tee -a "$log"
grep -vE "MLAINST|MLAPAIR" "$OUT/inst_raw.txt" | tee -a "$log"
# The launches print in order (selected implementation first); the TMA builds' blocks start
# with a producer line.
grep -E "MLAINST|MLAPAIR" "$OUT/inst_raw.txt" | head -60 | tee -a "$log"
gzip "$OUT/inst_raw.txt"
date -u | tee -a "$log"
