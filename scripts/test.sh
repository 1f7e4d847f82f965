#!/usr/bin/env bash
# Builds halcyon and runs every test: the normal build (warnings are errors) with CTest,
# then the unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer.
#   scripts/test.sh            (what .ci/run calls)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-debian.sh
jobs=$(nproc)

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHALCYON_WERROR=ON
ninja -C build -j"$jobs"
(cd build && ctest --output-on-failure -j"$jobs")

# Sanitizers: the hal core, the CPU backend, the runtime and the conformance suite.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DHALCYON_WERROR=ON \
  -DHALCYON_SANITIZE=address,undefined -DHALCYON_ENABLE_AMD=OFF -DHALCYON_TEST_SUBDIRS="conformance;moe"
ninja -C build-asan -j"$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j"$jobs")
