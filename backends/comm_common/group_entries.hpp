// The communicator entries that are the same in every backend whose ranks meet in a ShmGroup
// (hal.h "Communicators"): joining the group, the info fields it bounds, and the table entries
// comm_destroy, comm_barrier and comm_all_gather, used as they are
// (HAL_BACKEND_FN(halcyon::comm::group_barrier<HipComm>)). `C` is the backend's communicator
// type, with a `group` member and `static constexpr const char* kName` naming it in errors
// ("hip communicator"). Header-only: each backend's plugin gets its own copy, which reports
// through that backend's host table.
#pragma once

#include <halcyon/hal.h>
#include <halcyon/plugin.hpp>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "shm_group.hpp"

namespace halcyon::comm {

inline hal_error* group_error(hal_status status, const char* who, const std::string& what) {
  return halcyon::plugin::error(status, std::string(who) + ": " + what);
}

// Joins desc's rendezvous (HAL_UNAVAILABLE naming what went wrong) and fills the info fields
// the group decides: transport, max_all_gather_bytes, max_ranks.
inline hal_error* group_join(const hal_comm_desc* desc, const char* who, const char* transport,
                             std::unique_ptr<ShmGroup>* out, hal_comm_info* info) {
  if (auto e = ShmGroup::join(desc->rendezvous, desc->rank, desc->size, desc->timeout_ms, out); !e.empty())
    return group_error(HAL_UNAVAILABLE, who, e);
  std::snprintf(info->transport, sizeof info->transport, "%s", transport);
  info->max_all_gather_bytes = ShmGroup::kSlotBytes;
  info->max_ranks = ShmGroup::kMaxRanks;
  return nullptr;
}

// Reads an export handle H (a struct starting with uint32_t magic, owner_rank) and checks that
// this kind of communicator made it (`magic`) and that rank `peer` exported it.
template <typename C, typename H>
hal_error* read_handle(const hal_comm_handle* handle, uint32_t magic, uint32_t peer, H* out) {
  static_assert(sizeof(H) <= HAL_COMM_HANDLE_BYTES);
  std::memcpy(static_cast<void*>(out), handle->bytes, sizeof *out);
  if (out->magic != magic)
    return group_error(HAL_INVALID_ARGUMENT, C::kName, "the handle was not made by hal_comm_buffer_export of a " +
                                                           std::string(C::kName));
  if (out->owner_rank != peer)
    return group_error(HAL_INVALID_ARGUMENT, C::kName,
                       "the handle was exported by rank " + std::to_string(out->owner_rank) + ", not by peer " +
                           std::to_string(peer));
  return nullptr;
}

template <typename C>
void group_destroy(C* c) {
  delete c;
}

template <typename C>
hal_error* group_barrier(C* c) {
  HAL_BACKEND_GUARD({
    if (auto e = c->group->barrier(); !e.empty()) return group_error(HAL_DEVICE_ERROR, C::kName, e);
    return nullptr;
  })
}

template <typename C>
hal_error* group_all_gather(C* c, const void* send, uint64_t bytes, void* recv) {
  HAL_BACKEND_GUARD({
    if (auto e = c->group->all_gather(send, size_t(bytes), recv); !e.empty())
      return group_error(HAL_DEVICE_ERROR, C::kName, e);
    return nullptr;
  })
}

}  // namespace halcyon::comm
