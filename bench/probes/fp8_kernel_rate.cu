// fp8_kernel_rate: the real FP8 tall GEMM kernel (kernels/ptx/moe/gemm_sm90_fp8.cu, the SwiGLU
// GEMM of sm90.tall and sm90.tallmc) in a probe's harness, on synthetic experts whose row counts
// the probe chooses, beside the structure probe (wgmma_fp8_rate.cu): issue 19 asks why the
// kernel streams its weights at ~60% of the copy rate at 4096 tokens while the probe's ring,
// fed by tensor maps in the kernel's layout with its promotion and scaler warps, reaches ~92%
// (docs/PERFORMANCE.md, 2026-11-30). Here the kernel runs with every expert at the same row
// count (128: the bench's 4096-token mean; 256: full tiles) and with a spread like the bench's
// (68-188 rows, mean 128), without the rest of the layer (no routing, no other kernels before
// it), 128 experts x I = 2048 x H = 7168 (3.76 GB of e4m3 weights). Each: 1 warm-up and 10
// timed launches (events), the median; the weights' GB/s against the copy rate. Modes (first
// argument): none (tall / tallmc at 128, spread and 256 rows, then a K sweep), `quant` (the
// quantizing SwiGLU build against sm90.tallmc + moe_quantize_fp8), `down` (the down
// GEMM's sm90.talls at 128 rows, the spread, layer-like and 8192-like rows, each output's
// checksum printed; beside it 160-token tiles where the source has HC_FP8_STAGED_ENTRY_T),
// `t160` (the SwiGLU GEMM's sm90.tall beside 160-token tiles, the same way), `mc` (the SwiGLU
// GEMM's sm90.tallmc, the registry's build, on those four row sets), `quantize` (moe_quantize_fp8 at the layer's three shapes), `sustain` (3 s
// back to back: the rate under the power cap), `prefetch`,
// `tall128` (with -DHC_FP8_TALL128 and a source copy whose tall tiles take 128 tokens), `tall5`
// (with -DHC_FP8_TALL5 and a copy whose published tiles allow 5 slots), `inst`
// (with -DHC_FP8_INST and a source copy that times its loops' parts into g_inst).
//
// Not part of the library: a standalone CUDA runtime program, built on the GPU machine (or
// anywhere with the toolkit, then carried) with
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a bench/probes/fp8_kernel_rate.cu -o fp8_kernel_rate -lcuda
#define HC_FP8_PROBE
// HC_FP8_SOURCE: another copy of the kernel source to time (a variant under study; build with
// -I kernels/ptx/moe so that its includes resolve).
#ifndef HC_FP8_SOURCE
#define HC_FP8_SOURCE "../../kernels/ptx/moe/gemm_sm90_fp8.cu"
#endif
#include HC_FP8_SOURCE

#include "probe_check.cuh"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

HC_FP8_ENTRY(probe_swiglu_tall, hc::kSwigluBf16, 4, 256, 0, false, false, HC_NO_CLUSTER)
// The down GEMM as the registry takes it at 96+ rows an expert (sm90.talls: 3 slots, staged epilogue).
#ifdef HC_FP8_STAGED_ENTRY  // sources from 2026-12-01 on: the staged builds take a map of `out`
HC_FP8_STAGED_ENTRY(probe_down_talls, hc::kStoreBf16, false, HC_NO_CLUSTER)
#else
HC_FP8_ENTRY(probe_down_talls, hc::kStoreBf16, 3, 256, 0, true, false, HC_NO_CLUSTER)
#endif
#ifdef HC_FP8_STAGED_ENTRY_T  // sources that take the staged builds' slots and tile tokens
// The down GEMM in tiles of up to 160 tokens (4 slots): every tile's consumers take turns and
// issue both boxes at once; experts over 160 rows split evenly into two tiles (`down`).
HC_FP8_STAGED_ENTRY_T(probe_down_t160, hc::kStoreBf16, 4, 160, false, HC_NO_CLUSTER)
HC_FP8_ENTRY(probe_swiglu_t160, hc::kSwigluBf16, 4, 160, 0, false, false, HC_NO_CLUSTER)  // `t160`
#endif
HC_FP8_ENTRY(probe_swiglu_tallmc, hc::kSwigluBf16, 4, 256, 0, false, true, HC_CLUSTER_2)
// The quantizing build (moe_grouped_gemm_fp8_swiglu_quant's sm90.tallmc; `./fp8_kernel_rate quant`).
HC_FP8_QUANT_ENTRY(probe_swiglu_tallmcq, 4)
// sm90.tallpf (the weight boxes of k-step kt + 4 prefetched into L2 when kt is issued) and deeper
// prefetches: whether L2 can hold what the 4-slot ring cannot across a tile's epilogue.
HC_FP8_ENTRY(probe_swiglu_tallpf4, hc::kSwigluBf16, 4, 256, 4, false, false, HC_NO_CLUSTER)
HC_FP8_ENTRY(probe_swiglu_tallpf8, hc::kSwigluBf16, 4, 256, 8, false, false, HC_NO_CLUSTER)
HC_FP8_ENTRY(probe_swiglu_tallpf16, hc::kSwigluBf16, 4, 256, 16, false, false, HC_NO_CLUSTER)
#ifdef HC_FP8_TALL5
// With a source copy whose published tiles take 20 scratch ints (ints + 20 for the tile map, and
// SLOTS <= 5 allowed): tall tiles of up to 192 tokens in 5 slots of 40 KB, a ring a fifth deeper
// than sm90.tall's 4 x 48 KB in about the same shared memory (`./fp8_kernel_rate tall5`).
HC_FP8_ENTRY(probe_swiglu_t192s5, hc::kSwigluBf16, 5, 192, 0, false, false, HC_NO_CLUSTER)
HC_FP8_ENTRY(probe_swiglu_t192s4, hc::kSwigluBf16, 4, 192, 0, false, false, HC_NO_CLUSTER)
#endif
#ifdef HC_FP8_TALL128
// With a source copy whose tall() also takes TN = 128: tall tiles of up to 128 tokens, whose
// 32 KB slots let the producer run 6 k-steps ahead instead of 4 (`./fp8_kernel_rate tall128`).
HC_FP8_ENTRY(probe_swiglu_t128s4, hc::kSwigluBf16, 4, 128, 0, false, false, HC_NO_CLUSTER)
HC_FP8_ENTRY(probe_swiglu_t128s6, hc::kSwigluBf16, 6, 128, 0, false, false, HC_NO_CLUSTER)
#endif

namespace {


constexpr long long kI = 2048, kBytes = 128ll * 2 * kI * 7168;  // the weights: 128 experts x 4096 x 7168 at most
using Entry = void (*)(hc::TensorMap, hc::TensorMap, const float*, const float*, const int*, unsigned short*, long long,
                       long long, long long, long long);
// A staged build's entry (sources from 2026-12-01 on): a map of `out` after the operands'.
using StagedEntry = void (*)(hc::TensorMap, hc::TensorMap, hc::TensorMap, const float*, const float*, const int*,
                             unsigned short*, long long, long long, long long, long long);

// A tall build's shared memory (ops/ptx/moe_fp8_ops.cpp, fp8_shared): `slots` slots of `tn`
// token rows + 2 weight boxes, their barriers and scale rings, the tile map of EL experts; a
// staged build (sm90.talls) then the staging rows of `outs` outputs.
int g_scratch = 16;  // the scratch ints before the tile map (tall5 mode: 20)
// (Staged: enough for either staging layout, the padded rows of sources before 2026-12-01 or the
// swizzled halves after.)
int shared_of(long long EL, int tn = 256, int slots = 4, bool staged = false, int outs = 64) {
  const int base = 1024 + slots * (tn * 128 + 2 * 64 * 128 + 16 + 2 * tn * 4) + int(g_scratch + 2 * (EL + 1)) * 4;
  if (!staged) return base;
  return std::max((base + 127) / 128 * 128 + 256 * (outs * 2 + 16), (base + 1023) / 1024 * 1024 + 2 * (outs / 64) * 16384);
}
int g_tn = 256, g_slots = 4;  // the SwiGLU build's tile tokens and slots (tall128 mode sets them)

// The GEMM a timing launches: SwiGLU (K = H, N = I outputs, 2I weight rows) or down (K = I,
// N = H outputs and weight rows), and the build's shared-memory layout.
struct Shape {
  long long K, N, NW;
  int tn, slots;
  bool staged;
};
Shape swiglu_shape(long long kH) { return {kH, kI, 2 * kI, g_tn, g_slots, false}; }

// The median of `launches` launches (1 warm-up) of the GEMM over rows.size() experts (the weights' first
// EL x NW x K bytes), in ms.
template <typename EntryT>
double time_gemm(EntryT k, const Shape& sh, const std::vector<int>& rows, unsigned char* w, float* w_scale, unsigned char* a,
                 float* a_scale, unsigned short* out, int* offsets, int launches = 10) {
  const long long kEL = (long long)rows.size();
  const bool swiglu = sh.NW != sh.N;
  const int kShared = shared_of(kEL, sh.tn, sh.slots, sh.staged, swiglu ? 64 : 128);
  std::vector<int> off{0};
  for (int r : rows) off.push_back(off.back() + r);
  const long long R = off.back();
  CK(cudaMemcpy(offsets, off.data(), off.size() * sizeof(int), cudaMemcpyHostToDevice));
  hc::TensorMap ta, tb;
  const CUtensorMap ma = e4m3_map(a, {cuuint64_t(sh.K), cuuint64_t(R)}, 16),
                    mb = e4m3_map(w, {cuuint64_t(sh.K), cuuint64_t(sh.NW), cuuint64_t(kEL)}, 64);
  std::memcpy(&ta, &ma, sizeof ta);
  std::memcpy(&tb, &mb, sizeof tb);
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kShared));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const unsigned grid = unsigned(sms) & ~1u;  // whole clusters for the clustered build
  if constexpr (std::is_same_v<EntryT, StagedEntry>) {
    hc::TensorMap to;
    const CUtensorMap mo = bf16_out_map(out, cuuint64_t(sh.N), cuuint64_t(R));
    std::memcpy(&to, &mo, sizeof to);
    return median_ms(
        [&] { k<<<grid, hc::F_THREADS, kShared>>>(ta, tb, to, a_scale, w_scale, offsets, out, R, sh.K, sh.N, kEL); },
        launches);
  } else {
    return median_ms(
        [&] { k<<<grid, hc::F_THREADS, kShared>>>(ta, tb, a_scale, w_scale, offsets, out, R, sh.K, sh.N, kEL); }, launches);
  }
}
// time_gemm, printed with the weights' rate against the copy rate.
template <typename EntryT>
double run(EntryT k, const char* name, const Shape& sh, const std::vector<int>& rows, unsigned char* w, float* w_scale,
           unsigned char* a, float* a_scale, unsigned short* out, int* offsets, double copy_gbs) {
  const long long kEL = (long long)rows.size();
  const double m = time_gemm(k, sh, rows, w, w_scale, a, a_scale, out, offsets);
  const double gbs = double(kEL) * sh.NW * sh.K / (m * 1e-3) / 1e9;
  const auto [lo, hi] = std::minmax_element(rows.begin(), rows.end());
  std::printf("  %-20s %3lld experts, K %5lld (%3lld k-steps a tile), rows %3d-%3d: %7.1f us, weights %5.0f GB/s = %3.0f%% "
              "of the copy rate\n", name, kEL, sh.K, sh.K / 128, *lo, *hi, m * 1e3, gbs, 100.0 * gbs / copy_gbs);
  return m;
}
// The SwiGLU GEMM of K = kH.
double run(Entry k, const char* name, long long kH, const std::vector<int>& rows, unsigned char* w, float* w_scale,
           unsigned char* a, float* a_scale, unsigned short* out, int* offsets, double copy_gbs) {
  return run(k, name, swiglu_shape(kH), rows, w, w_scale, a, a_scale, out, offsets, copy_gbs);
}

// The quantizing build over `rows`: e4m3 q [R, kI] and scales, the median of 10 launches, in ms.
double time_quant(const std::vector<int>& rows, unsigned char* w, float* w_scale, unsigned char* a, float* a_scale,
                  unsigned char* q, float* q_scale, int* offsets) {
  const long long kEL = (long long)rows.size(), K = 7168;
  const int kShared = (shared_of(kEL) + 127) / 128 * 128 + 256 * 64 + 2 * 2 * 128 * 4 + 32;
  std::vector<int> off{0};
  for (int r : rows) off.push_back(off.back() + r);
  const long long R = off.back();
  CK(cudaMemcpy(offsets, off.data(), off.size() * sizeof(int), cudaMemcpyHostToDevice));
  hc::TensorMap ta, tb;
  const CUtensorMap ma = e4m3_map(a, {cuuint64_t(K), cuuint64_t(R)}, 16),
                    mb = e4m3_map(w, {cuuint64_t(K), cuuint64_t(2 * kI), cuuint64_t(kEL)}, 64);
  std::memcpy(&ta, &ma, sizeof ta);
  std::memcpy(&tb, &mb, sizeof tb);
  CK(cudaFuncSetAttribute(probe_swiglu_tallmcq, cudaFuncAttributeMaxDynamicSharedMemorySize, kShared));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const unsigned grid = unsigned(sms) & ~1u;
  return median_ms([&] {
    probe_swiglu_tallmcq<<<grid, hc::F_THREADS, kShared>>>(ta, tb, a_scale, w_scale, offsets, q, q_scale, R, K, kI, kEL);
  }, 10);
}

// n experts with rows drawn about `mean` (a spread of sd, clamped to [lo, hi]) that total
// n x mean. layer_like_rows: 256 experts like the layer's at 4096 tokens (mean 128, 68-228;
// 32768 rows: the down GEMM's weights of 256 experts are the 3.76 GB the buffers hold);
// rows_8k: 128 like 8192 tokens' (mean 256, 160-352), so that experts over 256 rows split.
std::vector<int> spread_rows(int n, int mean, double sd, int lo, int hi) {
  std::vector<int> rows(n);
  unsigned lcg = 12345u;
  auto uni = [&] { return double((lcg = lcg * 1664525u + 1013904223u) >> 8) / double(1u << 24); };
  int total = 0;
  for (int& r : rows) {
    double z = -6;
    for (int i = 0; i < 12; ++i) z += uni();
    r = std::min(hi, std::max(lo, int(mean + sd * z + 0.5)));
    total += r;
  }
  for (int e = 0; total != n * mean; e = (e + 1) % n) {
    const int d = total < n * mean ? 1 : -1;
    if (rows[e] + d >= lo && rows[e] + d <= hi) rows[e] += d, total += d;
  }
  return rows;
}
std::vector<int> layer_like_rows() { return spread_rows(256, 128, 30, 68, 228); }
std::vector<int> rows_8k() { return spread_rows(128, 256, 40, 160, 352); }

// A position-weighted checksum of n bf16 words (sum of word_i * (2i + 1) mod 2^64): equal sums
// across builds and sources say the same bits (`down`).
__global__ void checksum_words(const unsigned short* x, long long n, unsigned long long* sum) {
  unsigned long long acc = 0;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    acc += (unsigned long long)x[i] * (unsigned long long)(2 * i + 1);
  atomicAdd(sum, acc);
}
unsigned long long checksum(const unsigned short* x, long long n) {
  unsigned long long* d = nullptr;
  CK(cudaMalloc(&d, 8));
  CK(cudaMemset(d, 0, 8));
  checksum_words<<<1024, 256>>>(x, n, d);
  unsigned long long h = 0;
  CK(cudaMemcpy(&h, d, 8, cudaMemcpyDeviceToHost));
  CK(cudaFree(d));
  return h;
}

// Random bf16 words given activation-like magnitudes: sign and mantissa kept, the exponent
// 120-127 (|x| in [2^-7, 2)). Random exponents would make many quotients x / s subnormal and
// send the IEEE division to its slow path, which real activations do not (2026-11-30: 2x slower).
__global__ void activation_like_bf16(unsigned short* x, long long n) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    x[i] = (unsigned short)((x[i] & 0x807fu) | ((0x78u + ((x[i] >> 7) & 7u)) << 7));
}

// moe_quantize_fp8 (hc_moe_quantize_fp8, launched as ops/ptx/moe_fp8_ops.cpp does) over R x K
// bf16 rows: time, rate against the copy rate, and an FNV-1a hash of q and the scales (equal
// hashes across builds of different sources: the same bits).
void run_quantize(long long R, long long K, unsigned short* x, unsigned char* q, float* scale, double copy_gbs) {
  const long long KG = (K + 127) / 128, groups = R * KG;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const unsigned blocks = unsigned(std::min<long long>((groups + 7) / 8, (long long)sms * 16));
  const double m = median_ms([&] { hc_moe_quantize_fp8<<<blocks, 256>>>(x, q, scale, R, K); }, 10);
  const double bytes = double(R) * K * 3 + double(groups) * 4;
  std::vector<unsigned char> hq(size_t(R * K));
  std::vector<float> hs(static_cast<size_t>(groups));
  CK(cudaMemcpy(hq.data(), q, hq.size(), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hs.data(), scale, hs.size() * 4, cudaMemcpyDeviceToHost));
  unsigned long long h = 1469598103934665603ull;
  auto mix = [&](const unsigned char* p, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  };
  mix(hq.data(), hq.size());
  mix(reinterpret_cast<const unsigned char*>(hs.data()), hs.size() * 4);
  std::printf("  quantize %6lld x %5lld: %7.1f us, %5.0f GB/s = %3.0f%% of the copy rate, hash %016llx\n", R, K, m * 1e3,
              bytes / (m * 1e-3) / 1e9, 100.0 * bytes / (m * 1e-3) / 1e9 / copy_gbs, h);
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IONBF, 0);
  const long long wbytes = kBytes, max_rows = 128 * 256;
  const RingBuffers buf(wbytes, max_rows * 7168 * 4);  // weights, a copy target, token rows (random e4m3)
  const double copy = copy_rate_gbs(buf.w2, buf.w, wbytes);
  std::printf("SwiGLU GEMMs over %.2f GB of e4m3 weights (I = %lld); copy rate %.0f GB/s (read + write)\n", wbytes / 1e9,
              kI, copy);
  float *w_scale, *a_scale;
  unsigned short* out;
  int* offsets;
  {
    // Enough scales for every shape below (EL x NB x KG and R x KG are at most these).
    std::vector<float> ws(size_t(kBytes / 128 / 128), 0.002f), as(size_t(max_rows * 4 * 56), 0.003f);
    CK(cudaMalloc(&w_scale, ws.size() * 4));
    CK(cudaMalloc(&a_scale, as.size() * 4));
    CK(cudaMemcpy(w_scale, ws.data(), ws.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(a_scale, as.data(), as.size() * 4, cudaMemcpyHostToDevice));
  }
  CK(cudaMalloc(&out, size_t(max_rows * 4 * kI) * 2));
  CK(cudaMalloc(&offsets, (512 + 1) * sizeof(int)));
  std::vector<int> spread(128);
  for (int e = 0; e < 128; ++e) spread[e] = 68 + (e * 53) % 121;  // 68-188, mean ~128
  const std::pair<Entry, const char*> tall{probe_swiglu_tall, "sm90.tall SwiGLU"},
      tallmc{probe_swiglu_tallmc, "sm90.tallmc SwiGLU"};
#ifdef HC_FP8_TALL5
  if (argc > 1 && std::string(argv[1]) == "tall5") {  // 256-token tiles in 4 slots against 192 in 5 (and 4)
    g_scratch = 20;
    for (int round = 0; round < 2; ++round)
      for (const std::vector<int>& rows : {std::vector<int>(128, 128), spread}) {
        g_tn = 256, g_slots = 4;
        run(tall.first, "tall, 4 x 48 KB", 7168, rows, buf.w, w_scale, buf.tok, a_scale, out, offsets, copy);
        g_tn = 192, g_slots = 5;
        run(probe_swiglu_t192s5, "tall192, 5 x 40 KB", 7168, rows, buf.w, w_scale, buf.tok, a_scale, out, offsets, copy);
        g_tn = 192, g_slots = 4;
        run(probe_swiglu_t192s4, "tall192, 4 x 40 KB", 7168, rows, buf.w, w_scale, buf.tok, a_scale, out, offsets, copy);
      }
    return 0;
  }
#endif
#ifdef HC_FP8_TALL128
  if (argc > 1 && std::string(argv[1]) == "tall128") {  // 256-token tiles, 4 slots / 128, 4 / 128, 6
    for (int round = 0; round < 2; ++round) {
      g_tn = 256, g_slots = 4;
      run(tall.first, "tall, 4 slots of 48 KB", 7168, std::vector<int>(128, 128), buf.w, w_scale, buf.tok, a_scale, out,
          offsets, copy);
      g_tn = 128, g_slots = 4;
      run(probe_swiglu_t128s4, "tall128, 4 slots", 7168, std::vector<int>(128, 128), buf.w, w_scale, buf.tok, a_scale,
          out, offsets, copy);
      g_tn = 128, g_slots = 6;
      run(probe_swiglu_t128s6, "tall128, 6 slots", 7168, std::vector<int>(128, 128), buf.w, w_scale, buf.tok, a_scale,
          out, offsets, copy);
      run(probe_swiglu_t128s6, "tall128, 6 slots", 7168, spread, buf.w, w_scale, buf.tok, a_scale, out, offsets, copy);
    }
    return 0;
  }
#endif
#ifdef HC_FP8_INST
  if (argc > 1 && std::string(argv[1]) == "inst") {
    // With -DHC_FP8_INST and the copy bench/probes/fp8_inst_source.py writes (its header says
    // what it times): one launch after a warm-up, a k-step's and a tile's cycles by part,
    // averaged over the CTAs' tiles, and the clock the launch ran at.
    auto inst = [&](const char* name, const Shape& sh, const std::vector<int>& rows, auto k) {
      using Rec = unsigned long long[6];
      using Walk = unsigned long long[2];
      static Rec zero[264 * 2 * kInstTiles], h[264 * 2 * kInstTiles];
      static Walk wz[264 * 2 * kInstTiles], wh[264 * 2 * kInstTiles];
      static unsigned long long pz[264 * 4], ph[264 * 4], ez[264 * 2 * 5], eh[264 * 2 * 5];
      const long long K = sh.K;
      time_gemm(k, sh, rows, buf.w, w_scale, buf.tok, a_scale, out, offsets);  // warm-up
      CK(cudaMemcpyToSymbol(g_tile, zero, sizeof zero));
      CK(cudaMemcpyToSymbol(g_walk, wz, sizeof wz));
      CK(cudaMemcpyToSymbol(g_prod, pz, sizeof pz));
      CK(cudaMemcpyToSymbol(g_epi, ez, sizeof ez));
      const double ms = time_gemm(k, sh, rows, buf.w, w_scale, buf.tok, a_scale, out, offsets, 1);
      CK(cudaMemcpyFromSymbol(h, g_tile, sizeof h));
      CK(cudaMemcpyFromSymbol(wh, g_walk, sizeof wh));
      CK(cudaMemcpyFromSymbol(ph, g_prod, sizeof ph));
      CK(cudaMemcpyFromSymbol(eh, g_epi, sizeof eh));
      int sms = 0;
      CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
      const double gbs = double(rows.size()) * sh.NW * K / (ms * 1e-3) / 1e9;
      const double kt = double(K / 128);
      double run = 0;
      for (int b = 0; b < sms; ++b) run += double(ph[b * 4 + 3] - ph[b * 4 + 2]) / sms;
      std::printf("  %s, K %lld: %.1f us (%.0f%% of the copy rate); the producer's run %.0f cycles = %.2f GHz\n", name, K,
                  ms * 1e3, 100 * gbs / copy, run, run / (ms * 1e6));
      for (int c = 0; c < 2; ++c) {
        double n = 0, loop = 0, epi = 0, setup = 0, wait = 0, mma = 0, prom = 0, ns = 0, ret = 0, look = 0, entry = 0;
        for (int b = 0; b < sms; ++b)
          for (int t = 0; t < kInstTiles; ++t) {
            const size_t i = size_t(b * 2 + c) * kInstTiles + t;
            const unsigned long long* r = h[i];
            if (r[0] == 0) continue;
            n += 1, loop += double(r[1] - r[0]), epi += double(r[2] - r[1]), wait += r[3], mma += r[4], prom += r[5];
            const unsigned long long* nx = t + 1 < kInstTiles ? h[i + 1] : nullptr;
            if (nx && nx[0] != 0 && wh[i + 1][0] != 0) {  // the next tile: return, lookup + view, entry
              ns += 1, setup += double(nx[0] - r[2]);
              ret += double(wh[i + 1][0] - r[2]), look += double(wh[i + 1][1] - wh[i + 1][0]);
              entry += double(nx[0] - wh[i + 1][1]);
            }
          }
        const double ks = n * kt;
        std::printf("    consumer %d (%.0f tiles): a k-step %.0f cycles = wait for the slot %.0f + wgmmas %.0f + promotion "
                    "%.0f + rest %.0f; a tile: epilogue %.0f, to the next tile %.0f cycles (%.1f k-steps together) = "
                    "back to the walk %.0f + lookup and view %.0f + into the k-loop %.0f\n", c, n, loop / ks, wait / ks,
                    mma / ks, prom / ks, (loop - wait - mma - prom) / ks, epi / n, setup / ns,
                    (epi / n + setup / ns) / (loop / ks), ret / ns, look / ns, entry / ns);
      }
      double pw = 0, pk = 0, longest = 0;
      for (int b = 0; b < sms; ++b) {
        pw += double(ph[b * 4]), pk += double(ph[b * 4 + 1]);
        longest = std::max(longest, double(ph[b * 4 + 3] - ph[b * 4 + 2]));
      }
      // The static walk's balance: the launch lasts as long as its longest CTA, whose producer
      // issues its last k-step a few k-steps before the CTA ends.
      std::printf("    producer: waiting for a free slot %.0f cycles a k-step; its run %.0f cycles on average, %.0f in the "
                  "longest CTA (%.1f%% over the mean)\n", pw / pk, run, longest, 100 * (longest / run - 1));
      for (int c = 0; c < 2; ++c) {  // the staged epilogue's parts (sm90.talls only)
        double part[5] = {};
        for (int b = 0; b < sms; ++b)
          for (int q = 0; q < 5; ++q) part[q] += double(eh[(b * 2 + c) * 5 + q]);
        if (part[4] > 0)
          std::printf("    consumer %d's staged epilogue a tile: previous copies' wait + sync %.0f, stmatrix %.0f, fence + "
                      "sync %.0f, copies' issue %.0f cycles\n", c, part[0] / part[4], part[1] / part[4], part[2] / part[4],
                      part[3] / part[4]);
      }
    };
    const Shape down{kI, 7168, 7168, 256, 3, true};
    const std::vector<int> layer_like = layer_like_rows();
    for (int round = 0; round < 2; ++round) {
      inst("down (sm90.talls), 256 experts like the layer's", down, layer_like, probe_down_talls);
      inst("128 rows", swiglu_shape(7168), std::vector<int>(128, 128), tall.first);
      inst("spread", swiglu_shape(7168), spread, tall.first);
      inst("256 rows", swiglu_shape(7168), std::vector<int>(128, 256), tall.first);
      inst("128 rows, short tiles", swiglu_shape(1792), std::vector<int>(512, 128), tall.first);
      inst("down (sm90.talls), 128 rows", down, std::vector<int>(128, 128), probe_down_talls);
      inst("down (sm90.talls), spread", down, spread, probe_down_talls);
    }
    return 0;
  }
#endif
  if (argc > 1 && std::string(argv[1]) == "quantize") {  // the layer's three quantizations at 4096 tokens
    auto* x = reinterpret_cast<unsigned short*>(buf.w);
    activation_like_bf16<<<1024, 256>>>(x, 32768ll * 7168);
    float* scale = nullptr;
    CK(cudaMalloc(&scale, 32768ull * 56 * 4));
    for (int round = 0; round < 2; ++round)
      for (auto [R, K] : {std::pair<long long, long long>{32768, 2048}, {4096, 7168}, {32768, 7168}})
        run_quantize(R, K, x, buf.w2, scale, copy);
    CK(cudaFree(scale));
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "quant") {
    // sm90.tallmc + moe_quantize_fp8 of its h against the quantizing build, alternated, at 128
    // rows an expert and the spread; the quantizing build's q / scales hashed (variants built
    // from other sources: equal hashes, the same bits).
    unsigned char* q = buf.w2;
    float* q_scale = nullptr;
    CK(cudaMalloc(&q_scale, size_t(max_rows) * (kI / 128) * 4));
    const int sms_ = [] { int n = 0; CK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0)); return n; }();
    for (int round = 0; round < 2; ++round)
      for (const std::vector<int>& rows : {std::vector<int>(128, 128), spread}) {
        const double plain = run(tallmc.first, tallmc.second, 7168, rows, buf.w, w_scale, buf.tok, a_scale, out, offsets, copy);
        long long R = 0;
        for (int r : rows) R += r;
        const long long groups = R * (kI / 128);
        const unsigned blocks = unsigned(std::min<long long>((groups + 7) / 8, (long long)sms_ * 16));
        const double qh = median_ms([&] { hc_moe_quantize_fp8<<<blocks, 256>>>(out, q, q_scale, R, kI); }, 10);
        const double fused = time_quant(rows, buf.w, w_scale, buf.tok, a_scale, q, q_scale, offsets);
        std::vector<unsigned char> hq(size_t(R * kI));
        CK(cudaMemcpy(hq.data(), q, hq.size(), cudaMemcpyDeviceToHost));
        unsigned long long h = 1469598103934665603ull;
        for (unsigned char c : hq) h = (h ^ c) * 1099511628211ull;
        std::printf("  quantize of h %.1f us (plain + quantize %.1f us); quantizing build %.1f us = %.3fx, q hash %016llx\n",
                    qh * 1e3, (plain + qh) * 1e3, fused * 1e3, fused / (plain + qh), h);
      }
    CK(cudaFree(q_scale));
    return 0;
  }
  // `t160`: the SwiGLU GEMM in 256- and 160-token tall tiles; `mc`: the registry's SwiGLU build
  // (sm90.tallmc) alone, on the same row sets.
  if (argc > 1 && (std::string(argv[1]) == "t160" || std::string(argv[1]) == "mc")) {
    const bool mc = std::string(argv[1]) == "mc";
    std::vector<int> layer_like = layer_like_rows();
    layer_like.resize(128);  // the buffers hold 128 experts' gate and up weights
    for (int round = 0; round < 2; ++round)
      for (const std::vector<int>& rows : {std::vector<int>(128, 128), spread, layer_like, rows_8k()}) {
        long long R = 0;
        for (int r : rows) R += r;
        CK(cudaMemset(out, 0xff, size_t(R) * kI * 2));
        run(mc ? tallmc.first : tall.first, mc ? "sm90.tallmc" : "sm90.tall", 7168, rows, buf.w, w_scale, buf.tok,
            a_scale, out, offsets, copy);
        std::printf("    output checksum %016llx\n", checksum(out, R * kI));
#ifdef HC_FP8_STAGED_ENTRY_T
        if (mc) continue;
        CK(cudaMemset(out, 0xff, size_t(R) * kI * 2));
        run(probe_swiglu_t160, "160-token tiles", Shape{7168, kI, 2 * kI, 160, 4, false}, rows, buf.w, w_scale, buf.tok,
            a_scale, out, offsets, copy);
        std::printf("    output checksum %016llx\n", checksum(out, R * kI));
#endif
      }
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "down") {  // the down GEMM (sm90.talls), K = I = 2048, N = H = 7168
    const Shape down{kI, 7168, 7168, 256, 3, true};
    const std::vector<int> layer_like = layer_like_rows();
    for (int round = 0; round < 2; ++round)
      for (const std::vector<int>& rows : {std::vector<int>(128, 128), spread, layer_like, rows_8k()}) {
        long long R = 0;
        for (int r : rows) R += r;
        CK(cudaMemset(out, 0xff, size_t(R) * 7168 * 2));  // NaNs where a build writes nothing
        run(probe_down_talls, "sm90.talls down", down, rows, buf.w, w_scale, buf.tok, a_scale, out, offsets, copy);
        std::printf("    output checksum %016llx\n", checksum(out, R * 7168));
#ifdef HC_FP8_STAGED_ENTRY_T
        CK(cudaMemset(out, 0xff, size_t(R) * 7168 * 2));
        run(probe_down_t160, "160-token tiles", Shape{kI, 7168, 7168, 160, 4, true}, rows, buf.w, w_scale, buf.tok,
            a_scale, out, offsets, copy);
        std::printf("    output checksum %016llx\n", checksum(out, R * 7168));
#endif
      }
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "sustain") {
    // The kernel back to back for ~3 s (128 rows an expert), every 20th median printed with the
    // seconds since the start: how far the rate falls once the clock settles under the power
    // cap (sample `nvidia-smi --query-gpu=clocks.sm,power.draw,clocks_throttle_reasons.active`
    // beside it).
    const auto t0 = std::chrono::steady_clock::now();
    for (int round = 0; round < 200; ++round) {
      const bool show = round % 20 == 0 || round == 199;
      if (show) std::printf("  [%.2f s] ", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      if (show) run(tall.first, tall.second, 7168, std::vector<int>(128, 128), buf.w, w_scale, buf.tok, a_scale, out, offsets, copy);
      else time_gemm(tall.first, swiglu_shape(7168), std::vector<int>(128, 128), buf.w, w_scale, buf.tok, a_scale, out, offsets);
    }
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "prefetch") {  // tall against its prefetching forms, alternated
    for (int round = 0; round < 2; ++round)
      for (auto [k, name] : {tall, std::pair<Entry, const char*>{probe_swiglu_tallpf4, "sm90.tallpf (4)"},
                             std::pair<Entry, const char*>{probe_swiglu_tallpf8, "prefetch 8"},
                             std::pair<Entry, const char*>{probe_swiglu_tallpf16, "prefetch 16"}})
        run(k, name, 7168, std::vector<int>(128, 128), buf.w, w_scale, buf.tok, a_scale, out, offsets, copy);
    return 0;
  }
  for (int round = 0; round < 2; ++round)
    for (auto [k, name] : {tall, tallmc}) {
      run(k, name, 7168, std::vector<int>(128, 128), buf.w, w_scale, buf.tok, a_scale, out, offsets, copy);
      run(k, name, 7168, spread, buf.w, w_scale, buf.tok, a_scale, out, offsets, copy);
      run(k, name, 7168, std::vector<int>(128, 256), buf.w, w_scale, buf.tok, a_scale, out, offsets, copy);
    }
  // The same bytes in longer or shorter tiles (k-steps a tile), 128 rows an expert: a cost per
  // tile (epilogue, tile change) shows as a rate that grows with K.
  for (auto [EL, K] : {std::pair<int, long long>{512, 1792}, {256, 3584}, {128, 7168}, {64, 14336}, {32, 28672}})
    run(tall.first, tall.second, K, std::vector<int>(EL, 128), buf.w, w_scale, buf.tok, a_scale, out, offsets, copy);
  CK(cudaFree(w_scale));
  CK(cudaFree(a_scale));
  CK(cudaFree(out));
  CK(cudaFree(offsets));
  return 0;
}
