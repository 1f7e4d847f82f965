#!/usr/bin/env bash
# Builds halcyon and runs the main job on the best device this machine has (a GPU when one
# is there, else the CPU): the device report, then the demo workload.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-debian.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build -j"$(nproc)"
build/bin/halcyon info -v
if build/bin/halcyon --help | grep -q '^  demo '; then
  build/bin/halcyon demo
fi
