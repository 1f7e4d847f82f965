#!/usr/bin/env bash
# Builds halcyon and runs every test: the normal build (warnings are errors) with CTest,
# then the unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer, the threaded
# request-loop example under ThreadSanitizer, then a short
# libFuzzer run (ASan+UBSan, clang-19) of the .npy reader and the contract parser.
#   scripts/test.sh            (what .ci/run calls)
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage's wall time, printed as it ends and summed up at the end (CI's budget is ~30 minutes
# on 2 cores: this says which stage to look at when it grows).
t_start=$(date +%s); t_last=$t_start; stage_times=()
stage_done() {
  local now; now=$(date +%s)
  stage_times+=("$(printf '%-34s %5d s' "$1" $((now - t_last)))")
  echo "== scripts/test.sh: $1 took $((now - t_last)) s (total $((now - t_start)) s)"
  t_last=$now
}
trap 'printf "== scripts/test.sh stage times:\n"; printf "   %s\n" "${stage_times[@]}"' EXIT

scripts/setup-debian.sh
stage_done "packages (setup-debian.sh)"
jobs=$(nproc)

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHALCYON_WERROR=ON
ninja -C build -j"$jobs"
stage_done "build"
(cd build && ctest --output-on-failure -j"$jobs")
stage_done "ctest"

# Sanitizers: the hal core, the CPU backend, the runtime, the conformance suite, and the Level
# Zero backend against its fake driver (tests/level_zero; pocl runs clean under LeakSanitizer).
# Without the GPU backends, as none of their kernels can run here: the CUDA one's PTX and cubins
# were a quarter of this build's time (the main build above checks them with ptxas).
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DHALCYON_WERROR=ON \
  -DHALCYON_SANITIZE=address,undefined -DHALCYON_ENABLE_AMD=OFF -DHALCYON_ENABLE_CUDA=OFF \
  -DHALCYON_TEST_SUBDIRS="conformance;moe;level_zero"
ninja -C build-asan -j"$jobs"
stage_done "build (ASan+UBSan)"
# allocator_may_return_null: a request for more memory than exists (the CLI tests ask for
# 4 EiB) must come back as NULL, which the code reports, not as an ASan abort.
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --output-on-failure -j"$jobs")
stage_done "ctest (ASan+UBSan)"

# ThreadSanitizer: examples/request_loop (threads with their own streams on one CPU device,
# one MoE layer's weights shared) and nothing else: the CPU backend, hal core and runtime
# under -fsanitize=thread, no tests, no GPU backends.
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHALCYON_WERROR=ON \
  -DHALCYON_SANITIZE=thread -DHALCYON_ENABLE_CUDA=OFF -DHALCYON_ENABLE_AMD=OFF \
  -DHALCYON_ENABLE_LEVEL_ZERO=OFF -DHALCYON_BUILD_TESTS=OFF
ninja -C build-tsan -j"$jobs" example_request_loop
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 build-tsan/examples/example_request_loop cpu:0 4 4
stage_done "ThreadSanitizer (build and run)"

# Fuzzing: each of the 5 parsers of untrusted input 45 s (HALCYON_FUZZ_SECONDS; 3 min 45 s of
# fuzzing, 2 min 15 s of wall time on 2 cores), from the seed corpus in tests/fuzz/corpus;
# everything the targets call is instrumented (fuzzer-no-link). Only the targets and what they
# link are built. tests/README.md: how to run longer.
CC=clang-19 CXX=clang++-19 cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHALCYON_WERROR=ON \
  -DHALCYON_SANITIZE=address,undefined,fuzzer-no-link -DHALCYON_ENABLE_CUDA=OFF -DHALCYON_ENABLE_AMD=OFF \
  -DHALCYON_ENABLE_LEVEL_ZERO=OFF -DHALCYON_TEST_SUBDIRS=fuzz
fuzz_names=(npy contract plugin_checks ptx_info hsaco)
ninja -C build-fuzz -j"$jobs" "${fuzz_names[@]/#/fuzz_}"
stage_done "build (fuzz targets)"
# The targets run $jobs at a time (each its own log, printed when it ends); any failure fails the run.
fuzz_one() {
  mkdir -p "build-fuzz/corpus/$1"  # new inputs go here; the seeds in the tree stay as they are
  "build-fuzz/tests/fuzz/fuzz_$1" -max_total_time="${HALCYON_FUZZ_SECONDS:-45}" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 "build-fuzz/corpus/$1" "tests/fuzz/corpus/$1" > "build-fuzz/fuzz_$1.log" 2>&1
}
fuzz_failed=()
for ((i = 0; i < ${#fuzz_names[@]}; i += jobs)); do
  batch=("${fuzz_names[@]:i:jobs}"); pids=()
  for name in "${batch[@]}"; do fuzz_one "$name" & pids+=($!); done
  for k in "${!batch[@]}"; do
    rc=0; wait "${pids[$k]}" || rc=$?
    echo "== fuzz_${batch[$k]}: exit $rc"; cat "build-fuzz/fuzz_${batch[$k]}.log"
    if [ "$rc" -ne 0 ]; then fuzz_failed+=("${batch[$k]}"); fi
  done
done
stage_done "fuzzing"
if [ ${#fuzz_failed[@]} -gt 0 ]; then
  echo "scripts/test.sh: fuzz targets failed: ${fuzz_failed[*]}" >&2
  exit 1
fi
