#!/usr/bin/env bash
# Builds halcyon and runs every test: the normal build (warnings are errors) with CTest,
# then the unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer, the threaded
# request-loop example under ThreadSanitizer, then a short
# libFuzzer run (ASan+UBSan, clang-19) of the .npy reader and the contract parser.
#   scripts/test.sh            (what .ci/run calls)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-debian.sh
jobs=$(nproc)

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHALCYON_WERROR=ON
ninja -C build -j"$jobs"
(cd build && ctest --output-on-failure -j"$jobs")

# Sanitizers: the hal core, the CPU backend, the runtime, the conformance suite, and the Level
# Zero backend against its fake driver (tests/level_zero; pocl runs clean under LeakSanitizer).
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DHALCYON_WERROR=ON \
  -DHALCYON_SANITIZE=address,undefined -DHALCYON_ENABLE_AMD=OFF -DHALCYON_TEST_SUBDIRS="conformance;moe;level_zero"
ninja -C build-asan -j"$jobs"
# allocator_may_return_null: a request for more memory than exists (the CLI tests ask for
# 4 EiB) must come back as NULL, which the code reports, not as an ASan abort.
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --output-on-failure -j"$jobs")

# ThreadSanitizer: examples/request_loop (threads with their own streams on one CPU device,
# one MoE layer's weights shared) and nothing else: the CPU backend, hal core and runtime
# under -fsanitize=thread, no tests, no GPU backends.
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHALCYON_WERROR=ON \
  -DHALCYON_SANITIZE=thread -DHALCYON_ENABLE_CUDA=OFF -DHALCYON_ENABLE_AMD=OFF \
  -DHALCYON_ENABLE_LEVEL_ZERO=OFF -DHALCYON_BUILD_TESTS=OFF
ninja -C build-tsan -j"$jobs" example_request_loop
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 build-tsan/examples/example_request_loop cpu:0 4 4

# Fuzzing: each of the 5 parsers of untrusted input 45 s (HALCYON_FUZZ_SECONDS; 3 min 45 s in
# all), from the seed corpus in tests/fuzz/corpus; everything the targets call is instrumented
# (fuzzer-no-link). Only the targets and what they link are built. tests/README.md: how to run longer.
CC=clang-19 CXX=clang++-19 cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHALCYON_WERROR=ON \
  -DHALCYON_SANITIZE=address,undefined,fuzzer-no-link -DHALCYON_ENABLE_CUDA=OFF -DHALCYON_ENABLE_AMD=OFF \
  -DHALCYON_ENABLE_LEVEL_ZERO=OFF -DHALCYON_TEST_SUBDIRS=fuzz
fuzz_names=(npy contract plugin_checks ptx_info hsaco)
ninja -C build-fuzz -j"$jobs" "${fuzz_names[@]/#/fuzz_}"
for name in "${fuzz_names[@]}"; do
  mkdir -p "build-fuzz/corpus/$name"  # new inputs go here; the seeds in the tree stay as they are
  "build-fuzz/tests/fuzz/fuzz_$name" -max_total_time="${HALCYON_FUZZ_SECONDS:-45}" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 "build-fuzz/corpus/$name" "tests/fuzz/corpus/$name"
done
