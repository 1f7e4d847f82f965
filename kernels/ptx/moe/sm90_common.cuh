// Hopper (sm_90a) device helpers shared by the wgmma GEMM kernels (gemm_sm90.cu, gemm_sm90_fp8.cu,
// gemm_sm90_splitk.cu; bench/probes/wgmma_fp8_rate.cu): shared-memory matrix descriptors, wgmma
// wrappers (bf16, and e4m3 m64nNk32 at the end), mbarriers and
// tensor-memory-accelerator copies. Device code only (compiled with `nvcc -ptx`).
#pragma once

#include <stdint.h>

namespace hc {
namespace {

// A tensor map from hal_device_encode_tensor_map, taken by value as a 64-byte-aligned
// __grid_constant__ kernel parameter.
struct alignas(64) TensorMap {
  unsigned long long q[16];
};

// wgmma shared-memory matrix descriptor: start address, leading and stride byte offsets
// (all >> 4), 128-byte swizzle (layout type 1 in bits 62-63).
__device__ __forceinline__ uint64_t make_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
  uint64_t d = 0;
  d |= uint64_t((saddr & 0x3FFFF) >> 4);
  d |= uint64_t((lbo >> 4) & 0x3FFF) << 16;
  d |= uint64_t((sbo >> 4) & 0x3FFF) << 32;
  d |= uint64_t(1) << 62;
  return d;
}

__device__ __forceinline__ void wgmma_m64n256k16(float* d, uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "%128, %129, p, 1, 1, 0, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// The same with A from registers (4 bf16x2 a thread, mma.sync's A fragment layout for the
// warp's 16 rows), B transposed (MN-major), accumulating (attention_mla_sm90_ws.cu: O += P V).
__device__ __forceinline__ void wgmma_m64n256k16_rs(float* d, const uint32_t* a, uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}
// D (=|+=) A B^T for a 64 x 64 tile, both operands K-major in shared memory (S = Q K^T in the
// attention kernels).
__device__ __forceinline__ void wgmma_m64n64k16_ss(float* d, uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving reads or writes of N accumulators across wgmma boundaries.
template <int N>
__device__ __forceinline__ void fence_n(float* d) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// The spin on one phase of a barrier, with the wait's memory semantics SEM ("": the default,
// acquire at CTA scope). One text for every wait below.
#define HC_MBAR_WAIT_ASM(SEM)                                               \
  "{\n.reg .pred p;\nWAIT_%=:\n"                                            \
  "mbarrier.try_wait.parity" SEM ".shared::cta.b64 p, [%0], %1;\n" \
  "@!p bra WAIT_%=;\n}\n"
// Returns once the phase of `bar` with this parity has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(HC_MBAR_WAIT_ASM("") ::"r"(bar), "r"(parity) : "memory");
}
// Whether that phase has completed, without waiting.
__device__ __forceinline__ bool mbar_test(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}
__device__ __forceinline__ void tma_2d(uint32_t dst, const TensorMap* map, int c0, int c1, uint32_t bar,
                                       uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(bar), "l"(policy)
      : "memory");
}
// tma_2d into the same shared-memory offset of every CTA of the cluster in `mask` (bit r: rank
// r), each signalling its own barrier at `bar`'s offset.
__device__ __forceinline__ void tma_2d_multicast(uint32_t dst, const TensorMap* map, int c0, int c1, uint32_t bar,
                                                 uint16_t mask, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      ".L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5, %6;\n" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(bar), "h"(mask), "l"(policy)
      : "memory");
}
// ---- clusters ----
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// Every thread of every CTA of the cluster: shared-memory writes before it (release) are
// visible to reads after it (acquire) in any CTA of the cluster. Threads that have exited
// count as arrived, so a CTA that returned early could never hang its peers. (Not `.aligned`:
// callers may come from divergent paths.)
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
// The address of this CTA's shared byte `saddr` in CTA `rank` of the cluster.
__device__ __forceinline__ uint32_t cluster_map(uint32_t saddr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(saddr), "r"(rank));
  return r;
}
// One arrival on the barrier at `bar`'s offset in the cluster's CTA `rank`, with the default
// semantics (release at CTA scope), as CUTLASS's ClusterBarrier::arrive(cta_id): with
// `.release.cluster`, a 2-CTA ring whose slots both CTAs release took 1.5x as long a k-step
// (1764 against 1186 cycles; bench/probes/cluster_multicast_rate.cu, H200, 2026-11-30).
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t rank) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_map(bar, rank)) : "memory");
}
// For hand-offs once a tile (not a k-step's ring), where the peer reads data written with plain
// stores: an arrival that releases this thread's prior accesses at cluster scope, and a wait
// that acquires at cluster scope, plus a 4-byte store into the peer's shared memory.
__device__ __forceinline__ void mbar_arrive_release_cluster(uint32_t bar, uint32_t rank) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_map(bar, rank)) : "memory");
}
__device__ __forceinline__ void mbar_wait_acquire_cluster(uint32_t bar, uint32_t parity) {
  asm volatile(HC_MBAR_WAIT_ASM(".acquire.cluster") ::"r"(bar), "r"(parity) : "memory");
}
__device__ __forceinline__ void st_cluster_f32(uint32_t saddr, uint32_t rank, float v) {
  asm volatile("st.shared::cluster.f32 [%0], %1;\n" ::"r"(cluster_map(saddr, rank)), "f"(v) : "memory");
}
__device__ __forceinline__ void tma_3d(uint32_t dst, const TensorMap* map, int c0, int c1, int c2, uint32_t bar,
                                       uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(bar), "l"(policy)
      : "memory");
}
__device__ __forceinline__ void tma_4d(uint32_t dst, const TensorMap* map, int c0, int c1, int c2, int c3,
                                       uint32_t bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3, %4, %5}], [%6], %7;\n" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar), "l"(policy)
      : "memory");
}

}  // namespace
}  // namespace hc

// Operand lists of the wgmma wrappers with NT/2 fp32 accumulators d[0..]: HC_ACC_k names the
// first 8k asm operands, HC_OUTS_k binds them to d[0 .. 8k-1] (gemm_sm90.cu, gemm_sm90_fp8.cu).
#define HC_OUT8(b) "+f"(d[b]), "+f"(d[b + 1]), "+f"(d[b + 2]), "+f"(d[b + 3]), "+f"(d[b + 4]), "+f"(d[b + 5]), \
                   "+f"(d[b + 6]), "+f"(d[b + 7])
#define HC_ACC_1 "%0, %1, %2, %3, %4, %5, %6, %7"
#define HC_ACC_2 HC_ACC_1 ", %8, %9, %10, %11, %12, %13, %14, %15"
#define HC_ACC_3 HC_ACC_2 ", %16, %17, %18, %19, %20, %21, %22, %23"
#define HC_ACC_4 HC_ACC_3 ", %24, %25, %26, %27, %28, %29, %30, %31"
#define HC_ACC_5 HC_ACC_4 ", %32, %33, %34, %35, %36, %37, %38, %39"
#define HC_ACC_6 HC_ACC_5 ", %40, %41, %42, %43, %44, %45, %46, %47"
#define HC_ACC_7 HC_ACC_6 ", %48, %49, %50, %51, %52, %53, %54, %55"
#define HC_ACC_8 HC_ACC_7 ", %56, %57, %58, %59, %60, %61, %62, %63"
#define HC_ACC_9 HC_ACC_8 ", %64, %65, %66, %67, %68, %69, %70, %71"
#define HC_ACC_10 HC_ACC_9 ", %72, %73, %74, %75, %76, %77, %78, %79"
#define HC_ACC_11 HC_ACC_10 ", %80, %81, %82, %83, %84, %85, %86, %87"
#define HC_OUTS_1 HC_OUT8(0)
#define HC_OUTS_2 HC_OUTS_1, HC_OUT8(8)
#define HC_OUTS_3 HC_OUTS_2, HC_OUT8(16)
#define HC_OUTS_4 HC_OUTS_3, HC_OUT8(24)
#define HC_OUTS_5 HC_OUTS_4, HC_OUT8(32)
#define HC_OUTS_6 HC_OUTS_5, HC_OUT8(40)
#define HC_OUTS_7 HC_OUTS_6, HC_OUT8(48)
#define HC_OUTS_8 HC_OUTS_7, HC_OUT8(56)
#define HC_OUTS_9 HC_OUTS_8, HC_OUT8(64)
#define HC_OUTS_10 HC_OUTS_9, HC_OUT8(72)
#define HC_OUTS_11 HC_OUTS_10, HC_OUT8(80)

namespace hc {
namespace {

// One specialization FN<NT> of a wgmma wrapper with both operands in shared memory:
// wgmma.mma_async m64n<NT>k<K>.f32.<TYPES> into NT/2 accumulators, then the instruction's
// trailing immediates IMM (scale-a, scale-b and, for 16-bit types, the two transposes). IA, IB
// and IS are the asm operand numbers of the descriptors and of scale-d (8 K8, + 1, + 2).
#define HC_WGMMA_SS(FN, NT, K, TYPES, IMM, K8, IA, IB, IS)                                                   \
  template <>                                                                                              \
  __device__ __forceinline__ void FN<NT>(float* d, uint64_t desc_a, uint64_t desc_b, int scale_d) {        \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #IS ", 0;\n"                                         \
                 "wgmma.mma_async.sync.aligned.m64n" #NT "k" #K ".f32." TYPES " {" HC_ACC_##K8 "}, %" #IA   \
                 ", %" #IB ", p, " IMM ";\n}\n"                                                             \
                 : HC_OUTS_##K8                                                                            \
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                                \
  }

// The N = 16 .. 128 rows of those arguments (NT, K8, IA, IB, IS), for X = a wrapper's macro.
#define HC_WGMMA_N16_TO_128(X) \
  X(16, 1, 8, 9, 10) X(32, 2, 16, 17, 18) X(48, 3, 24, 25, 26) X(64, 4, 32, 33, 34) X(80, 5, 40, 41, 42) \
  X(96, 6, 48, 49, 50) X(112, 7, 56, 57, 58) X(128, 8, 64, 65, 66)

// wgmma m64nNTk32 e4m3 x e4m3 -> f32, both operands K-major from shared memory.
template <int NT>
__device__ __forceinline__ void wgmma_fp8(float* d, uint64_t desc_a, uint64_t desc_b, int scale_d);
#define HC_WGMMA_FP8(NT, K8, IA, IB, IS) HC_WGMMA_SS(wgmma_fp8, NT, 32, "e4m3.e4m3", "1, 1", K8, IA, IB, IS)
HC_WGMMA_N16_TO_128(HC_WGMMA_FP8)
#undef HC_WGMMA_FP8

}  // namespace
}  // namespace hc
