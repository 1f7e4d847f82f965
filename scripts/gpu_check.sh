#!/usr/bin/env bash
# The whole GPU check in one call on the lent GPU machine (docs/backends/cuda.md):
# configure + build (warnings as errors), every CTest test (unit, CUDA GPU tests, CUDA API
# tests, conformance), `halcyon info -v`, `halcyon cts --device cuda:0` when that command
# exists, the CUDA launch/copy benchmark, and `halcyon bench moe-sizes` (alternating MoE batch
# sizes without device-wide synchronization). Logs go to $OUT (or ./gpu-check-out).
#
# GPU_CHECK_ASAN=1 adds the CUDA tests under AddressSanitizer + UBSan.
#
# Modes (one argument; default: all of the above):
#   scripts/gpu_check.sh --sanitize [TOOL...]
#                                     build, then compute-sanitizer (TOOL: memcheck racecheck, the
#                                     default both) over every PTX operator's GPU test (CTest ptx.*
#                                     and cuda.*; SANITIZE_TESTS=REGEX narrows), each test at most
#                                     SANITIZE_TEST_TIMEOUT s (default 240; a timeout fails the
#                                     step, marked "exit 124"): $OUT/<tool>.log, $OUT/summary.txt.
#                                     Under 10 minutes a call: one tool per call, the build kept.
#   scripts/gpu_check.sh --python     build, then python/tests/test_torch_gpu.py (zero copy
#                                     from/to torch CUDA tensors, results against torch)
# Needs the fmt/doctest folder made here by `bash /work/shared/device/pack-deps.sh`
# (.devdeps, carried to the machine) with DLPack's header added to it, which pack-deps.sh does
# not fetch: `apt-get download libdlpack-dev && dpkg -x libdlpack-dev_*.deb .devdeps`.
# Exit status: 0 only if every step passed.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${OUT:-$root/gpu-check-out}
mkdir -p "$out"
deps=$root/.devdeps/usr
[ -d "$deps" ] || { echo "gpu_check: $deps missing: run pack-deps.sh first and carry .devdeps" >&2; exit 2; }
[ -f "$deps/include/dlpack/dlpack.h" ] || {
  echo "gpu_check: $deps/include/dlpack/dlpack.h missing: apt-get download libdlpack-dev && dpkg -x libdlpack-dev_*.deb .devdeps" >&2
  exit 2
}
export LD_LIBRARY_PATH=$deps/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# A fresh PTX JIT cache for this run's halcyon commands, handed over as a backend option (the
# libraries read no environment; hal.h lists the options). Test programs run without one.
cache_opt="cuda.cache_dir=$(mktemp -d)/ptx"
build=${BUILD_DIR:-build-gpu}
summary=()
failed=0

step() {  # step NAME COMMAND...: runs it, logs to $out/NAME.log, keeps a summary line
  local name=$1
  shift
  echo "=== $name: $*"
  local t0=$SECONDS
  "$@" >"$out/$name.log" 2>&1
  local rc=$?
  tail -n "${TAIL_LINES:-25}" "$out/$name.log"
  summary+=("$(printf '%-10s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - t0))" "$*")")
  [ "$rc" -eq 0 ] || failed=1
  return "$rc"
}

mode=${1:-all}
case $mode in all|--sanitize|--python) ;; *) echo "usage: scripts/gpu_check.sh [--sanitize [memcheck|racecheck]...|--python]" >&2; exit 2 ;; esac
[ $# -gt 0 ] && shift
tools=${*:-memcheck racecheck}

# The tree: a device copy is a `git archive` with a .commit file and no history of its own (git
# there would name whatever checkout encloses it); only a real checkout's own HEAD counts.
if [ -f .commit ]; then tree=$(cat .commit)
elif [ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$PWD" ]; then tree=$(git rev-parse --short HEAD)
else tree="unknown (not a checkout, no .commit file)"; fi
machine="host: $(hostname)  date: $(date -u +%FT%TZ)  tree: $tree
gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'nvidia-smi not available')"
echo "$machine"

# Keep going (-k 0): one broken target must not hide the rest.
step build bash -c "cmake -S . -B '$build' -G Ninja -DCMAKE_PREFIX_PATH='$deps' -DHALCYON_WERROR=ON \
  -DHALCYON_ENABLE_CUDA=ON && ninja -C '$build' -k 0 -j$(nproc)"
[ -x "$build/bin/halcyon" ] || { printf '%s\n' "${summary[@]}"; exit 1; }

# compute-sanitizer over one tool: every ptx.*/cuda.* CTest test that runs a program (not a
# cmake script), each under `compute-sanitizer --tool TOOL --error-exitcode 99`, all in one log.
# A test fails the step if the sanitizer reports an error (exit 99) or the test itself fails.
# --report-api-errors no: CUDA calls that fail by design are not memory errors: the CUDA
# backend learns a kernel's parameter count by asking cuFuncGetParamInfo one past the last
# (INVALID_VALUE ends the walk), and the tests check refusals (cuPointerGetAttribute on memory
# the driver does not know). The backend checks every CUresult itself; memory errors, races
# and faults are still reported.
# racecheck tracks every shared-memory access and runs ~100x slower: the DeepSeek-size cases
# (the same kernels as the contract and tile-crossing cases, at sizes it cannot finish in the
# time limit) are left to memcheck, which runs everything.
declare -A extra=([racecheck]="-tce=*DeepSeek*")
sanitize() {
  local tool=$1 cs
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  [ -x "$cs" ] || { echo "compute-sanitizer not found"; return 2; }
  ctest --test-dir "$build" --show-only=json-v1 -R "${SANITIZE_TESTS:-^(ptx|cuda)[.]}" >"$out/.tests.json" || return 2
  local rc=0 name
  while IFS=$'\t' read -r name dir cmd; do
    eval "set -- $cmd"
    case $(basename "$1") in cmake|ctest) continue ;; esac
    echo "--- $tool: $name: $*"
    (cd "$dir" && timeout "${SANITIZE_TEST_TIMEOUT:-240}" "$cs" --tool "$tool" --error-exitcode 99 \
      --report-api-errors no --print-limit 20 "$@" ${extra[$tool]:-})
    local r=$?
    echo "--- $tool: $name: exit $r"
    [ "$r" -eq 0 ] || rc=1
  done < <(python3 -c '
import json, shlex, sys
for t in json.load(open(sys.argv[1]))["tests"]:
    d = next((p["value"] for p in t.get("properties", []) if p["name"] == "WORKING_DIRECTORY"), ".")
    print(t["name"], d, " ".join(shlex.quote(c) for c in t["command"]), sep="\t")' "$out/.tests.json")
  rm -f "$out/.tests.json"
  return "$rc"
}
if [ "$mode" = --sanitize ]; then
  for tool in $tools; do
    case $tool in memcheck|racecheck|synccheck|initcheck) ;; *) echo "gpu_check: unknown tool $tool" >&2; exit 2 ;; esac
    TAIL_LINES=30 step "$tool" sanitize "$tool"
  done
  echo "=== summary"
  { echo "$machine"; printf '%s\n' "${summary[@]}"; } | tee "$out/summary.txt"
  exit "$failed"
fi
if [ "$mode" = --python ]; then
  TAIL_LINES=40 step python env HALCYON_LIBRARY="$root/$build/lib/libhalcyon_runtime.so" \
    python3 python/tests/test_torch_gpu.py
  echo "=== summary"
  { echo "$machine"; printf '%s\n' "${summary[@]}"; } | tee "$out/summary.txt"
  exit "$failed"
fi

# The device as halcyon sees it, then the same with the driver hidden: cuda must turn
# unavailable with the reason while the CPU backend carries on.
step info bash -c "'$build/bin/halcyon' --backend-option '$cache_opt' info -v &&
  echo '--- with --backend-option cuda.library=/nonexistent/libcuda.so.1:' &&
  '$build/bin/halcyon' --backend-option cuda.library=/nonexistent/libcuda.so.1 info -v"
TAIL_LINES=40 step ctest ctest --test-dir "$build" --output-on-failure --timeout 300 -j4
cp "$build/Testing/Temporary/LastTest.log" "$out/ctest_full.log" 2>/dev/null  # every test's output
if "$build/bin/halcyon" cts --help >/dev/null 2>&1; then
  step cts "$build/bin/halcyon" --backend-option "$cache_opt" cts --device cuda:0
else
  summary+=("cts        (no 'halcyon cts' command in this build: not run)")
fi
if [ -x "$build/bin/halcyon_bench_cuda" ]; then
  # Three runs: the spread between runs is part of the result.
  TAIL_LINES=20 step bench bash -c "for i in 1 2 3; do echo \"--- run \$i\"; '$build/bin/halcyon_bench_cuda' || exit 1; done"
fi
# One MoE layer with token counts 7, 4096, 1, 300 in turn: no call, and no workspace change,
# may synchronize the device (exit 3 otherwise; docs/backends/cuda.md, "Freeing memory").
TAIL_LINES=30 step moe_sizes "$build/bin/halcyon" --backend-option "$cache_opt" bench moe-sizes --device cuda:0 --sizes 7,4096,1,300 --rounds 5
# GPU_CHECK_ASAN=1: the CUDA tests again under AddressSanitizer + UBSan, with the real driver
# (protect_shadow_gap=0: the driver maps memory where ASan's shadow gap would be).
if [ "${GPU_CHECK_ASAN:-0}" = 1 ]; then
  step asan bash -c "cmake -S . -B '$build-asan' -G Ninja -DCMAKE_PREFIX_PATH='$deps' -DCMAKE_BUILD_TYPE=Debug \
    -DHALCYON_WERROR=ON -DHALCYON_SANITIZE=address,undefined -DHALCYON_ENABLE_CUDA=ON >/dev/null &&
    ninja -C '$build-asan' -j$(nproc) halcyon_backend_cuda halcyon_cuda_unit_tests halcyon_cuda_gpu_tests halcyon_cuda_api_tests &&
    cd '$build-asan' && ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest -R '^cuda[.]' --output-on-failure"
fi
echo "=== summary"
{ echo "$machine"; printf '%s\n' "${summary[@]}"; } | tee "$out/summary.txt"
exit "$failed"
