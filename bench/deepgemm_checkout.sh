#!/usr/bin/env bash
# Assembles the DeepGEMM checkout that `paired_vs_torch.py --only deepgemm` imports, in
# .cache/deepgemm (git-ignored: DeepGEMM is the peer measured, not part of halcyon, and none of
# its code enters the tree). DeepGEMM at 8dfa329 (2025-05-27: its Python JIT form, which needs
# only torch, cuda-bindings and nvcc where it runs; later versions build a C++ extension) with
# CUTLASS's include/cute and include/cutlass at eefa171 (DeepGEMM's submodule there). Where nvcc
# is at hand, only the CUTLASS headers its kernel includes are kept (~50 files, 5 MB instead of
# 25, so that the checkout fits a device call's carry beside the library).
#   bash bench/deepgemm_checkout.sh [DeepGEMM git dir or URL] [CUTLASS git dir or URL]
# then carry .cache/deepgemm and run `bash bench/fp8_gpu_run.sh build-gpu deepgemm`.
set -eu -o pipefail
dg=${1:-https://github.com/deepseek-ai/DeepGEMM.git}
cl=${2:-https://github.com/NVIDIA/cutlass.git}
DG_COMMIT=8dfa3298274bfe6b242f6f8a3e6f3eff2707dd9f
CUTLASS_COMMIT=eefa171318b79cbe2e78514d4cce5cd0fe919d0c
dest=$PWD/.cache/deepgemm
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fetch() {  # fetch REPO DIR: a git directory as is, a URL cloned without a work tree into $tmp/DIR
  if [ -d "$1" ]; then echo "$1"; else git clone -q --bare --filter=blob:none "$1" "$tmp/$2" && echo "$tmp/$2"; fi
}
dgit=$(fetch "$dg" dg)
cgit=$(fetch "$cl" cutlass)
rm -rf "$dest" && mkdir -p "$dest"
git -C "$dgit" archive $DG_COMMIT deep_gemm LICENSE | tar x -C "$dest"
git -C "$cgit" archive $CUTLASS_COMMIT include/cute include/cutlass | tar x -C "$tmp"
rm -rf "$dest/deep_gemm/include/cute" "$dest/deep_gemm/include/cutlass"  # the symlinks setup.py would make
mv "$tmp/include/cute" "$tmp/include/cutlass" "$dest/deep_gemm/include/"
nvcc=${CUDA_HOME:-/usr/local/cuda}/bin/nvcc
if [ -x "$nvcc" ]; then
  # One instantiation of the kernel the grouped GEMMs use; what it includes is what every one does.
  cat > "$tmp/k.cu" <<'EOF'
#include <cuda.h>
#include <string>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <deep_gemm/fp8_gemm.cuh>
static void instantiate() {
  auto p = reinterpret_cast<void*>(&deep_gemm::fp8_gemm_kernel<4096, 7168, 128, 128, 128, 0, 128, 256, 5, 128, 128, 1,
                                                                false, deep_gemm::GemmType::GroupedMasked>);
  (void)p;
}
EOF
  inc=$dest/deep_gemm/include
  "$nvcc" -M "$tmp/k.cu" -std=c++20 -I"$inc" -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
    --expt-extended-lambda | tr ' \\' '\n\n' | grep "^$inc/cut" | sed "s|^$inc/||" | sort -u > "$tmp/keep"
  (cd "$inc" && find cute cutlass -type f | sort | comm -23 - "$tmp/keep" | xargs rm -f && find cute cutlass -type d -empty -delete)
  echo "kept $(wc -l < "$tmp/keep") CUTLASS headers"
fi
du -sh "$dest"
