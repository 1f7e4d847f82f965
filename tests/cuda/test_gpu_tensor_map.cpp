// Tensor maps on the GPU: maps from hal_device_encode_tensor_map drive real
// cp.async.bulk.tensor copies (kernels/ptx/test_kernels/tma_load.cu), and every element of the
// box is checked where the copy must have put it (swizzled), zeros or NaN outside the tensor.
#include "gpu_support.hpp"

#include <cmath>

using test::expect_error;
using test::unwrap;

namespace {

constexpr uint32_t kThreads = 128;

// Byte offset in shared memory of byte `linear` of a dense box, under a swizzle of `span`
// bytes (0: none): 16-byte chunk c of each 128-byte line L goes to chunk c ^ (L % (span / 16)),
// CUTLASS's Swizzle<log2(span/16), 4, 3>, on a destination aligned to 1024 bytes.
size_t swizzled(size_t linear, uint32_t span) {
  if (span == 0) return linear;
  return linear ^ (((linear >> 7) & (span / 16 - 1)) << 4);
}

struct Tma {
  halcyon::Device dev = gpu::open();
  bool usable = dev.has("tensor_map");
  halcyon::Module mod = usable ? gpu::load(dev, "tma_load") : halcyon::Module();

  // The tma_load kernel, its argument layout checked: the map sits at offset 64.
  halcyon::Kernel kernel() const {
    auto k = unwrap(mod.kernel("tma_load"));
    auto args = unwrap(k.args());
    REQUIRE(args.size() == 7);
    CHECK(args[1].offset == 64);
    CHECK(args[1].size == HAL_TENSOR_MAP_BYTES);
    CHECK(args[2].offset == 64 + HAL_TENSOR_MAP_BYTES);
    CHECK(unwrap(k.info()).args_size == 212);
    return k;
  }

  // Copies the box at (c0, c1, c2) of a map of T with one cp.async.bulk.tensor; returns the
  // shared bytes. The innermost coordinate must be a multiple of 16 bytes (c0 * sizeof(T)): the
  // copy engine raises an illegal instruction otherwise, which kills the context
  // (docs/backends/cuda.md), so a test that broke the rule would fail every test after it.
  template <typename T>
  std::vector<unsigned char> load_box(const halcyon::TensorMap& map, int c0, int c1, int c2, uint32_t rank,
                                      uint32_t box_bytes) const {
    REQUIRE_MESSAGE(int64_t(c0) * int64_t(sizeof(T)) % 16 == 0, "c0 = ", c0, " is not a multiple of 16 bytes");
    auto k = kernel();
    auto s = unwrap(dev.create_stream());
    auto out = unwrap(dev.allocate(box_bytes));
    unwrap(s.fill<uint8_t>(out, 0, box_bytes, 0x5A));
    halcyon::ArgPack args;
    args.pointer(out).value(map).value(c0).value(c1).value(c2).value(rank).value(box_bytes);
    REQUIRE(args.size() == 212);
    unwrap(s.launch(k, {1}, {kThreads}, args, box_bytes + 1024));
    std::vector<unsigned char> got(box_bytes);
    unwrap(s.read(out, 0, got.data(), box_bytes));
    unwrap(s.synchronize());
    return got;
  }

  // A buffer holding the rank-2 or rank-3 tensor of T that `d` describes (dims, strides,
  // offset), element (x, y, z) = value(x, y, z) and every other byte `pad`; d.buffer is set.
  template <typename T, typename F>
  halcyon::Buffer upload(hal_tensor_map_desc& d, T pad, F value) const {
    REQUIRE(d.strides[0] == sizeof(T));
    const uint64_t dz = d.rank == 3 ? d.dims[2] : 1;
    const uint64_t size = d.offset + (d.dims[0] - 1) * d.strides[0] + (d.dims[1] - 1) * d.strides[1] +
                          (dz - 1) * (d.rank == 3 ? d.strides[2] : 0) + sizeof(T);
    std::vector<T> host(size / sizeof(T), pad);
    for (uint64_t z = 0; z < dz; ++z)
      for (uint64_t y = 0; y < d.dims[1]; ++y)
        for (uint64_t x = 0; x < d.dims[0]; ++x)
          host[(d.offset + x * d.strides[0] + y * d.strides[1] + z * (d.rank == 3 ? d.strides[2] : 0)) / sizeof(T)] =
              value(x, y, z);
    auto buf = unwrap(dev.allocate(size));
    auto s = unwrap(dev.create_stream());
    unwrap(s.write(buf, 0, host.data(), size));
    unwrap(s.synchronize());
    d.buffer = buf.get();
    return buf;
  }
};

// Checks a box of a rank-3 (rank-2: dims[2] = box[2] = 1) tensor of T against `value(x, y, z)`
// (0 or NaN outside the tensor), read from shared memory laid out with a swizzle of `span`.
template <typename T, typename F>
void check_box(const std::vector<unsigned char>& got, const hal_tensor_map_desc& d, int c0, int c1, int c2,
               uint32_t span, F value) {
  CAPTURE(c0);
  CAPTURE(c1);
  CAPTURE(c2);
  const uint32_t bz = d.rank == 3 ? d.box[2] : 1;
  size_t bad = 0, outside = 0;
  std::string first;
  for (uint32_t k = 0; k < bz; ++k)
    for (uint32_t r = 0; r < d.box[1]; ++r)
      for (uint32_t e = 0; e < d.box[0]; ++e) {
        const int64_t x = int64_t(c0) + e, y = int64_t(c1) + r, z = int64_t(c2) + k;
        const uint64_t dz = d.rank == 3 ? d.dims[2] : 1;
        const bool inside = x >= 0 && y >= 0 && z >= 0 && uint64_t(x) < d.dims[0] && uint64_t(y) < d.dims[1] &&
                            uint64_t(z) < dz;
        const size_t linear = ((size_t(k) * d.box[1] + r) * d.box[0] + e) * sizeof(T);
        const size_t at = swizzled(linear, span);
        REQUIRE(at + sizeof(T) <= got.size());
        T v;
        std::memcpy(&v, got.data() + at, sizeof v);
        bool ok;
        if (inside) {
          T want = value(uint64_t(x), uint64_t(y), uint64_t(z));
          ok = std::memcmp(&v, &want, sizeof v) == 0;
        } else {
          ++outside;
          if constexpr (std::is_floating_point_v<T>) ok = d.oob_nan ? std::isnan(v) : v == T(0);
          else ok = v == T(0);
        }
        if (!ok && bad++ == 0)
          first = "element (" + std::to_string(x) + ", " + std::to_string(y) + ", " + std::to_string(z) + ") at byte " +
                  std::to_string(at) + (inside ? "" : " (outside the tensor)") + " holds " + std::to_string(double(v));
      }
  CHECK_MESSAGE(bad == 0, bad, " wrong elements; first: ", first);
  MESSAGE("box at (", c0, ", ", c1, ", ", c2, "): ", outside, " elements outside the tensor");
}

}  // namespace

TEST_CASE_FIXTURE(Tma, "tensor map: a 2-D bf16 box {64, 64} with SWIZZLE_128B, inside, across the edges, at negative coordinates") {
  if (!usable) {
    auto buf = unwrap(dev.allocate(4096));
    auto d = halcyon::tensor_map_desc(buf.get(), HAL_TENSOR_MAP_U8, {4096}, {64});
    unsigned char out[HAL_TENSOR_MAP_BYTES];
    expect_error(hal_device_encode_tensor_map(dev.get(), &d, out, sizeof out), HAL_UNSUPPORTED, "cuda");
    MESSAGE("no tensor_map capability on ", gpu::arch(dev), ": only the HAL_UNSUPPORTED error was checked");
    return;
  }
  // 200 x 150 elements, rows padded to 208 (416 bytes, a multiple of 16), at offset 256. The
  // padding holds 0xEEEE, which a copy that ignored dims[0] would bring in.
  const uint64_t W = 200, H = 150;
  auto value = [&](uint64_t x, uint64_t y, uint64_t) { return uint16_t(1 + x + y * W); };  // unique, never 0
  auto d = halcyon::tensor_map_desc(nullptr, HAL_TENSOR_MAP_BF16, {W, H}, {64, 64}, {208 * 2}, 256);
  auto buf = upload<uint16_t>(d, 0xEEEE, value);
  d.swizzle = HAL_TENSOR_MAP_SWIZZLE_128B;
  d.l2_promotion = HAL_TENSOR_MAP_L2_128B;
  auto map = unwrap(dev.encode_tensor_map(d));
  // x: multiples of 8 elements (16 bytes), see load_box; (184, -60) crosses the right edge
  // (16 columns inside) and the top (4 rows inside) at once.
  const int coords[][2] = {{0, 0}, {64, 32}, {160, 120}, {136, 86}, {-16, -8}, {184, -60}};
  for (auto [c0, c1] : coords) {
    auto got = load_box<uint16_t>(map, c0, c1, 0, 2, 64 * 64 * 2);
    check_box<uint16_t>(got, d, c0, c1, 0, 128, value);
  }
  // The pattern itself, as the HAL documents it: row r at r * 128 bytes, chunk c at c ^ (r % 8).
  auto got = load_box<uint16_t>(map, 0, 0, 0, 2, 64 * 64 * 2);
  for (uint32_t r : {0u, 1u, 7u, 8u, 13u}) {
    for (uint32_t c = 0; c < 8; ++c) {
      uint16_t v;
      std::memcpy(&v, got.data() + r * 128 + ((c ^ (r % 8)) * 16), 2);
      CHECK(v == value(c * 8, r, 0));  // the first element of chunk c: x = 8c
    }
  }
}

TEST_CASE_FIXTURE(Tma, "tensor map: 3-D f32 without swizzle, padded strides, zeros or NaN outside") {
  if (!usable) return;
  // 40 x 30 x 20 elements at offset 1024; rows padded to 48 elements (192 bytes), planes to
  // 32 rows; the padding holds -1.
  const uint64_t X = 40, Y = 30, Z = 20;
  auto value = [&](uint64_t x, uint64_t y, uint64_t z) { return float(1 + x + X * (y + Y * z)); };
  auto d = halcyon::tensor_map_desc(nullptr, HAL_TENSOR_MAP_F32, {X, Y, Z}, {8, 4, 3}, {48 * 4, 32 * 48 * 4}, 1024);
  auto buf = upload<float>(d, -1.0f, value);
  const uint32_t box_bytes = 8 * 4 * 3 * 4;
  const int coords[][3] = {{4, 2, 1}, {36, 28, 18}, {-4, 0, 19}, {32, 26, 0}};
  for (uint32_t nan : {0u, 1u}) {
    CAPTURE(nan);
    d.oob_nan = nan;
    auto map = unwrap(dev.encode_tensor_map(d));
    for (auto [c0, c1, c2] : coords)
      check_box<float>(load_box<float>(map, c0, c1, c2, 3, box_bytes), d, c0, c1, c2, 0, value);
  }
}

TEST_CASE_FIXTURE(Tma, "tensor map: 3-D u16 with SWIZZLE_64B") {
  if (!usable) return;
  const uint64_t X = 64, Y = 16, Z = 4;
  auto value = [&](uint64_t x, uint64_t y, uint64_t z) { return uint16_t(1 + x + X * (y + Y * z)); };
  // Dense; a box row is 32 elements = 64 bytes, the whole span.
  auto d = halcyon::tensor_map_desc(nullptr, HAL_TENSOR_MAP_U16, {X, Y, Z}, {32, 8, 2});
  auto buf = upload<uint16_t>(d, 0, value);
  d.swizzle = HAL_TENSOR_MAP_SWIZZLE_64B;
  auto map = unwrap(dev.encode_tensor_map(d));
  const int coords[][3] = {{0, 0, 0}, {32, 8, 2}, {48, 12, 3}};
  for (auto [c0, c1, c2] : coords)
    check_box<uint16_t>(load_box<uint16_t>(map, c0, c1, c2, 3, 32 * 8 * 2 * 2), d, c0, c1, c2, 64, value);
}

TEST_CASE_FIXTURE(Tma, "tensor map: the driver's limits are refused before it, naming the field") {
  if (!usable) return;
  auto buf = unwrap(dev.allocate(1 << 20));
  auto d = halcyon::tensor_map_desc(buf.get(), HAL_TENSOR_MAP_BF16, {200, 150}, {64, 64}, {416});
  d.swizzle = HAL_TENSOR_MAP_SWIZZLE_128B;
  unwrap(dev.encode_tensor_map(d));
  unsigned char out[HAL_TENSOR_MAP_BYTES];
  auto refused = [&](hal_tensor_map_desc bad, const std::string& needle) {
    expect_error(hal_device_encode_tensor_map(dev.get(), &bad, out, sizeof out), HAL_INVALID_ARGUMENT, needle);
  };
  auto with = [&](auto change) {
    hal_tensor_map_desc x = d;
    change(x);
    return x;
  };
  refused(with([](auto& x) { x.strides[1] = 402; }), "strides[1] is 402 bytes, not a multiple of 16");
  refused(with([](auto& x) { x.offset = 2; }), "(buffer address + offset 2) is not 16-byte aligned");
  refused(with([](auto& x) { x.box[1] = 257; }), "box[1] is 257, more than 256");
  refused(with([](auto& x) { x.box[0] = 4; }), "box[0] is 4 bf16 elements = 8 bytes");
  refused(with([](auto& x) { x.swizzle = HAL_TENSOR_MAP_SWIZZLE_64B; }),
          "box[0] is 64 bf16 elements = 128 bytes, more than the 64-byte span of swizzle 64B");
  // The messages say which device and which map.
  refused(with([](auto& x) { x.strides[1] = 408; }), "cuda: cuda:0: tensor map (rank 2 bf16, dims {200, 150}");
}
