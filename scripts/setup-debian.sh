#!/usr/bin/env bash
# Installs everything halcyon's build needs on a fresh Debian 12 machine (apt only).
# The CUDA Toolkit is not in Debian 12's main archive: when /usr/local/cuda (or nvcc on the
# PATH) exists, the CUDA backend and the PTX checks are built; otherwise they are skipped
# and `halcyon info -v` says why. libclang-rt-19-dev is clang-19's libFuzzer and sanitizer
# runtime (scripts/test.sh's fuzz run).
set -euo pipefail
# python3: tests/plugins loads libhalcyon through ctypes; binutils (readelf, nm): the ELF checks;
# libclang-rt-19-dev: libFuzzer for tests/fuzz; clang-15, llvm-spirv-15, spirv-tools: the SPIR-V
# kernels (kernels/spirv); pocl-opencl-icd, ocl-icd-opencl-dev, opencl-c-headers: the fake Level
# Zero driver that runs them on the CPU (tests/level_zero); libdlpack-dev: DLPack's header
# (halcyon/dlpack.h); python3-numpy: the Python module's CPU test (python/).
pkgs=(cmake ninja-build g++ pkg-config libfmt-dev doctest-dev python3 binutils
      clang-19 lld-19 llvm-19-dev libclang-rt-19-dev libamdhip64-dev libze-dev
      clang-15 llvm-spirv-15 spirv-tools pocl-opencl-icd ocl-icd-opencl-dev opencl-c-headers
      libdlpack-dev python3-numpy)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all build packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
