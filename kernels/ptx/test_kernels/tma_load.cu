// tma_load(out, tmap, c0, c1, c2, rank, box_bytes): one block copies one box of a tensor map
// (hal_device_encode_tensor_map) into shared memory with the tensor memory accelerator
// (cp.async.bulk.tensor), waits on an mbarrier, and writes the box_bytes of shared memory, as
// the copy laid them out (swizzled or not), to out. The box starts at element coordinates
// (c0, c1, c2) of a rank-2 or rank-3 map; coordinates may be negative or past the end, and
// elements outside the tensor read as zero (or NaN, as the map says), but c0 times the element
// size must be a multiple of 16 bytes: the copy raises an illegal instruction (seen on an H200)
// otherwise, which kills the context; the caller checks it (the map does not know c0). The
// shared destination is aligned to 1024 bytes, the repeat of the 128-byte swizzle pattern.
//
// The map is a 64-byte-aligned 128-byte parameter at offset 64 (after the pointer), PTX
// `.param .align 64 .b8 tma_load_param_1[128]`: what the argument blob must reproduce.
// No CUDA runtime calls: compiled with `nvcc -ptx` and loaded through the driver.
struct alignas(64) TensorMapParam {
  unsigned long long opaque[16];
};

extern "C" __global__ void tma_load(unsigned char* __restrict__ out, const __grid_constant__ TensorMapParam tmap,
                                    int c0, int c1, int c2, unsigned rank, unsigned box_bytes) {
  extern __shared__ unsigned char dynamic_smem[];  // box_bytes + 1024
  __shared__ unsigned long long barrier;
  const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(dynamic_smem));
  const unsigned tile_addr = (base + 1023u) & ~1023u;
  unsigned char* tile = dynamic_smem + (tile_addr - base);
  const unsigned bar_addr = static_cast<unsigned>(__cvta_generic_to_shared(&barrier));

  // A pattern that the copy must overwrite everywhere, zeros of out-of-bounds elements included.
  for (unsigned i = threadIdx.x; i < box_bytes; i += blockDim.x) tile[i] = 0xA5;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar_addr));
    asm volatile("fence.mbarrier_init.release.cluster;");
  }
  // The generic-proxy writes above, before the async proxy's writes of the copy.
  asm volatile("fence.proxy.async.shared::cta;");
  __syncthreads();

  if (threadIdx.x == 0) {
    const unsigned long long map = reinterpret_cast<unsigned long long>(&tmap);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar_addr), "r"(box_bytes) : "memory");
    if (rank == 2) {
      asm volatile(
          "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
          ::"r"(tile_addr), "l"(map), "r"(c0), "r"(c1), "r"(bar_addr)
          : "memory");
    } else {
      asm volatile(
          "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
          ::"r"(tile_addr), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(bar_addr)
          : "memory");
    }
  }
  // Phase 0 completes when the one arrival and box_bytes of transactions are in.
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(bar_addr)
      : "memory");
  for (unsigned i = threadIdx.x; i < box_bytes; i += blockDim.x) out[i] = tile[i];
}
