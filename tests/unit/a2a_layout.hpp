// The all-to-all case the communicator tests share (tests/unit/test_comm.cpp on the CPU's shared
// memory, tests/hip/test_hip_comm.cpp on the HIP backend): each peer's send and receive range
// with a gap before it, so that a write past a range is seen, and bytes distinct for every
// (from, to, i), so that a misrouted or shifted byte is seen.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace test {

inline uint8_t a2a_pattern(uint32_t from, uint32_t to, uint64_t i) {
  return uint8_t(from * 71 + to * 13 + i * 7 + (i >> 9));
}

struct A2aLayout {
  static constexpr uint8_t kUnwritten = 0xEE;  // what the receive buffer holds before the call
  std::vector<uint64_t> send_offsets, send_sizes, recv_offsets, recv_sizes;
  uint64_t send_total = 0, recv_total = 0;

  // pair_bytes(from, to): the bytes rank `from` sends to rank `to`. Send ranges start 64 bytes,
  // receive ranges 32 bytes after the previous one.
  A2aLayout(uint32_t rank, uint32_t size, const std::function<uint64_t(uint32_t, uint32_t)>& pair_bytes)
      : send_offsets(size), send_sizes(size), recv_offsets(size), recv_sizes(size) {
    for (uint32_t p = 0; p < size; ++p) {
      send_offsets[p] = send_total + 64;
      send_sizes[p] = pair_bytes(rank, p);
      send_total = send_offsets[p] + send_sizes[p];
      recv_offsets[p] = recv_total + 32;
      recv_sizes[p] = pair_bytes(p, rank);
      recv_total = recv_offsets[p] + recv_sizes[p];
    }
  }

  // Rank `rank`'s bytes for each peer, in `send` (send_total bytes).
  void fill_send(uint32_t rank, uint8_t* send) const {
    for (uint32_t p = 0; p < send_sizes.size(); ++p)
      for (uint64_t i = 0; i < send_sizes[p]; ++i) send[send_offsets[p] + i] = a2a_pattern(rank, p, i);
  }

  // "" when `recv` (recv_total bytes, kUnwritten before the call) holds every peer's bytes for
  // rank `rank` and the gaps before the ranges are untouched; else the first difference.
  std::string check_recv(uint32_t rank, const uint8_t* recv) const {
    for (uint32_t p = 0; p < recv_sizes.size(); ++p) {
      for (uint64_t i = 0; i < recv_sizes[p]; ++i)
        if (uint8_t want = a2a_pattern(p, rank, i); recv[recv_offsets[p] + i] != want)
          return fmt::format("byte {} from rank {} is {}, expected {}", i, p, recv[recv_offsets[p] + i], want);
      if (recv[recv_offsets[p] - 1] != kUnwritten) return fmt::format("the byte before rank {}'s range was written", p);
    }
    return {};
  }
};

}  // namespace test
