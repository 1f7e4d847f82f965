#!/usr/bin/env bash
# Expert parallelism across GPUs of one host (issue 20's targets, for nvidia-h200-x2; first run
# 2026-11-28, docs/expert_parallel.md). One rank per GPU:
#   1. ptx.ep: the dispatch/combine kernels in the world form on cuda:0 (a quick sanity check),
#      and the conformance suite's ep_dispatch/ep_combine cases on cuda:0;
#   2. halcyon_ep_ipc_test --ranks G --gpus G: peer-mapped writes between GPUs, then the EP layer
#      (NCCL all-to-all, peer writes, the dispatch/combine kernels over NVLink) against the
#      single-rank layer;
#   3. halcyon bench ep, one process per GPU started here (--rank/--rendezvous), DeepSeek-V3
#      shape per GPU: dispatch/combine GB/s over NCCL's grouped send/recv, a plain peer copy and
#      the ep_dispatch/ep_combine kernels on a 20-SM comm partition (chunks of 512 KiB), and
#      the layer over each (the kernels' beside the GEMMs on the other 112 SMs), whole and in 2
#      micro-batches against its grouped GEMMs alone (target 1.1x); once for each comm partition
#      size in EP_COMM_UNITS (default "20 32") and each build in EP_IMPLS (default: the
#      registry's); every figure also in $OUT/bench_ep.u<units>[.<impl>].json.
# NVLink multicast (NVLS) stays off, as the machine's notes ask: set here by the caller's
# script, never by halcyon's library code.
#   run(command="bash bench/ep_multigpu_run.sh", carry=[".devdeps"], kind="nvidia-h200-x2")
set -u -o pipefail
export NCCL_NVLS_ENABLE=0
UNITS=${EP_COMM_UNITS:-"20 32"}
# EP_IMPLS: the builds to bench, one after another for each partition size: "default" (the
# registry's choice) or an --impl value such as ep_dispatch=split4 (default "default").
IMPLS=${EP_IMPLS:-default}
B=build-gpu  # arguments: extra options of halcyon bench ep
. "$(dirname "$0")/gpu_run_env.sh"  # OUT, deps, LD_LIBRARY_PATH, HALCYON_CACHE_DIR, TREE
G=$(nvidia-smi -L | wc -l)
log=$OUT/ep_multigpu.txt
{ date -u; echo "tree: $TREE"; nvidia-smi --query-gpu=name,driver_version --format=csv; nvidia-smi topo -m; echo "GPUs: $G"; } | tee "$log"
if [ ! -x "$B/tests/cuda/halcyon_ep_ipc_test" ] || [ ! -x "$B/bin/halcyon" ]; then
  { cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$deps" -DHALCYON_WERROR=ON \
      -DHALCYON_ENABLE_CUDA=ON && timeout 330 ninja -C "$B" halcyon_cli halcyon_ep_ipc_test halcyon_ptx_ep_tests; } \
    > "$OUT/ep_build.log" 2>&1
  echo "build rc=$?" | tee -a "$log"
fi
echo "\$ halcyon_ptx_ep_tests" | tee -a "$log"
timeout 90 "$B/tests/cuda/halcyon_ptx_ep_tests" 2>&1 | tail -6 | tee -a "$log"
echo "\$ halcyon cts --device cuda:0 --filter 'numeric.ep_*'" | tee -a "$log"
timeout 60 "$B/bin/halcyon" cts --device cuda:0 --filter 'numeric.ep_*' --progress plain 2>&1 | tail -4 | tee -a "$log"
echo "\$ halcyon_ep_ipc_test --ranks $G --gpus $G" | tee -a "$log"
timeout 200 "$B/tests/cuda/halcyon_ep_ipc_test" --ranks "$G" --gpus "$G" 2>&1 | tail -30 | tee -a "$log"
for units in $UNITS; do
  for impl in $IMPLS; do
    slug=${impl//[=,]/-} tag=u$units extra=()
    name=bench-ep-$$-$units-$slug
    [ "$impl" != default ] && tag+=.$slug extra=(--impl "$impl")
    opts=(--tokens 4096 --iters 10 --comm-units "$units" --chunk-bytes 524288 --micro-batches 2 --json "$OUT/bench_ep.$tag.json")
    echo "\$ halcyon bench ep --rank r --ranks $G --rendezvous $name --device cuda:r ${opts[*]} ${extra[*]} $*" | tee -a "$log"
    for ((r = 0; r < G; r++)); do
      timeout 200 "$B/bin/halcyon" bench ep --rank $r --ranks "$G" --rendezvous "$name" --device cuda:$r "${opts[@]}" \
        "${extra[@]}" "$@" > "$OUT/bench_ep_rank$r.$tag.txt" 2>&1 &
    done
    wait
    cat "$OUT/bench_ep_rank0.$tag.txt" | tee -a "$log"
    [ "$G" -gt 1 ] && grep -E "^ +1 " "$OUT/bench_ep_rank1.$tag.txt" | tee -a "$log"
  done
done
date -u | tee -a "$log"
