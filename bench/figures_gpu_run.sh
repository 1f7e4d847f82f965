#!/usr/bin/env bash
# The issue-15 (decode, MLA) and issue-19 (FP8 MoE at 4096 tokens) figures beside torch, in one call,
# from a tree built by scripts/gpu_check.sh (build-gpu). Logs and JSON go to $OUT.
#   run(command="bash bench/figures_gpu_run.sh", carry=[".devdeps"], kind="nvidia-h200")
set -u
. bench/gpu_run_env.sh
B=build-gpu; H=$B/bin/halcyon
LOG=$OUT/benches.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; } | tee $LOG
run() { echo "\$ $*" | tee -a $LOG; "$@" 2>&1 | grep -vE "UserWarning|fn = lambda" | tee -a $LOG; }
run timeout 150 $H bench attention decode mla --device cuda:0 --iters 20 --json $OUT/attn.json
run timeout 120 python3 bench/attention_vs_torch.py --only decode mla --json $OUT/attn_torch.json
run timeout 60 $H bench moe --device cuda:0 --tokens 4096 --dtype fp8 --json $OUT/moe_fp8_4096.json
run timeout 60 $H bench moe --device cuda:0 --tokens 4096 --dtype bf16 --json $OUT/moe_bf16_4096.json
run timeout 150 python3 bench/moe_vs_torch.py --dtype fp8 --tokens 4096 --json $OUT/moe_torch.json
date -u | tee -a $LOG
