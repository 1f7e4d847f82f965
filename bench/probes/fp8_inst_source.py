#!/usr/bin/env python3
"""Writes an instrumented copy of kernels/ptx/moe/gemm_sm90_fp8.cu for `fp8_kernel_rate inst`.

The copy times, with %clock64, the parts of the tall SwiGLU kernel's loops (issue 19: where do a
k-step's cycles go?) and writes them with plain stores (no loads on the timed paths):
  g_tile[cta][consumer][tile][6]  tile start, k-loop end, epilogue end (cycles), and the tile's
                                  sums of full-slot waits, wgmmas (the two-box path: from the
                                  slot's arrival, its turn included, to their completion; the
                                  box-by-box path: issue to completion), promotion (first thread
                                  of each consumer warpgroup; register sums)
  g_prod[cta][4]                  the TMA thread's sum of free-slot waits, its k-steps, its start
                                  and end
  g_walk[cta][consumer][tile][2]  the consumer's walk: the clock before the tile's lookup (the
                                  wait for its first slot and the published tile) and after its
                                  ConsumerView
  g_epi[cta][consumer][5]         the staged epilogue's parts (sm90.talls), summed over the tiles:
                                  previous copies' wait + sync, stmatrix, fence + sync, copies;
                                  and the tile count
Scaler warps are not timed. Usage (then build as bench/probes/fp8_kernel_rate.cu says, with
-DHC_FP8_INST -DHC_FP8_SOURCE='"<out>"' and -I kernels/ptx/moe -I <out's folder>):
  python3 bench/probes/fp8_inst_source.py <out.cu>
Each edit asserts that the text it changes is still there, so a changed kernel fails loudly.
"""
import pathlib
import sys

SRC = pathlib.Path(__file__).resolve().parents[2] / "kernels/ptx/moe/gemm_sm90_fp8.cu"


def edit(s, old, new, first=False):
    """Replaces `old` (which must occur exactly once, or with first=True at least once: the first)."""
    n = s.count(old)
    assert n == 1 or (first and n >= 1), f"expected {'at least ' if first else ''}once in the kernel source:\n{old}"
    return s.replace(old, new, 1)


def main(out):
    s = SRC.read_text()
    s = edit(s, "\nnamespace hc {", """
// ---- instrumentation (bench/probes/fp8_inst_source.py) ----
constexpr int kInstTiles = 160;
__device__ unsigned long long g_tile[264][2][kInstTiles][6];
__device__ unsigned long long g_prod[264][4];
__device__ __forceinline__ unsigned long long clk() {
  unsigned long long c;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(c)::"memory");
  return c;
}
namespace hc {""", first=True)
    s = edit(s, """  constexpr bool BOTH = TN <= 64 || (tall<TN>() && NT <= 80);
  for (int kt = 0; kt < k_tiles; ++kt, ++it) {
    float sw[2][2] = {{1.f, 1.f}, {1.f, 1.f}};  // tall tiles: in the ring's products already
    if constexpr (!tall<TN>()) v.weight_scales(g, kt, sw);
    const uint32_t s = it % SLOTS;
    wait_full<GATHER>(full, it, SLOTS);
""", """  constexpr bool BOTH = TN <= 64 || (tall<TN>() && NT <= 80);
  const int tile_no = (int)(it / (uint32_t)k_tiles);
  uint32_t c_wait = 0, c_mma = 0, c_prom = 0;
  const unsigned long long ta = clk();
  for (int kt = 0; kt < k_tiles; ++kt, ++it) {
    float sw[2][2] = {{1.f, 1.f}, {1.f, 1.f}};  // tall tiles: in the ring's products already
    if constexpr (!tall<TN>()) v.weight_scales(g, kt, sw);
    const uint32_t s = it % SLOTS;
    const unsigned long long k0 = clk();
    wait_full<GATHER>(full, it, SLOTS);
    const unsigned long long k1 = clk();
    c_wait += (uint32_t)(k1 - k0);
""")
    s = edit(s, """        promote<NT>(d0, t0, s0, 1.f, 1.f);
        promote<NT>(d1, t1, s1, 1.f, 1.f);""", """        const unsigned long long k2 = clk();
        c_mma += (uint32_t)(k2 - k1);
        promote<NT>(d0, t0, s0, 1.f, 1.f);
        promote<NT>(d1, t1, s1, 1.f, 1.f);
        fence_n<NA>(d0);
        fence_n<NA>(d1);
        c_prom += (uint32_t)(clk() - k2);""")
    s = edit(s, """        wgmma_fence();
        v.template mma<NT>(tt, sa_addr, b);""", """        const unsigned long long u0 = clk();
        wgmma_fence();
        v.template mma<NT>(tt, sa_addr, b);""")
    s = edit(s, """        wgmma_wait<0>();
        fence_n<NA>(tt);
        promote_box(b ? d1 : d0, tt, b);""", """        wgmma_wait<0>();
        fence_n<NA>(tt);
        const unsigned long long u1 = clk();
        c_mma += (uint32_t)(u1 - u0);
        promote_box(b ? d1 : d0, tt, b);
        fence_n<NA>(b ? d1 : d0);
        c_prom += (uint32_t)(clk() - u1);""")
    s = edit(s, """    release_slot<MC>(empty + 8 * s);
  }
  if constexpr (QUANT)""", """    release_slot<MC>(empty + 8 * s);
  }
  const unsigned long long te = clk();
  if constexpr (QUANT)""")
    s = edit(s, """  else store_tile<EPI, NT, TN>(g, t, t.row0 + v.off, v.rows, d0, d1, v.cg);
}""", """  else store_tile<EPI, NT, TN>(g, t, t.row0 + v.off, v.rows, d0, d1, v.cg);
  const unsigned long long tz = clk();
  if ((threadIdx.x & 127) == 0 && tile_no < kInstTiles) {
    unsigned long long* r = g_tile[blockIdx.x][v.cg][tile_no];
    r[0] = ta, r[1] = te, r[2] = tz, r[3] = c_wait, r[4] = c_mma, r[5] = c_prom;
  }
}""")
    s = edit(s, """  uint32_t it = 0;
  const TileWalk<TN, MC> walk(total);
  const uint32_t rank = MC ? cluster_rank() : 0u;""", """  uint32_t it = 0;
  const TileWalk<TN, MC> walk(total);
  const uint32_t rank = MC ? cluster_rank() : 0u;
  unsigned long long p_wait = 0;
  const unsigned long long p_start = clk();""")
    s = edit(s, """      const uint32_t s = it % SLOTS, bar = full + 8 * s;
      if (it >= SLOTS) mbar_wait(empty + 8 * s, ((it / SLOTS) - 1) & 1);""", """      const uint32_t s = it % SLOTS, bar = full + 8 * s;
      const unsigned long long p0 = clk();
      if (it >= SLOTS) mbar_wait(empty + 8 * s, ((it / SLOTS) - 1) & 1);
      p_wait += clk() - p0;""")
    # The producer's walk ends with the closing braces of its two loops, then the function's.
    s = edit(s, """        asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\\n" ::"r"(bar) : "memory");
        mbar_arrive(bar);  // the scales written above
      }
    }
  }
}""", """        asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\\n" ::"r"(bar) : "memory");
        mbar_arrive(bar);  // the scales written above
      }
    }
  }
  if (threadIdx.x == 0) {
    unsigned long long* r = g_prod[blockIdx.x];
    r[0] = p_wait, r[1] = it, r[2] = p_start, r[3] = clk();
  }
}""")
    s = edit(s, """__device__ unsigned long long g_prod[264][4];""", """__device__ unsigned long long g_prod[264][4];
__device__ unsigned long long g_walk[264][2][kInstTiles][2];
__device__ unsigned long long g_epi[264][2][5];""")
    # The staged epilogue's parts (sm90.talls), summed over a consumer's tiles with reductions
    # (no loads): the wait for its previous stores and the first sync, the stmatrix stores, the
    # fence and second sync, the tensor stores' issue and the last rows' plain stores; [4] counts
    # the tiles.
    s = edit(s, """  asm volatile("cp.async.bulk.wait_group.read 0;\\n" ::: "memory");  // a no-op in threads that issued none
  consumer_sync(cg);""", """  const unsigned long long e0 = clk();
  asm volatile("cp.async.bulk.wait_group.read 0;\\n" ::: "memory");
  consumer_sync(cg);
  const unsigned long long e1 = clk();""")
    s = edit(s, """  asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");  // the writes, visible to the tensor stores
  consumer_sync(cg);""", """  const unsigned long long e2 = clk();
  asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");  // the writes, visible to the tensor stores
  consumer_sync(cg);
  const unsigned long long e3 = clk();""")
    s = edit(s, """      *reinterpret_cast<uint4*>(g.out + (long long)(row0 + r) * g.N + col) = v;
    }
  }
}""", """      *reinterpret_cast<uint4*>(g.out + (long long)(row0 + r) * g.N + col) = v;
    }
  }
  const unsigned long long e4 = clk();
  if ((threadIdx.x & 127) == 0) {
    unsigned long long* r = g_epi[blockIdx.x][cg];
    atomicAdd(r, e1 - e0), atomicAdd(r + 1, e2 - e1), atomicAdd(r + 2, e3 - e2), atomicAdd(r + 3, e4 - e3);
    atomicAdd(r + 4, 1ull);
  }
}""")
    s = edit(s, """    Tile t;
    if constexpr (tall<TN>()) {  // the producer published it""", """    const unsigned long long w0 = clk();
    Tile t;
    if constexpr (tall<TN>()) {  // the producer published it""")
    s = edit(s, """    const bool turns = tall<TN>() && rows <= kTurnRows;  // the same in both consumers""",
             """    const bool turns = tall<TN>() && rows <= kTurnRows;  // the same in both consumers
    const unsigned long long w1 = clk();
    if ((threadIdx.x & 127) == 0 && it / (uint32_t)k_tiles < (uint32_t)kInstTiles)
      g_walk[blockIdx.x][cg][it / (uint32_t)k_tiles][0] = w0, g_walk[blockIdx.x][cg][it / (uint32_t)k_tiles][1] = w1;""")
    pathlib.Path(out).write_text(s)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: fp8_inst_source.py <out.cu>")
    main(sys.argv[1])
