// FP8 (e4m3, block-scaled) MoE kernels for Hopper (sm_90a), DeepSeek-V3's scheme
// (docs/kernels/fp8.md):
//   - hc_moe_quantize_fp8: bf16 rows -> e4m3 + one f32 scale per 1x128 group, 8 lanes per group
//     with two 16-byte loads and one 16-byte store a lane (K % 16 == 0), half a warp per group
//     of 16-byte loads (K % 8 == 0), else a warp per group.
//   - hc_moe_gemm_fp8{,_swiglu}_sm90swapw and hc_moe_gemm_fp8_swiglu_gather_sm90swapw: the
//     grouped GEMMs, swap-AB and warp-specialized like gemm_sm90.cu's sm90.swapw: the weights
//     are the wgmma M operand (64 rows of N a block), the tokens its N (16 to F_TN a tile).
//
// Why FP8 fits swap-AB well: wgmma takes e4m3 only K-major on both sides, and both operands
// are K-major here: the weights are stored [E, N, K] (K contiguous) and the token rows [R, K].
// One k-step is one 128-wide scale group: 128 e4m3 = 128 bytes per row, exactly one 128-byte
// swizzle span, so every box is 64 (or 16) rows x 128 bytes and the descriptors are the ones
// the bf16 kernel uses for its K-major operand (start + 32 bytes per k32 instruction).
//
// Promotion (the tensor cores' FP8 accumulator keeps about 14 bits): each k-step's four
// m64nNTk32 instructions accumulate into fresh temporaries t0/t1 (scale-d 0 on the first),
// and once they are done the consumer adds them into the fp32 totals d0/d1 with
// a_scale[token][g] * w_scale[e][row / 128][g]: the scales are per accumulator element (row,
// token), so any N and any I work, including 128-row scale blocks that hold gate and up rows.
// Tall tiles (sm90.tall) need I % 64 == 0 in the SwiGLU GEMM instead: every 64-row box lies in
// one scale block, so three producer warps write a_scale x w_scale per (box, token) into the
// scale ring and the consumers' promotion is one fused multiply-add per element (no weight-scale
// loads, no products): on the H200 that took the 4096-token SwiGLU GEMM from 3.6-3.7 to 2.88 ms.
//
// CTA: 384 threads. Warpgroup 0 produces: thread 0 issues both copies of a k-step (TMA: the
// tile's token rows as 16-row boxes, the four 64-row weight boxes) on one full barrier per
// slot; in the gather build warps 0..F_GATHER_WARPS-1 copy the token rows with cp.async
// (through row_to_slot) and lane 0 of warp F_GATHER_WARPS the weights. Warpgroups 1 and 2
// multiply: consumer c owns weight boxes 2c and 2c + 1 (SwiGLU: gate rows [128j + 64c, +64)
// and the up rows I + the same: 64 outputs; else rows [256j + 128c, +128): 128 outputs).
// Register budget: d0, d1, t0, t1 = 2 * F_TN accumulators a thread (128 at 64 tokens), under
// the consumers' setmaxnreg 232 (tall builds: 224, their producers 48). It needs the toolkit's cubin (the launcher loads it).
#include "gemm_common.cuh"
#include "sm90_common.cuh"
#include "quantize_fp8.cuh"

namespace hc {
namespace {

// TN: the most tokens a tile holds, 64 (sm90.swapw, sm90.swapw5) or 128 (sm90.wide: an expert's
// weights stream through fewer times when experts have ~100+ rows; its consumers promote their
// two boxes one after the other through one set of temporaries, to fit 3 x 64 accumulators).
constexpr int F_THREADS = 384, F_GATHER_WARPS = 3;
constexpr int F_BOX = 64 * 128;  // one 64-row x 128-byte box
// Tall tiles (sm90.tall): TN = 256 tokens x 2 weight boxes; the two consumers share the boxes
// and split the tokens. Else TN tokens x 4 boxes, two boxes a consumer.
template <int TN>
__host__ __device__ constexpr bool tall() { return TN > 128; }
template <int TN>
__host__ __device__ constexpr int n_boxes() { return tall<TN>() ? 2 : 4; }
// A slot: TN token rows of 128 bytes, then the weight boxes (a multiple of 1024 bytes, so
// every box stays 1024-aligned): 48 KB for 256 x 2 and 128 x 4, 40 KB for 64 x 4.
template <int TN>
__host__ __device__ constexpr int slot_bytes() { return TN * 128 + n_boxes<TN>() * F_BOX; }
// Tall tiles keep their promotion scales pre-multiplied: the scale ring holds, per slot and
// weight box, a_scale[token] * w_scale[box's 128-row block] (f32 [2][TN]); every box lies in one
// scale block (the launcher asks for I % 64 == 0 in the SwiGLU GEMM; the down GEMM's boxes start
// at multiples of 64 anyway). Else the ring holds a_scale[token] (f32 [TN]) and the consumers
// multiply by their rows' weight scales.
template <int TN>
__host__ __device__ constexpr int ring_scales() { return tall<TN>() ? 2 * TN : TN; }
// The down GEMM's tall tiles hold weight rows [128j, +128): both boxes lie in scale block j, so
// their products are equal and the ring's first row serves both (the producers write only it;
// consumers on the two-box path read it once for both boxes, H200: 1-3% off the down GEMM).
template <int EPI, int TN>
__host__ __device__ constexpr bool one_scale_row() { return tall<TN>() && EPI != kSwigluBf16; }
// The producer warps that write a tall build's scale ring (warps 1..3), taking k-steps in turn:
// a k-step's 256 strided token-scale loads are one global round trip a warp, and three warps
// keep three round trips in flight. Warp 1 alone writes the other builds' rings.
constexpr int kTallScalers = 3;
template <int TN>
__host__ __device__ constexpr int max_rows() { return (TN + 4 * F_GATHER_WARPS - 1) / (4 * F_GATHER_WARPS); }  // gather rows per lane

// A tensor-map box into L2 only (no shared memory, no barrier).
__device__ __forceinline__ void tma_prefetch_3d(const TensorMap* map, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.prefetch.tensor.3d.L2.global.tile [%0, {%1, %2, %3}];\n" ::"l"(map), "r"(c0), "r"(c1),
               "r"(c2)
               : "memory");
}

// What the kernels take besides the tensor maps (one struct so the three entries agree).
struct Fp8Args {
  const float* a_scale;     // [rows of the token source, KG]
  const float* w_scale;     // [EL, ceil(NW / 128), KG]
  const int* offsets;       // [EL + 1]
  unsigned short* out;      // [R, N] bf16
  long long R, K, N, EL;    // N: outputs (SwiGLU: I); the weights have NW = 2N (SwiGLU) or N rows
  const unsigned char* x;   // gather: token rows [T, K] e4m3
  const int* row_to_slot;   // gather
  int topk, T;              // gather
  float* out_scale;         // the quantizing build: [R, N / 128] f32 (`out` then holds e4m3 [R, N])
  const TensorMap* tout = nullptr;  // staged builds: `out` as bf16 boxes of 64 outputs x 16 rows, 128B swizzle
};

// The weight row of box b in n-tile j: 4 boxes, consumer b / 2, half b % 2 (SwiGLU: gate rows
// [128j + 64c, +64) and the up rows I + the same; else rows [256j + 128c + 64h, +64)); tall
// tiles: 2 boxes for both consumers (SwiGLU: gate [64j, +64) and up I + the same; else
// [128j + 64b, +64)).
template <int EPI, int TN>
__device__ __forceinline__ int box_row(int b, int j, long long N) {
  if constexpr (tall<TN>()) return EPI == kSwigluBf16 ? (b ? (int)N : 0) + j * 64 : j * 128 + 64 * b;
  const int c = b >> 1, h = b & 1;
  return EPI == kSwigluBf16 ? (h ? (int)N : 0) + j * 128 + 64 * c : j * 256 + 128 * c + 64 * h;
}
// The weight rows of a tile (SwiGLU: gate + up) and its outputs.
template <int EPI, int TN>
__host__ __device__ constexpr int tile_bn() { return 64 * n_boxes<TN>(); }

// Token row source of tile row q: the row itself, or (gather) the token of its slot; -1 = none.
template <bool GATHER>
__device__ __forceinline__ int token_source(const Fp8Args& g, const Tile& t, int rows, int q) {
  if (q >= rows) return -1;
  if (!GATHER) return t.row0 + q;
  const int slot = g.row_to_slot[t.row0 + q];
  return slot >= 0 && slot / g.topk < g.T ? slot / g.topk : -1;
}

// The tiles a CTA takes, in order: every gridDim.x-th from blockIdx.x. Clusters of two (MC, the
// multicast builds) walk pairs instead: pair i is one expert's m-tile at n-tiles 2j and 2j + 1
// (the launcher asks for an even n-tile count, so every expert's first tile index is even and
// tiles 2i, 2i + 1 are such a pair), and cluster rank r takes n-tile 2j + r. Both CTAs of a
// cluster then hold the same token rows, which each copies half of into both.
template <int TN, bool MC>
struct TileWalk {
  int first, step, count;  // walk indices first, first + step, ... below count
  __device__ __forceinline__ explicit TileWalk(int total)
      : first(MC ? (int)blockIdx.x >> 1 : (int)blockIdx.x),
        step(MC ? (int)gridDim.x >> 1 : (int)gridDim.x),
        count(MC ? total >> 1 : total) {}
  __device__ __forceinline__ Tile tile(const TileMap& m, int i) const {
    if constexpr (!MC) {
      return decode_tile<TN, tall<TN>()>(m, i);
    } else {
      Tile t = decode_tile<TN, tall<TN>()>(m, 2 * i);  // the pair's expert
      const int m_tiles = (m.seg[t.expert + 1] - m.seg[t.expert] + TN - 1) / TN;
      const int q = (2 * i - m.first[t.expert]) >> 1;  // the pair within the expert
      t.n_tile = 2 * (q / m_tiles) + (int)cluster_rank();
      place_m_tile<TN, tall<TN>()>(m, t, q % m_tiles);
      return t;
    }
  }
};

// Tall tiles: one lane's share of k-step kt's scale ring entries, a_scale[token] times the
// weight scale of each box's 128-row block: all loads first (one round trip), then the stores.
template <int EPI, int TN>
__device__ __forceinline__ void write_box_scales(const Fp8Args& g, const Tile& t, int rows, int kt, float* sc) {
  const int lane = threadIdx.x & 31;
  const long long KG = (g.K + 127) / 128;
  const int NW = EPI == kSwigluBf16 ? 2 * (int)g.N : (int)g.N;
  const long long NB = (NW + 127) / 128;
  constexpr int ROWS = one_scale_row<EPI, TN>() ? 1 : 2;
  float sw[ROWS];
#pragma unroll
  for (int b = 0; b < ROWS; ++b) {
    const int r = box_row<EPI, TN>(b, t.n_tile, g.N);  // a box past NW holds zero-filled rows
    sw[b] = r < NW ? __ldg(g.w_scale + ((long long)t.expert * NB + r / 128) * KG + kt) : 0.f;
  }
  // The eight addresses are recomputed from an opaque stride each k-step: hoisted out of the
  // loops as loop invariants (what the compiler does otherwise) they hold 16 of the producers'
  // registers and spill.
  long long stride = 32 * KG;
  asm volatile("mov.b64 %0, %0;" : "+l"(stride));
  const float* p = g.a_scale + ((long long)t.row0 + lane) * KG + kt;
  float a[TN / 32];
#pragma unroll
  for (int i = 0; i < TN / 32; ++i) a[i] = lane + 32 * i < rows ? __ldg(p + i * stride) : 0.f;
#pragma unroll
  for (int i = 0; i < TN / 32; ++i) {
    sc[lane + 32 * i] = a[i] * sw[0];
    if constexpr (ROWS == 2) sc[TN + lane + 32 * i] = a[i] * sw[1];
  }
}

// A tall build's scaler warp w (1..kTallScalers): the scale ring entries of k-steps it with
// it % kTallScalers == w - 1. It waits only for those slots: the empty phase it waits for cannot
// have moved on without it, since refilling the slot needs this warp's arrival on its full
// barrier (waiting on other warps' slots could see a phase completed twice since).
template <int EPI, int SLOTS, int TN, bool MC>
__device__ __forceinline__ void produce_box_scales(const Fp8Args& g, const TileMap& map, int total, int k_tiles,
                                                   uint32_t full, uint32_t empty, float* scales) {
  const int w = (threadIdx.x >> 5) - 1;
  uint32_t it = 0;
  const TileWalk<TN, MC> walk(total);
  for (int i = walk.first; i < walk.count; i += walk.step) {
    const Tile t = walk.tile(map, i);
    const int rows = min(t.row_end - t.row0, TN);
    // The first k-step of this tile that is this warp's, then every kTallScalers-th.
    const int k0 = (int)((w - (int)(it % kTallScalers) + kTallScalers) % kTallScalers);
    for (int kt = k0; kt < k_tiles; kt += kTallScalers) {
      const uint32_t i = it + kt, s = i % SLOTS;
      if (i >= SLOTS) mbar_wait(empty + 8 * s, ((i / SLOTS) - 1) & 1);
      write_box_scales<EPI, TN>(g, t, rows, kt, scales + s * ring_scales<TN>());
      mbar_arrive(full + 8 * s);
    }
    it += k_tiles;
  }
}

// The producers' walk over (tile, k-step). Each k-step's slot holds the tile's token rows, the
// four weight boxes and the tokens' activation scales of that group (f32 [TN] in the scale ring,
// `scales`). Non-gather: thread 0 issues the TMA copies, warp 1 loads the scales (one per lane,
// then an arrive each: 1 + 32 arrivals). Gather: the lanes of warps 0..F_GATHER_WARPS-1 copy
// token rows with cp.async (noinc arrivals on completion) and write the scales of their rows
// (lanes of chunk 0), then arrive; lane 0 of the next warp issues the weights (1 + 2 x 32 x
// F_GATHER_WARPS arrivals).
// Tall builds: the TMA thread also writes each tile into `tiles` (an int4 a slot) with the
// tile's first k-step, before its arrival on that slot's full barrier, so that the consumers
// read their next tile with one shared load once the slot is full instead of looking it up
// (decode_tile's binary search: dependent shared loads, ~900 cycles a tile on the H200 while
// the other consumer's wgmmas keep shared memory busy; ~10% of the down GEMM's 16-k-step tiles).
template <int EPI, bool GATHER, int SLOTS, int TN, int PF, bool MC>
__device__ __forceinline__ void produce(const TensorMap* ta16, const TensorMap* tb, const Fp8Args& g,
                                        const TileMap& map, int total, int k_tiles, uint32_t ring, uint32_t full,
                                        uint32_t empty, float* scales, int4* tiles) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const bool weights = GATHER ? (warp == F_GATHER_WARPS && lane == 0) : threadIdx.x == 0;
  const bool tokens = GATHER ? warp < F_GATHER_WARPS : threadIdx.x == 0;
  const bool scaler = GATHER ? tokens : !tall<TN>() && warp == 1;
  if constexpr (!GATHER && tall<TN>()) {
    if (warp >= 1 && warp <= kTallScalers) {
      produce_box_scales<EPI, SLOTS, TN, MC>(g, map, total, k_tiles, full, empty, scales);
      return;
    }
  }
  if (!weights && !tokens && !scaler) return;
  const long long KG = (g.K + 127) / 128;
  uint64_t keep, stream;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(keep));
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(stream));
  // The weights of an expert split into several m-tiles are read once a tile, by CTAs that run
  // those tiles side by side (neighbouring walk indices): kept in L2 at normal priority there.
  uint64_t shared_w;
  asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(shared_w));
  constexpr int MR = max_rows<TN>();
  // Up to 6 rows a lane keep their token rows in registers (the producers' 56); more (TN 128)
  // read row_to_slot again each k-step (L1 hits).
  constexpr bool CACHE_SRC = MR <= 6;
  uint32_t it = 0;
  const TileWalk<TN, MC> walk(total);
  const uint32_t rank = MC ? cluster_rank() : 0u;
  for (int wi = walk.first; wi < walk.count; wi += walk.step) {
    const Tile t = walk.tile(map, wi);
    const int rows = min(t.row_end - t.row0, TN);
    const int n16 = (rows + 15) & ~15;
    const uint64_t w_policy = map.seg[t.expert + 1] - map.seg[t.expert] > TN ? shared_w : stream;
    // PF > 0: the weight boxes of k-step kt + PF (of this tile, or of the CTA's next one) are
    // prefetched into L2 when k-step kt is issued, so that PF more k-steps of weights are in
    // flight from HBM than the ring holds.
    Tile next = t;
    const bool has_next = PF > 0 && wi + walk.step < walk.count;
    if (PF > 0 && weights && has_next) next = walk.tile(map, wi + walk.step);
    // Gather: this lane's rows q = q0 + i * 4 * F_GATHER_WARPS and their token rows.
    const int q0 = (32 * warp + lane) >> 3;
    int src[MR];
    if (GATHER && tokens && CACHE_SRC) {
#pragma unroll
      for (int i = 0; i < MR; ++i) src[i] = token_source<true>(g, t, rows, q0 + i * 4 * F_GATHER_WARPS);
    }
    for (int kt = 0; kt < k_tiles; ++kt, ++it) {
      const uint32_t s = it % SLOTS, bar = full + 8 * s;
      if (it >= SLOTS) mbar_wait(empty + 8 * s, ((it / SLOTS) - 1) & 1);
      const uint32_t sa = ring + s * slot_bytes<TN>(), sb = sa + TN * 128;
      float* sc = scales + s * TN;
      if (weights) {
        if (tall<TN>() && kt == 0) tiles[s] = make_int4(t.expert, t.n_tile, t.row0, t.row_end);
        mbar_expect_tx(bar, (GATHER ? 0u : (uint32_t)n16 * 128) + n_boxes<TN>() * F_BOX);
#pragma unroll
        for (int b = 0; b < n_boxes<TN>(); ++b)
          tma_3d(sb + b * F_BOX, tb, kt * 128, box_row<EPI, TN>(b, t.n_tile, g.N), t.expert, bar, w_policy);
        if constexpr (PF > 0) {
          const bool here = kt + PF < k_tiles;
          const Tile& pt = here ? t : next;
          const int pk = here ? kt + PF : kt + PF - k_tiles;
          if ((here || has_next) && pk < k_tiles) {
#pragma unroll
            for (int b = 0; b < n_boxes<TN>(); ++b)
              tma_prefetch_3d(tb, pk * 128, box_row<EPI, TN>(b, pt.n_tile, g.N), pt.expert);
          }
        }
      }
      if (tokens && !GATHER) {
        // MC: this CTA's boxes (every other one) into both CTAs' slots; the peer copies the rest.
        for (int j = MC ? (int)rank : 0; j < n16 / 16; j += MC ? 2 : 1) {
          if constexpr (MC) tma_2d_multicast(sa + j * 2048, ta16, kt * 128, t.row0 + 16 * j, bar, 3, keep);
          else tma_2d(sa + j * 2048, ta16, kt * 128, t.row0 + 16 * j, bar, keep);
        }
      }
      if (scaler && !GATHER) {
#pragma unroll
        for (int q = lane; q < TN; q += 32) sc[q] = q < rows ? __ldg(g.a_scale + (long long)(t.row0 + q) * KG + kt) : 0.f;
        mbar_arrive(bar);
      }
      if (tokens && GATHER) {
        const int chunk = lane & 7;
        const long long k0 = (long long)kt * 128 + 16 * chunk;
#pragma unroll
        for (int i = 0; i < MR; ++i) {
          const int q = q0 + i * 4 * F_GATHER_WARPS;
          if (q < n16) {
            const int row = CACHE_SRC ? src[i] : token_source<true>(g, t, rows, q);
            const bool ok = row >= 0 && k0 < g.K;
            const unsigned char* p = ok ? g.x + (long long)row * g.K + k0 : g.x;
            asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(
                             sa + q * 128 + ((chunk ^ (q & 7)) << 4)),
                         "l"(p), "r"(ok ? 16 : 0), "l"(keep)
                         : "memory");
            if (chunk == 0) sc[q] = row >= 0 ? __ldg(g.a_scale + (long long)row * KG + kt) : 0.f;
          }
        }
        asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
        mbar_arrive(bar);  // the scales written above
      }
    }
  }
}

// Stores one consumer's outputs: d0/d1 = its boxes (SwiGLU: gate, up). d[4j + 2h + q] is weight
// row 16 (warp % 4) + lane / 4 + 8h of the box, token 8j + 2 (lane % 4) + q. Lanes 4 apart hold
// neighbouring rows (output columns): the even one stores token 2 (lane % 4) of both, the odd
// one token + 1, so each store is two adjacent bf16 of one output row. `r0`: the consumer's
// first row (tall tiles: the tile's row0 + the consumer's token offset), `rows` its rows.
template <int EPI, int NT, int TN>
__device__ __forceinline__ void store_tile(const Fp8Args& g, const Tile& t, int r0, int rows, const float* d0,
                                           const float* d1, int cg) {
  const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3, gq = lane >> 2, qq = lane & 3;
  const bool odd = gq & 1;
  constexpr int BLOCKS = EPI == kSwigluBf16 ? 1 : 2;
  constexpr int OUTS = EPI == kSwigluBf16 ? tile_bn<EPI, TN>() / 2 : tile_bn<EPI, TN>();  // a tile's outputs
  const long long col0 = (long long)t.n_tile * OUTS + (tall<TN>() ? 0 : OUTS / 2 * cg) + 16 * warp + (gq & ~1);
  const int tok0 = 2 * qq + (odd ? 1 : 0);
#pragma unroll
  for (int j = 0; j < NT / 8; ++j) {
    const int tok = 8 * j + tok0;
    unsigned short* row = g.out + ((long long)r0 + tok) * g.N;
#pragma unroll
    for (int nb = 0; nb < BLOCKS; ++nb) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = 4 * j + 2 * h;
        const uint32_t v = swap_out_pair<EPI>(d0, d1, i, nb, odd);
        const long long col = col0 + 64 * nb + 8 * h;
        if (tok >= rows || col >= g.N) continue;
        if (col + 1 < g.N && (g.N & 1) == 0) {
          *reinterpret_cast<uint32_t*>(row + col) = v;
        } else {
          row[col] = (unsigned short)(v & 0xffffu);
          if (col + 1 < g.N) row[col + 1] = (unsigned short)(v >> 16);
        }
      }
    }
  }
}

// Tall builds with a staged epilogue (sm90.talls, sm90.tallsmc): a consumer writes its outputs as
// bf16 rows into its own part of a staging buffer in shared memory, and they leave by tensor
// stores (cp.async.bulk.tensor through `tout`, `out` in boxes of 64 outputs x 16 rows) while the
// next tile's k-loop runs. The consumer's 128 staging rows are OUTS / 64 halves of 16 KB, 64
// outputs (128 bytes) a row, 16-byte chunk c of row r at chunk c ^ (r % 8): the map's 128B
// swizzle, which also puts the eight rows of each stmatrix matrix in distinct banks. One thread
// a consumer sends every whole 16-row group out with one tensor store a half (at most 16 a
// tile); the rows past the last whole group (at most 15) go out by 16-byte stores from all the
// consumer's threads, since a 16-row box there would write into the next expert's rows. Columns
// past N: the map clips the tensor stores, the plain stores check. Before writing, the issuing
// thread waits until its previous tile's stores have read the rows, and the consumer's 128
// threads meet on named barrier 1 + cg (again once the rows are written, before the stores).
// H200 (docs/PERFORMANCE.md, 2026-12-01 fourth session): 1-3% faster in the down GEMM at 4096
// tokens than one bulk copy a row (64-128 a tile, whose issue took ~1700-2100 cycles a tile).
// Needs N % 8 == 0 (rows of 16-byte multiples) and `out` 16-byte aligned: the launcher checks.
constexpr int kStageHalf = 128 * 128;  // 128 rows x 64 bf16
template <int EPI, int TN>
__host__ __device__ constexpr int stage_halves() {
  return (EPI == kSwigluBf16 ? tile_bn<EPI, TN>() / 2 : tile_bn<EPI, TN>()) / 64;
}
__device__ __forceinline__ void consumer_sync(int cg) {
  if (cg == 0) asm volatile("bar.sync 1, 128;\n" ::: "memory");
  else asm volatile("bar.sync 2, 128;\n" ::: "memory");
}
// The staging buffer lies after the scale ring (`scales`, SLOTS rings) and the tile map, from the
// next 1024 bytes (the swizzle's span): derived here rather than kept in a register across the
// k-loop (the consumers' 224 are spoken for).
template <int EPI, int NT, int TN, int SLOTS>
__device__ __forceinline__ void store_tile_staged(const Fp8Args& g, const Tile& t, int off, int rows, const float* d0,
                                                  const float* d1, int cg, const float* scales) {
  constexpr int BLOCKS = EPI == kSwigluBf16 ? 1 : 2, HALVES = stage_halves<EPI, TN>();
  const uint32_t stage =
      (smem_addr(scales + SLOTS * ring_scales<TN>() + 16 + 2 * ((int)g.EL + 1)) + 1023) & ~1023u;
  const uint32_t mine = stage + (uint32_t)cg * HALVES * kStageHalf;
  const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");  // a no-op in threads that issued none
  consumer_sync(cg);
  // stmatrix .trans, four 8x8 b16 matrices an instruction: matrix m = (j BLOCKS + nb) 2 + h holds
  // output columns 16 warp + 8h + 64nb + (0..7) (the box's weight rows) x tokens 8j + (0..7);
  // this thread's accumulator pair of it (row gq, tokens 2qq and 2qq + 1) is exactly a
  // fragment of that matrix, so no shuffle is needed, and transposed, its rows are the tokens'
  // staging rows. Lane L gives the address of row L % 8 of the instruction's matrix L / 8. Rows
  // past `rows` are written to the staging buffer too (the stores skip them).
  constexpr int MATS = NT / 8 * BLOCKS * 2;
  static_assert(MATS % 4 == 0, "whole stmatrix.x4 groups");
#pragma unroll
  for (int m0 = 0; m0 < MATS; m0 += 4) {
    uint32_t r[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int m = m0 + k, i = 4 * (m / (2 * BLOCKS)) + 2 * (m % 2), nb = (m / 2) % BLOCKS;
      if constexpr (EPI == kSwigluBf16) r[k] = pack_bf16x2(silu_mul(d0[i], d1[i]), silu_mul(d0[i + 1], d1[i + 1]));
      else r[k] = pack_bf16x2(nb ? d1[i] : d0[i], nb ? d1[i + 1] : d0[i + 1]);
    }
    const int m = m0 + (lane >> 3), tok = 8 * (m / (2 * BLOCKS)) + (lane & 7);
    const int chunk = 2 * warp + (m % 2), half = (m / 2) % BLOCKS;  // output column 64 half + 8 chunk
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(
                     mine + half * kStageHalf + tok * 128 + ((chunk ^ (tok & 7)) << 4)),
                 "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // the writes, visible to the tensor stores
  consumer_sync(cg);
  const int col0 = t.n_tile * 64 * HALVES, row0 = (int)t.row0 + off, groups = rows >> 4;
  if ((threadIdx.x & 127) == 0) {
    for (int q = 0; q < groups; ++q)
#pragma unroll
      for (int h = 0; h < HALVES; ++h)
        if (col0 + 64 * h < g.N)
          asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(g.tout),
                       "r"(col0 + 64 * h), "r"(row0 + 16 * q), "r"(mine + h * kStageHalf + q * 2048)
                       : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
  }
  constexpr int CHUNKS = 8 * HALVES;  // 16-byte chunks a row
  for (int p = threadIdx.x & 127; p < CHUNKS * (rows - 16 * groups); p += 128) {  // the last rows
    const int r = 16 * groups + p / CHUNKS, c = p % CHUNKS;
    const long long col = col0 + 8 * c;
    if (col < g.N) {
      uint4 v;
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                   : "r"(mine + (c >> 3) * kStageHalf + r * 128 + (((c & 7) ^ (r & 7)) << 4)));
      *reinterpret_cast<uint4*>(g.out + (long long)(row0 + r) * g.N + col) = v;
    }
  }
}

// The quantizing epilogue (moe_grouped_gemm_fp8_swiglu_quant's "sm90.tallmc"; measured slower
// than the plain build + moe_quantize_fp8 on the H200, so the layer runs it only where named:
// docs/kernels/fp8.md): the SwiGLU output
// h, rounded to bf16 as the plain build stores it, is written as e4m3 with one f32 scale per
// 1x128 group, moe_quantize_fp8's arithmetic, so the result is bit for bit that of the plain
// build followed by moe_quantize_fp8. A group is 128 outputs of one token and a tile makes 64:
// the two CTAs of a cluster (n-tiles 2j and 2j + 1, the same tokens split the same way between
// their consumers) make one group together, so each consumer sends its tokens' maxima over its
// 64 outputs to the same consumer of the peer CTA (DSMEM) and takes the larger of the two.
// Shared memory after the tile map, from the next 128 bytes: per consumer 128 staging rows of 64
// e4m3 (16-byte chunk c of row r at c ^ ((r >> 1) & 3), so that the four token rows a warp's
// byte stores touch fall in distinct banks; the four warps' per-token maxima pass through its
// first 2 KB before the rows are written), then own[2][128] and peer[2][128] f32 (the peer CTA
// writes `peer`), then per consumer the barriers xfull (128 local + 128 remote arrivals: both
// CTAs' maxima are in) and xfree (128 remote arrivals: the peer has read what this CTA wrote).
struct QuantSmem {
  uint32_t stage, own, peer, xfull, xfree;
};
constexpr int kQuantStageRow = 64;
template <int TN, int SLOTS>
__device__ __forceinline__ QuantSmem quant_smem(const float* scales, long long EL) {
  QuantSmem q;
  q.stage = (smem_addr(scales + SLOTS * ring_scales<TN>() + 16 + 2 * ((int)EL + 1)) + 127) & ~127u;
  q.own = q.stage + 2 * 128 * kQuantStageRow;
  q.peer = q.own + 2 * 128 * 4;
  q.xfull = q.peer + 2 * 128 * 4;
  q.xfree = q.xfull + 16;
  return q;
}
__device__ __forceinline__ float round_bf16(float v) { return __uint_as_float(pack_bf16x2(v, 0.f) << 16); }
__device__ __forceinline__ float lds_f32(uint32_t a) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(a) : "memory");
  return v;
}
__device__ __forceinline__ float2 lds_f32x2(uint32_t a) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(a) : "memory");
  return v;
}
__device__ __forceinline__ uint32_t quant_stage_byte(uint32_t stage, int tok, int col) {
  return stage + tok * kQuantStageRow + ((((col >> 4) ^ (tok >> 1)) & 3) << 4) + (col & 15);
}
// `xphase` counts the consumer's exchanges so far (the same count in both CTAs: both see the
// same tiles with the same rows a consumer). The peer writes this consumer's `peer` row for its
// next tile only after xfree says it was read; and the staging rows are rewritten only after
// every lane of the consumer has passed the first consumer_sync (its previous copies done).
template <int NT, int TN, int SLOTS>
__device__ __forceinline__ void store_tile_quant(const Fp8Args& g, const Tile& t, int off, int rows, float* d0,
                                                 const float* d1, int cg, const float* scales, uint32_t& xphase) {
  const QuantSmem sm = quant_smem<TN, SLOTS>(scales, g.EL);
  const int tid = threadIdx.x & 127, lane = threadIdx.x & 31, warp = tid >> 5, gq = lane >> 2, qq = lane & 3;
  const uint32_t peer = cluster_rank() ^ 1u, stage = sm.stage + (uint32_t)cg * 128 * kQuantStageRow;
  // h, and per token (8j + 2qq + q: m[2j + q]) the maximum over this thread's two outputs, then
  // over the warp's 16 (lanes 4, 8, 16 apart hold the other outputs of the same tokens).
  float m[NT / 4];
#pragma unroll
  for (int i = 0; i < NT / 2; ++i) d0[i] = round_bf16(silu_mul(d0[i], d1[i]));
#pragma unroll
  for (int j = 0; j < NT / 8; ++j)
#pragma unroll
    for (int q = 0; q < 2; ++q) m[2 * j + q] = fmaxf(fabsf(d0[4 * j + q]), fabsf(d0[4 * j + 2 + q]));
#pragma unroll
  for (int o = 4; o < 32; o <<= 1)
#pragma unroll
    for (int i = 0; i < NT / 4; ++i) m[i] = fmaxf(m[i], __shfl_xor_sync(0xffffffffu, m[i], o));
  consumer_sync(cg);  // every lane's previous copies out of the staging rows are done
  const uint32_t part = stage;  // f32 [4 warps][128 tokens]
  if (gq == 0) {
#pragma unroll
    for (int j = 0; j < NT / 8; ++j)
      asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(part + (warp * 128 + 8 * j + 2 * qq) * 4),
                   "f"(m[2 * j]), "f"(m[2 * j + 1])
                   : "memory");
  }
  consumer_sync(cg);
  // Token `tid`: the maximum over this CTA's 64 outputs, into own[] and the peer's peer[].
  // fmaxf skips a NaN unless both are: the 0 makes a group of NaNs alone amax 0 (scale 0, as
  // moe_quantize_fp8), not NaN.
  float a = 0.f;
  if (tid < NT)
    a = fmaxf(fmaxf(fmaxf(lds_f32(part + tid * 4), lds_f32(part + (128 + tid) * 4)),
                    fmaxf(lds_f32(part + (256 + tid) * 4), lds_f32(part + (384 + tid) * 4))),
              0.f);
  if (xphase > 0) mbar_wait_acquire_cluster(sm.xfree + 8 * cg, (xphase - 1) & 1);
  const uint32_t slot = (uint32_t)(cg * 128 + tid) * 4;
  asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(sm.own + slot), "f"(a) : "memory");
  st_cluster_f32(sm.peer + slot, peer, a);
  mbar_arrive(sm.xfull + 8 * cg);
  mbar_arrive_release_cluster(sm.xfull + 8 * cg, peer);
  mbar_wait_acquire_cluster(sm.xfull + 8 * cg, xphase & 1);
  // The group's scale of each of this thread's tokens (moe_quantize_fp8: amax / 448).
#pragma unroll
  for (int j = 0; j < NT / 8; ++j) {
    const uint32_t at = (uint32_t)(cg * 128 + 8 * j + 2 * qq) * 4;
    const float2 x = lds_f32x2(sm.own + at), y = lds_f32x2(sm.peer + at);
    m[2 * j] = fmaxf(x.x, y.x) / 448.f;
    m[2 * j + 1] = fmaxf(x.y, y.y) / 448.f;
  }
  mbar_arrive_release_cluster(sm.xfree + 8 * cg, peer);  // this CTA's peer[] row is read
  ++xphase;
  const long long row0 = (long long)t.row0 + off;
  if (peer == 1u && warp == 0 && gq == 0) {  // rank 0 writes the scales of group n_tile / 2
    const long long IG = g.N / 128;
#pragma unroll
    for (int j = 0; j < NT / 8; ++j)
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int tok = 8 * j + 2 * qq + q;
        if (tok < rows) g.out_scale[(row0 + tok) * IG + (t.n_tile >> 1)] = m[2 * j + q];
      }
  }
  // The e4m3 bytes into the staging rows (the maxima there were read before xfull completed:
  // every local thread arrived after reading them), then 16-byte stores of whole rows.
#pragma unroll
  for (int j = 0; j < NT / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int tok = 8 * j + 2 * qq + q;
        const unsigned char b = quantize1(d0[4 * j + 2 * h + q], m[2 * j + q]);
        asm volatile("st.shared.u8 [%0], %1;\n" ::"r"(quant_stage_byte(stage, tok, 16 * warp + gq + 8 * h)),
                     "h"((unsigned short)b)
                     : "memory");
      }
  consumer_sync(cg);
  unsigned char* out = reinterpret_cast<unsigned char*>(g.out) + t.n_tile * 64;
  for (int i = tid; i < 4 * rows; i += 128) {
    const int r = i >> 2, c = i & 3;
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(quant_stage_byte(stage, r, 16 * c))
                 : "memory");
    *reinterpret_cast<uint4*>(out + (row0 + r) * g.N + 16 * c) = v;
  }
}

// A thread's promotion scales of one box and k-step: the scale ring's values of its tokens
// 8j + 2 (lane % 4) + {0, 1}, j < NT / 8 (tall tiles: a_scale x the box's w_scale; else a_scale).
template <int NT>
struct BoxScales {
  float2 a[NT / 8];
  __device__ __forceinline__ void load(const float* sc) {
    const int qq = threadIdx.x & 3;
#pragma unroll
    for (int j = 0; j < NT / 8; ++j) a[j] = *reinterpret_cast<const float2*>(sc + 8 * j + 2 * qq);
  }
};

// d += t * a[token] * sw (h): sw0 / sw1 the weight scales of this thread's two rows (h = 0, 1)
// of the box; tall tiles pass 1 (their ring holds the products already).
template <int NT>
__device__ __forceinline__ void promote(float* d, const float* t, const BoxScales<NT>& s, float sw0, float sw1) {
#pragma unroll
  for (int j = 0; j < NT / 8; ++j) {
    d[4 * j] = fmaf(t[4 * j], s.a[j].x * sw0, d[4 * j]);
    d[4 * j + 1] = fmaf(t[4 * j + 1], s.a[j].y * sw0, d[4 * j + 1]);
    d[4 * j + 2] = fmaf(t[4 * j + 2], s.a[j].x * sw1, d[4 * j + 2]);
    d[4 * j + 3] = fmaf(t[4 * j + 3], s.a[j].y * sw1, d[4 * j + 3]);
  }
}

// What one consumer warpgroup works on in a tile: its two weight boxes, its tokens (rows from
// `off`) and the scale rows of this thread's four weight rows.
template <int EPI, int TN>
struct ConsumerView {
  int off, rows, cg;
  int wrow[2][2];  // per box and half: this thread's weight-scale row (element offset), -1 past NW

  // (The launcher checks that w_scale has fewer than 2^31 elements.)
  __device__ __forceinline__ ConsumerView(const Fp8Args& g, const Tile& t, int off_, int rows_, int cg_)
      : off(off_), rows(rows_), cg(cg_) {
    const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
    const int KG = (int)((g.K + 127) / 128);
    const int NW = EPI == kSwigluBf16 ? 2 * (int)g.N : (int)g.N;
    const int NB = (NW + 127) / 128;
#pragma unroll
    for (int b = 0; b < 2; ++b)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = box_row<EPI, TN>(box(b), t.n_tile, g.N) + 16 * warp + (lane >> 2) + 8 * h;
        wrow[b][h] = r < NW ? (t.expert * NB + r / 128) * KG : -1;
      }
  }
  // The slot's box index of this consumer's box b.
  __device__ __forceinline__ int box(int b) const { return tall<TN>() ? b : 2 * cg + b; }
  // The weight scales of k-step kt: global loads whose latency the waits and wgmmas hide.
  __device__ __forceinline__ void weight_scales(const Fp8Args& g, int kt, float (&sw)[2][2]) const {
#pragma unroll
    for (int b = 0; b < 2; ++b)
#pragma unroll
      for (int h = 0; h < 2; ++h) sw[b][h] = wrow[b][h] >= 0 ? __ldg(g.w_scale + wrow[b][h] + kt) : 0.f;
  }
  // One box's four k32 wgmmas of the slot at sa_addr into tt (scale-d 0 on the first).
  template <int NT>
  __device__ __forceinline__ void mma(float* tt, uint32_t sa_addr, int b) const {
    const uint32_t wa = sa_addr + TN * 128 + box(b) * F_BOX, ta = sa_addr + off * 128;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wgmma_fp8<NT>(tt, make_desc(wa + kk * 32, 16, 1024), make_desc(ta + kk * 32, 16, 1024), kk);
  }
};

// Waits for slot s's k-step (the gather build's cp.async writes need the proxy fence).
template <bool GATHER>
__device__ __forceinline__ void wait_full(uint32_t full, uint32_t it, int slots) {
  mbar_wait(full + 8 * (it % slots), (it / slots) & 1);
  if (GATHER) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// One tile for a consumer warpgroup (NT = its rows rounded up to 16): the k loop with its
// promotions, then the stores. `it` counts k-steps over the CTA's walk. TN 64: both boxes'
// wgmmas into two sets of temporaries at once; wider: one box after the other through one set.
// MC: each consumer warp also releases the slot on the peer CTA's empty barrier (lane 0, after
// the warp's wgmmas have read it and __syncwarp): the peer's copies write into this slot too.
template <bool MC>
__device__ __forceinline__ void release_slot(uint32_t empty_s) {
  mbar_arrive(empty_s);
  if constexpr (MC) {
    __syncwarp();
    if ((threadIdx.x & 31) == 0) mbar_arrive_cluster(empty_s, cluster_rank() ^ 1u);
  }
}

// Turns (tall tiles of up to kTurnRows rows, where both consumers take the two-box path below):
// the two consumer warpgroups take turns at issuing their k-steps' wgmmas (named barriers 3 and
// 4, as FlashAttention-3's warp-scheduler barriers). Both wait for the same slot, so without
// turns they issue together, share the tensor cores until both are done, and then promote
// together while the tensor cores idle; in turns, the tensor cores run one consumer's wgmmas
// while the other promotes (from registers: its scales are read before its wgmmas are issued,
// since shared memory is then busy with the other's operands). On the H200 (docs/kernels/fp8.md,
// 2026-11-30 sixth session; bench/probes/fp8_kernel_rate.cu) 4-10% off the SwiGLU GEMM's time
// and 3% off the down GEMM's at 128 rows an expert. turn_wait(cg): the other consumer has
// issued its previous k-step (consumer 1 passes once before its first tile, and consumer 0
// takes that pass back after its last, so every barrier phase completes); turn_pass(cg): this
// consumer has issued. Non-tall builds never take turns (`turns` is false there).
constexpr int kTurnRows = 160;  // consumer 0 takes <= 80 rows, consumer 1 the rest (<= 80)
__device__ __forceinline__ void turn_wait(int cg) { asm volatile("bar.sync %0, 256;\n" ::"r"(3 + cg) : "memory"); }
__device__ __forceinline__ void turn_pass(int cg) { asm volatile("bar.arrive %0, 256;\n" ::"r"(4 - cg) : "memory"); }

template <int EPI, int NT, int SLOTS, int TN, bool GATHER, bool STAGED, bool MC, bool QUANT>
__device__ __forceinline__ void consume_tile(const Fp8Args& g, const Tile& t, const ConsumerView<EPI, TN>& v,
                                             int k_tiles, uint32_t& it, uint32_t ring, uint32_t full, uint32_t empty,
                                             const float* scales, uint32_t& xphase, bool turns) {
  constexpr int NA = NT / 2;  // accumulators per thread per box
  float d0[NA], d1[NA];
#pragma unroll
  for (int i = 0; i < NA; ++i) d0[i] = d1[i] = 0.f;
  // Both boxes' wgmmas at once (two sets of temporaries, one wait a k-step) where the
  // registers allow: 64-token tiles, and tall tiles' consumers of up to 80 rows; else one box
  // after the other through one set.
  constexpr bool BOTH = TN <= 64 || (tall<TN>() && NT <= 80);
  for (int kt = 0; kt < k_tiles; ++kt, ++it) {
    float sw[2][2] = {{1.f, 1.f}, {1.f, 1.f}};  // tall tiles: in the ring's products already
    if constexpr (!tall<TN>()) v.weight_scales(g, kt, sw);
    const uint32_t s = it % SLOTS;
    wait_full<GATHER>(full, it, SLOTS);
    const uint32_t sa_addr = ring + s * slot_bytes<TN>();
    const float* sc = scales + s * ring_scales<TN>() + v.off;
    // Box b's promotion: tall tiles read the pre-multiplied scales of box b (ring row b).
    auto promote_box = [&](float* d, const float* tt, int b) {
      BoxScales<NT> sb;
      sb.load(tall<TN>() && !one_scale_row<EPI, TN>() ? sc + b * TN : sc);
      promote<NT>(d, tt, sb, sw[b][0], sw[b][1]);
    };
    if constexpr (BOTH) {
      float t0[NA], t1[NA];
      BoxScales<NT> s0, s1;  // tall tiles: read before the issue (see turn_wait)
      if constexpr (tall<TN>()) {
        s0.load(sc);
        if constexpr (!one_scale_row<EPI, TN>()) s1.load(sc + TN);
      }
      fence_n<NA>(t0);
      fence_n<NA>(t1);
      if (turns) turn_wait(v.cg);
      wgmma_fence();
      v.template mma<NT>(t0, sa_addr, 0);
      v.template mma<NT>(t1, sa_addr, 1);
      wgmma_commit();
      if (turns) turn_pass(v.cg);
      wgmma_wait<0>();
      fence_n<NA>(t0);
      fence_n<NA>(t1);
      if constexpr (tall<TN>()) {
        promote<NT>(d0, t0, s0, 1.f, 1.f);
        promote<NT>(d1, t1, one_scale_row<EPI, TN>() ? s0 : s1, 1.f, 1.f);
      } else {
        promote_box(d0, t0, 0);
        promote_box(d1, t1, 1);
      }
    } else {
      float tt[NA];
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        fence_n<NA>(tt);
        wgmma_fence();
        v.template mma<NT>(tt, sa_addr, b);
        wgmma_commit();
        wgmma_wait<0>();
        fence_n<NA>(tt);
        promote_box(b ? d1 : d0, tt, b);
      }
    }
    // Every consumer thread gives the slot back itself: mbarrier.arrive releases only the
    // arriving thread's own accesses, so a single lane's arrive (even after __syncwarp) does not
    // order the other lanes' scale reads before the producer's next writes into this slot in the
    // PTX memory model's terms, and compute-sanitizer racecheck reported exactly that pair.
    release_slot<MC>(empty + 8 * s);
  }
  if constexpr (QUANT) store_tile_quant<NT, TN, SLOTS>(g, t, v.off, v.rows, d0, d1, v.cg, scales, xphase);
  else if constexpr (STAGED) store_tile_staged<EPI, NT, TN, SLOTS>(g, t, v.off, v.rows, d0, d1, v.cg, scales);
  else store_tile<EPI, NT, TN>(g, t, t.row0 + v.off, v.rows, d0, d1, v.cg);
}

// A consumer with no rows in a tall tile still takes part in every k-step's hand-off: it waits
// for the slot (so that its arrivals never run ahead into a later phase of the empty barrier)
// and releases it, and keeps the turns where the tile has them.
template <bool MC>
__device__ __forceinline__ void consume_idle(int k_tiles, uint32_t& it, int slots, uint32_t full, uint32_t empty,
                                             int cg, bool turns) {
  for (int kt = 0; kt < k_tiles; ++kt, ++it) {
    mbar_wait(full + 8 * (it % slots), (it / slots) & 1);
    if (turns) turn_wait(cg), turn_pass(cg);
    release_slot<MC>(empty + 8 * (it % slots));
  }
}
// Shared memory: the ring (SLOTS slots), full[SLOTS] and empty[SLOTS] barriers, the scale ring
// (SLOTS x ring_scales f32), the tile scan's scratch (16 ints) and the tile map; STAGED: then,
// from the next 1024 bytes, the staging buffer (2 consumers x stage_halves x 16 KB; store_tile_staged).
// MC: a cluster of two CTAs (the entry's __cluster_dims__) on pairs of n-tiles (TileWalk), the
// token rows multicast; a slot is refilled once both CTAs' consumers have released it.
// QUANT: the quantizing epilogue (store_tile_quant), clustered SwiGLU builds only.
template <int EPI, bool GATHER, int SLOTS, int TN, int PF, bool STAGED = false, bool MC = false, bool QUANT = false>
__device__ __forceinline__ void grouped_gemm_fp8(const TensorMap* ta16, const TensorMap* tb, const Fp8Args& g) {
  static_assert(!(GATHER && tall<TN>()), "the gather build has 4-box tiles");
  static_assert(!QUANT || (MC && !STAGED && EPI == kSwigluBf16), "the quantizing epilogue is the clustered SwiGLU build's");
  static_assert(!MC || (tall<TN>() && PF == 0), "the multicast builds are tall, without prefetch");
  static_assert(!STAGED || tall<TN>(), "the staged epilogue is the tall builds'");
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023) & ~1023u;
  const uint32_t ring = base, full = base + SLOTS * slot_bytes<TN>(), empty = full + 8 * SLOTS;
  float* scales = reinterpret_cast<float*>(smem_raw + (base - raw) + SLOTS * slot_bytes<TN>() + 16 * SLOTS);
  int* ints = reinterpret_cast<int*>(scales + SLOTS * ring_scales<TN>());
  const int n_experts = (int)g.EL;
  const int n_tiles = n_tiles_of<EPI, tile_bn<EPI, TN>()>(g.N);
  if (threadIdx.x == 0) {
    for (int i = 0; i < SLOTS; ++i) {
      mbar_init(full + 8 * i, GATHER ? 1 + 2 * 32 * F_GATHER_WARPS : 1 + 32);
      // One arrival per consumer thread (2 warpgroups); MC: and one per consumer warp of the peer.
      mbar_init(empty + 8 * i, MC ? 256 + 8 : 256);
    }
    if constexpr (QUANT) {
      const QuantSmem q = quant_smem<TN, SLOTS>(scales, g.EL);
      for (int c = 0; c < 2; ++c) {
        mbar_init(q.xfull + 8 * c, 256);
        mbar_init(q.xfree + 8 * c, 128);
      }
    }
    asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;\n" ::: "memory");
  }
  TileMap map = build_tile_map<F_THREADS, TN>(g.offsets, g.R, n_experts, n_tiles, ints + 16, ints);  // syncs
  // Once the map is built its scan's scratch (ints[0..15]) holds the tiles the tall builds'
  // producer publishes, an int4 a slot (SLOTS <= 4 there).
  static_assert(!tall<TN>() || SLOTS <= 4, "the published tiles take ints[0..15]");
  int4* tiles = reinterpret_cast<int4*>(ints);
  if constexpr (MC) cluster_sync();  // the peer's barriers are initialised before anything reaches them
  const int total = map.first[n_experts];
  const int k_tiles = (int)((g.K + 127) / 128);
  // The warpgroup index through a shuffle from lane 0: ptxas then knows it is warp-uniform and
  // keeps the consumers' slot addresses and wgmma descriptors in uniform registers instead of
  // rebuilding them per thread (3-4% of the SwiGLU GEMM's time, 2-3% of the down GEMM's at 128
  // rows an expert, H200, bench/probes/fp8_kernel_rate.cu).
  const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x >> 7, 0);
  if (wg == 0) {
    // Register split (128 x producer + 256 x consumer <= the 64512 the launch holds): the
    // gathering lanes keep their rows' token indices in registers (56 / 224); a tall build's
    // scaler warps keep eight token scales in flight (48 / 224); else 40 / 232.
    if (GATHER) asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n");
    else if (tall<TN>()) asm volatile("setmaxnreg.dec.sync.aligned.u32 48;\n");
    else asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (threadIdx.x == 0) {
      if (!GATHER) asm volatile("prefetch.tensormap [%0];\n" ::"l"(ta16) : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(tb) : "memory");
    }
    produce<EPI, GATHER, SLOTS, TN, PF, MC>(ta16, tb, g, map, total, k_tiles, ring, full, empty, scales, tiles);
    if constexpr (MC) cluster_sync();  // no CTA leaves while its peer's copies or arrivals may reach it
    return;
  }
  if (GATHER || tall<TN>()) asm volatile("setmaxnreg.inc.sync.aligned.u32 224;\n");
  else asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
  const int cg = wg - 1;
  uint32_t it = 0, xphase = 0;
  if (tall<TN>() && cg == 1) turn_pass(cg);  // consumer 0 issues first
  const TileWalk<TN, MC> walk(total);
  for (int wi = walk.first; wi < walk.count; wi += walk.step) {
    Tile t;
    if constexpr (tall<TN>()) {  // the producer published it with the tile's first k-step
      wait_full<GATHER>(full, it, SLOTS);
      const int4 d = tiles[it % SLOTS];
      t.expert = d.x, t.n_tile = d.y, t.row0 = d.z, t.row_end = d.w;
    } else {
      t = walk.tile(map, wi);
    }
    const int rows = min(t.row_end - t.row0, TN);
    // Tall tiles: consumer 0 takes the first half of the rows rounded up to 16 (at most 128),
    // consumer 1 the rest (none for tiles of up to 16 rows).
    int off = 0, mine = rows;
    if constexpr (tall<TN>()) {
      const int half = min(128, ((rows + 31) >> 5) << 4);
      off = cg ? half : 0;
      mine = cg ? max(rows - half, 0) : min(rows, half);
    }
    const ConsumerView<EPI, TN> v(g, t, off, mine, cg);
    const bool turns = tall<TN>() && rows <= kTurnRows;  // the same in both consumers
    switch ((mine + 15) >> 4) {
      case 0: consume_idle<MC>(k_tiles, it, SLOTS, full, empty, cg, turns); break;
#define HC_FP8_CASE(K16)                                                                                 \
  case K16:                                                                                             \
    if constexpr (16 * K16 <= (TN < 128 ? TN : 128))                                                    \
      consume_tile<EPI, 16 * K16, SLOTS, TN, GATHER, STAGED, MC, QUANT>(g, t, v, k_tiles, it, ring, full,  \
                                                                        empty, scales, xphase, turns);    \
    break;
      HC_FP8_CASE(1) HC_FP8_CASE(2) HC_FP8_CASE(3) HC_FP8_CASE(4) HC_FP8_CASE(5) HC_FP8_CASE(6) HC_FP8_CASE(7)
      HC_FP8_CASE(8)
#undef HC_FP8_CASE
      default: break;
    }
  }
  if (tall<TN>() && cg == 0) turn_wait(cg);  // consumer 1's last pass (every barrier phase completes)
  // The last tile's tensor stores must have written `out` (and read the staging rows) before the
  // CTA ends.
  if constexpr (STAGED) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
  if constexpr (MC) cluster_sync();
}

}  // namespace
}  // namespace hc

namespace hc {
namespace {
// The vector forms of moe_quantize_fp8, V consecutive values a lane: V = 16 (K % 16 == 0, x and
// q 16-byte aligned: 8 lanes a group, two 16-byte loads and one 16-byte store a lane) or V = 8
// (K % 8 == 0, x 16-byte and q 8-byte aligned: half a warp a group, one 16-byte load and one
// 8-byte store). A warp takes 32 / (128 / V) groups an iteration; the amax by shuffles within a
// group's lanes; lanes past a short last group hold zeros and store nothing. The same operations
// per value as the scalar form. On the H200 V = 16 was 16-22% faster than V = 8 at the layer's
// shapes (docs/PERFORMANCE.md, 2026-11-30 fourth session).
template <int V>
__device__ __forceinline__ void quantize_groups_vec(const unsigned short* x, unsigned char* q, float* scale, long long R,
                                                    long long K) {
  constexpr int LANES = 128 / V, GROUPS = 32 / LANES;  // lanes a group, groups a warp
  const long long KG = (K + 127) / 128, groups = R * KG;
  const int m = threadIdx.x & (LANES - 1);
  const long long warps = (long long)gridDim.x * (blockDim.x >> 5);
  // Every lane of a warp runs the same iterations (the shuffles).
  for (long long p = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; GROUPS * p < groups; p += warps) {
    const long long w = GROUPS * p + ((threadIdx.x & 31) / LANES);
    const bool live = w < groups;
    const long long r = live ? w / KG : 0, k = live ? (w % KG) * 128 + V * m : K;
    uint4 raw[V / 8];
#pragma unroll
    for (int h = 0; h < V / 8; ++h)
      raw[h] = k < K ? __ldg(reinterpret_cast<const uint4*>(x + r * K + k) + h) : make_uint4(0, 0, 0, 0);
    const LaneQuant<V> lq = quantize_lane<V>(raw);
    if (k < K) {
      if constexpr (V == 16)
        *reinterpret_cast<uint4*>(q + r * K + k) = make_uint4(lq.bytes[0], lq.bytes[1], lq.bytes[2], lq.bytes[3]);
      else
        *reinterpret_cast<uint2*>(q + r * K + k) = make_uint2(lq.bytes[0], lq.bytes[1]);
    }
    if (live && m == 0) scale[w] = lq.s;
  }
}
}  // namespace
}  // namespace hc

// moe_quantize_fp8: a warp per (row, 128-group); lane l holds elements l, l + 32, l + 64, l + 96
// (the vector forms above where K % 16 or K % 8 == 0 and the rows are aligned).
// scale = amax / 448 and q = e4m3(x / scale) with IEEE fp32 divisions (nvcc's default
// -prec-div=true), so the result matches the reference bit for bit.
extern "C" __global__ void __launch_bounds__(256) hc_moe_quantize_fp8(const unsigned short* x, unsigned char* q,
                                                                      float* scale, long long R, long long K) {
  if ((K & 15) == 0 && (((unsigned long long)x | (unsigned long long)q) & 15) == 0) {
    hc::quantize_groups_vec<16>(x, q, scale, R, K);
    return;
  }
  if ((K & 7) == 0 && (((unsigned long long)x & 15) | ((unsigned long long)q & 7)) == 0) {
    hc::quantize_groups_vec<8>(x, q, scale, R, K);
    return;
  }
  const long long KG = (K + 127) / 128, groups = R * KG;
  const int lane = threadIdx.x & 31;
  const long long warps = (long long)gridDim.x * (blockDim.x >> 5);
  for (long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; w < groups; w += warps) {
    const long long r = w / KG, k0 = (w % KG) * 128;
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const long long k = k0 + lane + 32 * i;
      v[i] = k < K ? __uint_as_float((unsigned)x[r * K + k] << 16) : 0.f;
    }
    const float s = hc::group_scale<32>(hc::lane_amax(v));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const long long k = k0 + lane + 32 * i;
      if (k < K) q[r * K + k] = hc::quantize1(v[i], s);
    }
    if (lane == 0) scale[w] = s;
  }
}

// The builds: SLOTS slots of TN-token tiles. *_sm90swapw: 4 x 64 (164 KB of shared memory),
// *_sm90swapw5: 5 x 64 (more weight bytes in flight), *_sm90wide: 4 x 128 (197 KB);
// *_sm90tall: 4 x 256 tokens x 2 weight boxes (203 KB), the consumers splitting the tokens (no
// gather form);
// *_sm90tallpf: sm90tall with the weights of 4 more k-steps prefetched into L2;
// *_sm90talls: sm90tall with 3 slots and the staged epilogue (tensor stores of the output rows);
// *_sm90tallmc, *_sm90tallsmc: sm90tall and sm90talls in clusters of 2 CTAs on neighbouring
// n-tiles of one expert, each copying half of the token rows into both (TMA multicast).
#define HC_FP8_ENTRY(NAME, EPI, SLOTS, TN, PF, STAGED, MC, ATTRS)                                            \
  extern "C" __global__ void ATTRS __launch_bounds__(hc::F_THREADS, 1)                                       \
      NAME(const __grid_constant__ hc::TensorMap ta16, const __grid_constant__ hc::TensorMap tb,              \
           const float* a_scale, const float* w_scale, const int* offsets, unsigned short* out, long long R,   \
           long long K, long long N, long long EL) {                                                          \
    static_assert(!(STAGED), "the staged builds take a map of out: HC_FP8_STAGED_ENTRY");                   \
    hc::grouped_gemm_fp8<EPI, false, SLOTS, TN, PF, STAGED, MC>(                                            \
        &ta16, &tb, {a_scale, w_scale, offsets, out, R, K, N, EL, nullptr, nullptr, 1, 0, nullptr});          \
  }
// The staged builds (store_tile_staged): `tout` maps `out` in boxes of 64 outputs x 16 rows.
#define HC_FP8_STAGED_ENTRY(NAME, EPI, MC, ATTRS) HC_FP8_STAGED_ENTRY_T(NAME, EPI, 3, 256, MC, ATTRS)
#define HC_FP8_STAGED_ENTRY_T(NAME, EPI, SLOTS, TN, MC, ATTRS)                                                  \
  extern "C" __global__ void ATTRS __launch_bounds__(hc::F_THREADS, 1)                                          \
      NAME(const __grid_constant__ hc::TensorMap ta16, const __grid_constant__ hc::TensorMap tb,                 \
           const __grid_constant__ hc::TensorMap tout, const float* a_scale, const float* w_scale,                \
           const int* offsets, unsigned short* out, long long R, long long K, long long N, long long EL) {        \
    hc::grouped_gemm_fp8<EPI, false, SLOTS, TN, 0, true, MC>(                                                     \
        &ta16, &tb, {a_scale, w_scale, offsets, out, R, K, N, EL, nullptr, nullptr, 1, 0, nullptr, &tout});        \
  }
// The gather build: token rows x[row_to_slot[r] / topk] copied by the producer warps.
#define HC_FP8_GATHER_ENTRY(NAME, SLOTS, TN)                                                                    \
  extern "C" __global__ void __launch_bounds__(hc::F_THREADS, 1)                                              \
      NAME(const __grid_constant__ hc::TensorMap tb, const unsigned char* x, const float* x_scale,             \
           const float* w_scale, const int* row_to_slot, const int* offsets, unsigned short* out, long long R,  \
           long long K, long long N, long long EL, long long topk, long long T) {                              \
    hc::grouped_gemm_fp8<hc::kSwigluBf16, true, SLOTS, TN, 0>(                                            \
        nullptr, &tb, {x_scale, w_scale, offsets, out, R, K, N, EL, x, row_to_slot, (int)topk, (int)T, nullptr}); \
  }
// The quantizing build (moe_grouped_gemm_fp8_swiglu_quant): sm90tallmc writing e4m3 q [R, N] and
// q_scale [R, N / 128] (store_tile_quant).
#define HC_FP8_QUANT_ENTRY(NAME, SLOTS)                                                                        \
  extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(hc::F_THREADS, 1)                      \
      NAME(const __grid_constant__ hc::TensorMap ta16, const __grid_constant__ hc::TensorMap tb,               \
           const float* a_scale, const float* w_scale, const int* offsets, unsigned char* q, float* q_scale,    \
           long long R, long long K, long long N, long long EL) {                                              \
    hc::grouped_gemm_fp8<hc::kSwigluBf16, false, SLOTS, 256, 0, false, true, true>(                           \
        &ta16, &tb,                                                                                             \
        {a_scale, w_scale, offsets, reinterpret_cast<unsigned short*>(q), R, K, N, EL, nullptr, nullptr, 1, 0,  \
         q_scale});                                                                                             \
  }
#define HC_NO_CLUSTER
#define HC_CLUSTER_2 __cluster_dims__(2, 1, 1)
#define HC_FP8_BUILD(SUFFIX, SLOTS, TN, PF, STAGED, MC, ATTRS)                                       \
  HC_FP8_ENTRY(hc_moe_gemm_fp8_swiglu_##SUFFIX, hc::kSwigluBf16, SLOTS, TN, PF, STAGED, MC, ATTRS) \
  HC_FP8_ENTRY(hc_moe_gemm_fp8_##SUFFIX, hc::kStoreBf16, SLOTS, TN, PF, STAGED, MC, ATTRS)
// (bench/probes/fp8_kernel_rate.cu includes this file with HC_FP8_PROBE defined and instantiates
// only the builds it times.)
#ifndef HC_FP8_PROBE
HC_FP8_BUILD(sm90swapw, 4, 64, 0, false, false, HC_NO_CLUSTER)
HC_FP8_BUILD(sm90swapw5, 5, 64, 0, false, false, HC_NO_CLUSTER)
HC_FP8_BUILD(sm90wide, 4, 128, 0, false, false, HC_NO_CLUSTER)
HC_FP8_BUILD(sm90tall, 4, 256, 0, false, false, HC_NO_CLUSTER)
HC_FP8_BUILD(sm90tallpf, 4, 256, 4, false, false, HC_NO_CLUSTER)
HC_FP8_STAGED_ENTRY(hc_moe_gemm_fp8_swiglu_sm90talls, hc::kSwigluBf16, false, HC_NO_CLUSTER)
HC_FP8_STAGED_ENTRY(hc_moe_gemm_fp8_sm90talls, hc::kStoreBf16, false, HC_NO_CLUSTER)
HC_FP8_BUILD(sm90tallmc, 4, 256, 0, false, true, HC_CLUSTER_2)
HC_FP8_STAGED_ENTRY(hc_moe_gemm_fp8_swiglu_sm90tallsmc, hc::kSwigluBf16, true, HC_CLUSTER_2)
HC_FP8_STAGED_ENTRY(hc_moe_gemm_fp8_sm90tallsmc, hc::kStoreBf16, true, HC_CLUSTER_2)
HC_FP8_QUANT_ENTRY(hc_moe_gemm_fp8_swiglu_quant_sm90tallmc, 4)
HC_FP8_GATHER_ENTRY(hc_moe_gemm_fp8_swiglu_gather_sm90swapw, 4, 64)
HC_FP8_GATHER_ENTRY(hc_moe_gemm_fp8_swiglu_gather_sm90swapw5, 5, 64)
HC_FP8_GATHER_ENTRY(hc_moe_gemm_fp8_swiglu_gather_sm90wide, 4, 128)
#endif  // HC_FP8_PROBE
