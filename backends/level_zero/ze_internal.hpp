// The Level Zero backend's objects and the helpers its files share. One file per object group:
// ze_device.cpp (driver, devices, partitions), ze_memory.cpp (buffers, streams, copies),
// ze_event.cpp (events and timestamps), ze_module.cpp (SPIR-V modules, kernels, launches),
// ze_backend.cpp (the hal_backend_api table).
#pragma once

#include <halcyon/hal.h>
#include <halcyon/plugin.hpp>

#include <fmt/format.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "spirv_reader.hpp"
#include "ze_symbols.hpp"

namespace halcyon::ze {

using halcyon::plugin::error;

struct Backend {
  Library lib;
  ze_driver_handle_t driver = nullptr;
  ze_context_handle_t context = nullptr;
  bool own_context = false;  // made by zeContextCreate (destroyed here), not the driver's default
  uint32_t api_version = 0;  // zeDriverGetApiVersion: ZE_MAKE_VERSION(major, minor); 0 unknown
  std::vector<ze_device_handle_t> devices;
  // Live streams of every device object: a buffer's free waits for their work (a buffer may be
  // used on streams of another object of its device, such as the operator layer's module cache).
  std::mutex streams_mu;
  std::set<struct Stream*> streams;
  // Imported streams released while their owner's list may still run work on halcyon's
  // buffers: each is a barrier's event, appended at the release, that the next buffer free waits
  // for (under streams_mu). Destroyed once signalled.
  struct Retired {
    ze_event_pool_handle_t pool;
    ze_event_handle_t done;
  };
  std::vector<Retired> retired;
  ~Backend();
};

struct Device {
  Backend* backend;
  uint32_t index;
  ze_device_handle_t handle;
  ze_device_properties_t props{};
  ze_device_compute_properties_t compute{};
  uint64_t memory_bytes = 0;
  uint64_t memory_bytes_per_s = 0;
  uint64_t l2_bytes = 0;
  uint32_t compute_ordinal = 0;  // the queue group with the compute flag
  uint32_t compute_queues = 1;   // its queues: the compute engines (CCS) the driver exposes
  std::vector<ze_device_handle_t> tiles;  // sub-devices; empty when the device has none
  std::string arch;
  std::mutex mu;
  std::set<uint32_t> claimed_tiles;  // tiles held by live partitions
  uint32_t soft_units = 0;           // units held by live soft partitions (no sub-devices)
  const Symbols& s() const { return backend->lib.sym; }
  uint32_t units() const;           // EUs of the device
  uint32_t units_per_tile() const;  // EUs of one sub-device
};

struct Partition {
  Device* device;
  std::vector<uint32_t> tiles;  // empty: a soft partition of `units` EUs
  uint32_t units;
};

struct Buffer {
  Device* device;
  void* ptr;
  bool imported = false;       // someone else's memory (hal_buffer_import): never freed here
  bool owner_ordered = false;  // HAL_BUFFER_IMPORT_OWNER_ORDERED: its release need not wait
};

struct Stream {
  Device* device;
  ze_command_list_handle_t list = nullptr;
  ze_event_pool_handle_t pool = nullptr;
  ze_event_handle_t done = nullptr;  // signalled by the barrier of synchronize()
  // Held by every append of the backend to `list` (Level Zero forbids two threads appending to
  // one list at once: a buffer free on one thread drains a created stream while another thread
  // queues to it) and by every use of `done`. Lock order: streams_mu, then a Kernel's mu, then
  // this; nothing takes another lock while holding it.
  std::mutex mu;
  bool imported = false;  // the owner's immediate list (hal_stream_import): never destroyed here
  // Made with ZE_COMMAND_QUEUE_FLAG_IN_ORDER (create_list): the driver completes its commands in
  // order. Otherwise (a driver older than 1.7, an imported list) Level Zero only starts them in
  // order, and order_barrier() keeps a command from starting before the earlier ones complete.
  bool in_order = false;
};

struct Event {
  Device* device;
  ze_event_pool_handle_t pool = nullptr;
  ze_event_handle_t event = nullptr;
  uint64_t* stamp = nullptr;  // host memory the device's global timestamp is written to
  bool timing = false;
  // Set by event_record under the recording stream's lock, read by query, synchronize, a
  // stream's wait and release on whatever threads call them (hal.h lets an event be recorded on
  // one thread and waited for on others): atomic, with release/acquire so that a reader that
  // sees it set also sees the event's appends.
  std::atomic<bool> recorded{false};
  bool was_recorded() const { return recorded.load(std::memory_order_acquire); }
};

struct Module {
  Device* device;
  ze_module_handle_t module = nullptr;
  spirv::Module spirv;
  std::string name;
};

struct Kernel {
  Module* module;
  ze_kernel_handle_t kernel = nullptr;
  const spirv::Kernel* spirv;
  std::vector<hal_kernel_arg> args;  // the packed blob's layout: one entry per non-__local param
  std::mutex mu;  // arguments are state of the kernel object until the launch is appended
};

// Turns a failed Level Zero call into an error naming the call and the result. A lost device
// and an exhausted memory get the statuses a caller acts on.
hal_error* check(ze_result_t r, const char* what);
#define ZE_CHECK(call) \
  if (hal_error* e_ = ::halcyon::ze::check(call, #call)) return e_

// Teardown cannot return an error; a failure there is logged.
void logged(ze_result_t r, const char* what);

// A halcyon stream completes its commands in order (hal.h); a Level Zero command list only
// starts them in order (core programming guide, "Execution Barriers": no implicit order of
// completion), so a kernel could read a buffer that the copy before it is still writing. On a
// list that was not created in order this appends a barrier: every command appended before it
// completes before any appended after it starts. The caller holds s->mu.
inline ze_result_t order_barrier(Stream* s) {
  if (s->in_order) return ZE_RESULT_SUCCESS;
  return s->device->s().zeCommandListAppendBarrier(s->list, nullptr, 0, nullptr);
}

}  // namespace halcyon::ze

HAL_BACKEND_TYPE(halcyon::ze::Backend, hal_be_backend)
HAL_BACKEND_TYPE(halcyon::ze::Device, hal_be_device)
HAL_BACKEND_TYPE(halcyon::ze::Partition, hal_be_partition)
HAL_BACKEND_TYPE(halcyon::ze::Buffer, hal_be_buffer)
HAL_BACKEND_TYPE(halcyon::ze::Stream, hal_be_stream)
HAL_BACKEND_TYPE(halcyon::ze::Event, hal_be_event)
HAL_BACKEND_TYPE(halcyon::ze::Module, hal_be_module)
HAL_BACKEND_TYPE(halcyon::ze::Kernel, hal_be_kernel)

// The table functions, by file.
namespace halcyon::ze {
hal_error* create(const hal_host_api* host, Backend** out);
void destroy(Backend* b);
hal_error* device_count(Backend* b, uint32_t* out);
hal_error* device_open(Backend* b, uint32_t index, Device** out);
void device_close(Device* d);
hal_error* device_info(Device* d, hal_device_info* info);
hal_error* device_can_run(Device* d, uint32_t format, const char* target, bool* yes, char* reason, size_t cap);
hal_error* partition_split(Device* d, const hal_partition_desc* desc, Partition** part, hal_partition_info* pinfo,
                           Partition** rem, hal_partition_info* rinfo);
void partition_destroy(Partition* p);
hal_error* partition_caps(Device* d, uint32_t flags, hal_partition_caps* out);
hal_error* create_list(Device* d, ze_device_handle_t target, Stream* s);  // a stream's list (Stream::in_order)

hal_error* buffer_create(Device* d, const hal_buffer_desc* desc, Buffer** out, uint64_t* address, void** host);
hal_error* buffer_import(Device* d, const hal_buffer_import_desc* desc, Buffer** out, void** host);
void buffer_destroy(Buffer* b);
hal_error* stream_create(Device* d, Partition* part, const hal_stream_desc* desc, Stream** out);
hal_error* stream_import(Device* d, const hal_stream_import_desc* desc, Stream** out);
hal_error* stream_native(Stream* s, uint64_t* out);
void stream_destroy(Stream* s);
hal_error* stream_synchronize(Stream* s);
hal_error* stream_write(Stream* s, Buffer* dst, uint64_t off, const void* src, uint64_t size);
hal_error* stream_read(Stream* s, Buffer* src, uint64_t off, void* dst, uint64_t size);
hal_error* stream_copy(Stream* s, Buffer* dst, uint64_t doff, Buffer* src, uint64_t soff, uint64_t size);
hal_error* stream_fill(Stream* s, Buffer* dst, uint64_t off, uint64_t size, uint32_t pattern, uint32_t psize);

hal_error* event_create(Device* d, const hal_event_desc* desc, Event** out);
void event_destroy(Event* ev);
hal_error* event_record(Event* ev, Stream* s);
hal_error* stream_wait_event(Stream* s, Event* ev);
hal_error* event_query(Event* ev, bool* complete);
hal_error* event_synchronize(Event* ev);
hal_error* event_elapsed_ms(Event* a, Event* b, float* ms);

hal_error* module_load(Device* d, const hal_module_desc* desc, Module** out);
void module_destroy(Module* m);
hal_error* kernel_get(Module* m, const char* name, Kernel** out, hal_kernel_info* info, hal_kernel_arg* args,
                      uint32_t cap);
void kernel_destroy(Kernel* k);
hal_error* stream_launch(Stream* s, Kernel* k, const hal_launch_desc* d);
}  // namespace halcyon::ze
