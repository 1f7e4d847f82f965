// The CPU backend: a plugin behind hal.h like any vendor's. Device memory is host memory,
// kernels are host functions (HAL_MODULE_HOST) run once per block on a thread pool, and each
// stream is an in-order queue drained by its own thread.
#include <halcyon/hal.h>
#include <halcyon/plugin.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "group_entries.hpp"
#include "shm_group.hpp"
#include "thread_pool.hpp"

using halcyon::plugin::error;
using halcyon::cpu::ThreadPool;

namespace {

constexpr uint32_t kMaxSharedPerBlock = 256 * 1024;
constexpr uint32_t kMaxThreadsPerBlock = 1024;

#if defined(__x86_64__)
constexpr const char* kArch = "x86_64";
#elif defined(__aarch64__)
constexpr const char* kArch = "aarch64";
#else
constexpr const char* kArch = "unknown";
#endif

unsigned hardware_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n ? n : 1;
}

// The cores this process may run on, in order.
std::vector<int> allowed_cpus() {
  std::vector<int> out;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int i = 0; i < CPU_SETSIZE; ++i)
      if (CPU_ISSET(i, &set)) out.push_back(i);
  if (out.empty())
    for (unsigned i = 0; i < hardware_threads(); ++i) out.push_back(int(i));
  return out;
}

}  // namespace

namespace {

struct CpuBackend {
  std::vector<int> cpus;
};

struct CpuStream;

struct CpuDevice {
  std::vector<int> cpus;
  std::shared_ptr<ThreadPool> pool;  // whole-device pool, made on first use
  std::mutex mu;
  // Shared: synchronize_all drains streams outside the lock while another thread may destroy
  // one; the last owner (the destroy, or that drain) frees it.
  std::map<CpuStream*, std::shared_ptr<CpuStream>> streams;
  std::set<int> partitioned;         // cores handed to live partitions

  std::shared_ptr<ThreadPool> whole_pool() {
    std::lock_guard lock(mu);
    if (!pool) pool = std::make_shared<ThreadPool>(unsigned(cpus.size()), std::vector<int>{});
    return pool;
  }
  void synchronize_all();
};

struct CpuPartition {
  CpuDevice* device;
  std::shared_ptr<ThreadPool> pool;
  std::vector<int> cpus;
};

struct CpuBuffer {
  CpuDevice* device;
  void* data;
  uint64_t size;
  bool owned = true;  // false: imported (hal_buffer_import), someone else frees it
  std::unique_ptr<halcyon::comm::ShmSegment> shm;  // peer-visible memory (communicators)
};

// A communicator over POSIX shared memory between processes (backends/comm_common).
struct CpuComm {
  static constexpr const char* kName = "cpu communicator";
  CpuDevice* device;
  std::unique_ptr<halcyon::comm::ShmGroup> group;
};

struct CpuStream {
  CpuDevice* device;
  std::shared_ptr<ThreadPool> pool;
  std::mutex mu;
  std::condition_variable cv_work, cv_idle;
  std::deque<std::function<void()>> queue;
  bool busy = false;
  bool stop = false;
  std::thread worker;

  void push(std::function<void()> op) {
    {
      std::lock_guard lock(mu);
      queue.push_back(std::move(op));
    }
    cv_work.notify_one();
  }
  void drain() {
    std::unique_lock lock(mu);
    cv_idle.wait(lock, [&] { return queue.empty() && !busy; });
  }
  void run() {
    std::unique_lock lock(mu);
    for (;;) {
      cv_work.wait(lock, [&] { return stop || !queue.empty(); });
      if (queue.empty() && stop) return;
      auto op = std::move(queue.front());
      queue.pop_front();
      busy = true;
      lock.unlock();
      op();
      lock.lock();
      busy = false;
      if (queue.empty()) cv_idle.notify_all();
    }
  }
};

void CpuDevice::synchronize_all() {
  std::vector<std::shared_ptr<CpuStream>> copy;
  {
    std::lock_guard lock(mu);
    for (auto& [raw, s] : streams) copy.push_back(s);
  }
  for (auto& s : copy) s->drain();  // a stream destroyed meanwhile is stopped and empty: returns at once
}

// An event is a generation counter: record() bumps `recorded` and queues a marker that
// publishes that generation with a timestamp when the stream reaches it.
struct EventState {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0;
  uint64_t completed = 0;
  std::chrono::steady_clock::time_point when{};
};

// The handle shares its state with every queued record and wait that names it, so releasing
// the event while they are queued is safe: the state lives until the last of them has run.
struct CpuEvent {
  std::shared_ptr<EventState> state = std::make_shared<EventState>();
};

// A kernel of a loaded module, copied out of the caller's hal_host_module_image (its name is
// the map's key): the image's memory is the caller's again once module_load returns.
struct CpuKernelDef {
  hal_host_kernel_fn fn = nullptr;
  uint32_t args_size = 0;
  std::vector<hal_kernel_arg> args;
};

struct CpuModule {
  std::unordered_map<std::string, CpuKernelDef> kernels;
};

struct CpuKernel {
  hal_host_kernel_fn fn;
};

}  // namespace

HAL_BACKEND_TYPE(CpuBackend, hal_be_backend)
HAL_BACKEND_TYPE(CpuDevice, hal_be_device)
HAL_BACKEND_TYPE(CpuPartition, hal_be_partition)
HAL_BACKEND_TYPE(CpuBuffer, hal_be_buffer)
HAL_BACKEND_TYPE(CpuStream, hal_be_stream)
HAL_BACKEND_TYPE(CpuEvent, hal_be_event)
HAL_BACKEND_TYPE(CpuModule, hal_be_module)
HAL_BACKEND_TYPE(CpuKernel, hal_be_kernel)
HAL_BACKEND_TYPE(CpuComm, hal_be_comm)

namespace {

hal_error* cpu_create(const hal_host_api* host, CpuBackend** out) {
  halcyon::plugin::host() = host;
  HAL_BACKEND_GUARD({
    auto* b = new CpuBackend;
    b->cpus = allowed_cpus();
    *out = b;
    return nullptr;
  })
}

void cpu_destroy(CpuBackend* b) { delete b; }

hal_error* cpu_device_count(CpuBackend*, uint32_t* out) {
  *out = 1;
  return nullptr;
}

hal_error* cpu_device_open(CpuBackend* b, uint32_t index, CpuDevice** out) {
  HAL_BACKEND_GUARD({
    auto* d = new CpuDevice;
    d->cpus = b->cpus;
    *out = d;
    return nullptr;
  })
}

// Host modules are this process's own functions: built for "host" (any CPU) or this arch.
hal_error* cpu_device_can_run(CpuDevice*, uint32_t, const char* target, bool* yes, char* reason, size_t capacity) {
  *yes = std::strcmp(target, "host") == 0 || std::strcmp(target, kArch) == 0;
  if (!*yes) std::snprintf(reason, capacity, "host code for %s does not run on a %s CPU", target, kArch);
  return nullptr;
}

void cpu_device_close(CpuDevice* d) {
  d->synchronize_all();
  delete d;
}

hal_error* cpu_device_info(CpuDevice* d, hal_device_info* info) {
  std::snprintf(info->name, sizeof info->name, "host CPU (%zu threads)", d->cpus.size());
  std::snprintf(info->vendor, sizeof info->vendor, "CPU");
  std::snprintf(info->arch, sizeof info->arch, "%s", kArch);
  info->compute_units = uint32_t(d->cpus.size());
  info->simd_width = 1;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  info->memory_bytes = pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
  info->max_shared_per_block = kMaxSharedPerBlock;
  info->max_threads_per_block = kMaxThreadsPerBlock;
  info->clock_khz = 0;
  std::snprintf(info->capabilities, sizeof info->capabilities,
                "module.host partition.thread_set partition.enforced events.timing memory.host_coherent comm");
  return nullptr;
}

hal_error* cpu_buffer_create(CpuDevice* d, const hal_buffer_desc* desc, CpuBuffer** out,
                             uint64_t* address, void** host) {
  HAL_BACKEND_GUARD({
    void* p = nullptr;
    if (desc->size > 0) {
      size_t align = desc->alignment > 64 ? size_t(desc->alignment) : 64;
      // aligned_alloc wants a multiple of the alignment; a size that wraps when rounded up
      // would allocate almost nothing for a buffer reported at its full size.
      if (desc->size > SIZE_MAX - (align - 1))
        return error(HAL_OUT_OF_MEMORY, fmt::format("cpu: {} bytes (alignment {}) cannot be allocated: rounding "
                                                    "it up to the alignment overflows", desc->size, align));
      size_t bytes = (size_t(desc->size) + align - 1) / align * align;
      p = std::aligned_alloc(align, bytes);
      if (!p)
        return error(HAL_OUT_OF_MEMORY, fmt::format("cpu: could not allocate {} bytes", desc->size));
    }
    *out = new CpuBuffer{d, p, desc->size, true, nullptr};
    *address = reinterpret_cast<uint64_t>(p);
    *host = p;
    return nullptr;
  })
}

// Host memory someone else allocated (a NumPy array's, through DLPack): any address is the
// CPU device's memory, nothing to check.
hal_error* cpu_buffer_import(CpuDevice* d, const hal_buffer_import_desc* desc, CpuBuffer** out, void** host) {
  HAL_BACKEND_GUARD({
    void* p = reinterpret_cast<void*>(desc->device_address);
    *out = new CpuBuffer{d, p, desc->size, false, nullptr};
    *host = p;
    return nullptr;
  })
}

void cpu_buffer_destroy(CpuBuffer* b) {
  // Queued work may still use it, and kernels take raw addresses that cannot be reference
  // counted, so the buffer goes only once every stream of the device has drained (imported
  // memory too: its owner frees it after this).
  b->device->synchronize_all();
  if (b->owned && !b->shm) std::free(b->data);
  delete b;  // a shared-memory buffer unmaps (and its creator unlinks) here
}

hal_error* cpu_stream_create(CpuDevice* d, CpuPartition* part, const hal_stream_desc*,
                             CpuStream** out) {
  HAL_BACKEND_GUARD({
    auto owned = std::make_shared<CpuStream>();
    CpuStream* s = owned.get();
    s->device = d;
    s->pool = part ? part->pool : d->whole_pool();
    s->worker = std::thread([s] { s->run(); });
    {
      std::lock_guard lock(d->mu);
      d->streams.emplace(s, std::move(owned));
    }
    *out = s;
    return nullptr;
  })
}

void cpu_stream_destroy(CpuStream* s) {
  {
    std::lock_guard lock(s->mu);
    s->stop = true;
  }
  s->cv_work.notify_all();
  s->worker.join();
  std::shared_ptr<CpuStream> last;  // freed here, unless a synchronize_all still holds it
  {
    std::lock_guard lock(s->device->mu);
    auto it = s->device->streams.find(s);
    last = std::move(it->second);
    s->device->streams.erase(it);
  }
}

hal_error* cpu_stream_synchronize(CpuStream* s) {
  s->drain();
  return nullptr;
}

char* at(CpuBuffer* b, uint64_t off) { return static_cast<char*>(b->data) + off; }

hal_error* cpu_stream_write(CpuStream* s, CpuBuffer* dst, uint64_t off, const void* src,
                            uint64_t size) {
  HAL_BACKEND_GUARD({
    s->push([=] { std::memcpy(at(dst, off), src, size); });
    return nullptr;
  })
}

hal_error* cpu_stream_read(CpuStream* s, CpuBuffer* src, uint64_t off, void* dst,
                           uint64_t size) {
  HAL_BACKEND_GUARD({
    s->push([=] { std::memcpy(dst, at(src, off), size); });
    return nullptr;
  })
}

hal_error* cpu_stream_copy(CpuStream* s, CpuBuffer* dst, uint64_t doff, CpuBuffer* src,
                           uint64_t soff, uint64_t size) {
  HAL_BACKEND_GUARD({
    s->push([=] { std::memcpy(at(dst, doff), at(src, soff), size); });
    return nullptr;
  })
}

hal_error* cpu_stream_fill(CpuStream* s, CpuBuffer* dst, uint64_t off, uint64_t size,
                           uint32_t pattern, uint32_t psize) {
  HAL_BACKEND_GUARD({
    s->push([=] {
      char* p = at(dst, off);
      if (psize == 1) {
        std::memset(p, int(pattern & 0xFF), size);
        return;
      }
      for (uint64_t i = 0; i < size; i += psize) std::memcpy(p + i, &pattern, psize);
    });
    return nullptr;
  })
}

hal_error* cpu_stream_wait_event(CpuStream* s, CpuEvent* handle) {
  HAL_BACKEND_GUARD({
    std::shared_ptr<EventState> ev = handle->state;
    uint64_t gen;
    {
      std::lock_guard lock(ev->mu);
      gen = ev->recorded;
    }
    s->push([ev, gen] {
      std::unique_lock lock(ev->mu);
      ev->cv.wait(lock, [&] { return ev->completed >= gen; });
    });
    return nullptr;
  })
}

hal_error* cpu_stream_launch(CpuStream* s, CpuKernel* k, const hal_launch_desc* d) {
  HAL_BACKEND_GUARD({
    // Blocks are numbered by one 64-bit index: a grid with more blocks would wrap to a few
    // (or none) and the launch would silently do almost nothing.
    uint64_t blocks = 0;
    if (__builtin_mul_overflow(uint64_t(d->grid[0]), uint64_t(d->grid[1]), &blocks) ||
        __builtin_mul_overflow(blocks, uint64_t(d->grid[2]), &blocks))
      return error(HAL_INVALID_ARGUMENT, fmt::format("cpu: grid ({}, {}, {}) has more than 2^64 blocks", d->grid[0],
                                                     d->grid[1], d->grid[2]));
    // The blob is copied: the caller may reuse its memory as soon as launch returns.
    auto args = std::make_shared<std::vector<unsigned char>>(
        static_cast<const unsigned char*>(d->args), static_cast<const unsigned char*>(d->args) + d->args_size);
    hal_host_launch_ctx base{};
    base.struct_size = sizeof base;
    std::memcpy(base.grid, d->grid, sizeof base.grid);
    std::memcpy(base.block, d->block, sizeof base.block);
    base.shared_bytes = d->shared_bytes;
    hal_host_kernel_fn fn = k->fn;
    auto pool = s->pool;
    s->push([fn, args, base, pool] {
      uint64_t gx = base.grid[0], gy = base.grid[1], gz = base.grid[2];
      std::vector<std::vector<unsigned char>> scratch(pool->size());
      pool->parallel_for(gx * gy * gz, [&](uint64_t i, unsigned worker) {
        hal_host_launch_ctx ctx = base;
        ctx.block_id[0] = uint32_t(i % gx);
        ctx.block_id[1] = uint32_t((i / gx) % gy);
        ctx.block_id[2] = uint32_t(i / (gx * gy));
        if (ctx.shared_bytes) {
          auto& sh = scratch[worker];
          sh.assign(ctx.shared_bytes, 0);
          ctx.shared = sh.data();
        }
        fn(&ctx, args->data());
      });
    });
    return nullptr;
  })
}

hal_error* cpu_event_create(CpuDevice*, const hal_event_desc*, CpuEvent** out) {
  HAL_BACKEND_GUARD({
    *out = new CpuEvent;
    return nullptr;
  })
}

void cpu_event_destroy(CpuEvent* ev) { delete ev; }

hal_error* cpu_event_record(CpuEvent* handle, CpuStream* s) {
  HAL_BACKEND_GUARD({
    std::shared_ptr<EventState> ev = handle->state;
    uint64_t gen;
    {
      std::lock_guard lock(ev->mu);
      gen = ++ev->recorded;
    }
    s->push([ev, gen] {
      {
        std::lock_guard lock(ev->mu);
        if (gen > ev->completed) {
          ev->completed = gen;
          ev->when = std::chrono::steady_clock::now();
        }
      }
      ev->cv.notify_all();
    });
    return nullptr;
  })
}

hal_error* cpu_event_query(CpuEvent* handle, bool* complete) {
  EventState* ev = handle->state.get();
  std::lock_guard lock(ev->mu);
  *complete = ev->completed >= ev->recorded;
  return nullptr;
}

hal_error* cpu_event_synchronize(CpuEvent* handle) {
  EventState* ev = handle->state.get();
  std::unique_lock lock(ev->mu);
  uint64_t gen = ev->recorded;
  ev->cv.wait(lock, [&] { return ev->completed >= gen; });
  return nullptr;
}

hal_error* cpu_event_elapsed_ms(CpuEvent* ha, CpuEvent* hb, float* ms) {
  EventState *a = ha->state.get(), *b = hb->state.get();
  std::scoped_lock lock(a->mu, b->mu);
  if (a->completed < a->recorded || b->completed < b->recorded)
    return error(HAL_FAILED_PRECONDITION, "cpu: hal_event_elapsed_ms: an event has not completed yet");
  *ms = std::chrono::duration<float, std::milli>(b->when - a->when).count();
  return nullptr;
}

hal_error* cpu_module_load(CpuDevice*, const hal_module_desc* desc, CpuModule** out) {
  HAL_BACKEND_GUARD({
    std::string name = desc->name ? desc->name : "<unnamed module>";
    std::string target = desc->target;
    if (target != "host" && target != kArch)
      return error(HAL_ARCH_MISMATCH, fmt::format("cpu: module '{}' targets '{}'; this device runs 'host' ({}) modules",
                                                  name, target, kArch));
    if (desc->size < HAL_HOST_MODULE_IMAGE_MIN_SIZE)
      return error(HAL_INVALID_ARGUMENT, fmt::format("cpu: module '{}': {} bytes is too small for a hal_host_module_image",
                                                     name, desc->size));
    auto* img = static_cast<const hal_host_module_image*>(desc->data);
    if (img->struct_size < HAL_HOST_MODULE_IMAGE_MIN_SIZE || img->struct_size > desc->size)
      return error(HAL_INVALID_ARGUMENT, fmt::format("cpu: module '{}': image struct_size {} is not valid (data is {} bytes)",
                                                     name, img->struct_size, desc->size));
    if (img->kernel_count > 0 && !img->kernels)
      return error(HAL_INVALID_ARGUMENT, fmt::format("cpu: module '{}': kernels is NULL", name));
    auto m = std::make_unique<CpuModule>();
    for (uint32_t i = 0; i < img->kernel_count; ++i) {
      const hal_host_kernel_entry& k = img->kernels[i];
      if (!k.name || !k.fn || (k.arg_count && !k.args))
        return error(HAL_INVALID_ARGUMENT, fmt::format("cpu: module '{}': kernel #{} lacks a name, function or argument list", name, i));
      for (uint32_t a = 0; a < k.arg_count; ++a)
        if (uint64_t(k.args[a].offset) + k.args[a].size > k.args_size)
          return error(HAL_INVALID_ARGUMENT, fmt::format("cpu: module '{}': kernel '{}' argument {} lies past its {}-byte blob",
                                                         name, k.name, a, k.args_size));
      m->kernels[k.name] = CpuKernelDef{k.fn, k.args_size, std::vector<hal_kernel_arg>(k.args, k.args + k.arg_count)};
    }
    *out = m.release();
    return nullptr;
  })
}

void cpu_module_destroy(CpuModule* m) { delete m; }

hal_error* cpu_kernel_get(CpuModule* m, const char* name, CpuKernel** out,
                          hal_kernel_info* info, hal_kernel_arg* args, uint32_t cap) {
  HAL_BACKEND_GUARD({
    auto it = m->kernels.find(name);
    if (it == m->kernels.end()) {
      std::string names;
      for (auto& [n, _] : m->kernels) names += (names.empty() ? "" : ", ") + n;
      return error(HAL_NOT_FOUND, fmt::format("cpu: no kernel '{}' in module (it has: {})", name, names));
    }
    const auto& e = it->second;
    const auto arg_count = uint32_t(e.args.size());
    if (arg_count > cap)
      return error(HAL_OUT_OF_RANGE, fmt::format("cpu: kernel '{}' has {} arguments, more than {}", name, arg_count, cap));
    info->arg_count = arg_count;
    info->args_size = e.args_size;
    info->max_threads_per_block = kMaxThreadsPerBlock;
    for (uint32_t i = 0; i < arg_count; ++i) args[i] = e.args[i];
    *out = new CpuKernel{e.fn};
    return nullptr;
  })
}

void cpu_kernel_destroy(CpuKernel* k) { delete k; }

hal_error* cpu_partition_split(CpuDevice* d, const hal_partition_desc* desc,
                               CpuPartition** part, hal_partition_info* pinfo,
                               CpuPartition** rem, hal_partition_info* rinfo) {
  HAL_BACKEND_GUARD({
    std::lock_guard lock(d->mu);
    std::vector<int> free_cpus;
    for (int c : d->cpus)
      if (!d->partitioned.count(c)) free_cpus.push_back(c);
    uint32_t want = desc->units;
    if (want > free_cpus.size() || (rem && want == free_cpus.size()))
      return error(HAL_OUT_OF_RANGE,
                   fmt::format("cpu: asked for {} cores{}; {} of {} are not in another partition", want,
                               rem ? " plus a non-empty remainder" : "", free_cpus.size(), d->cpus.size()));
    auto make = [&](std::vector<int> cpus, hal_partition_info* info) {
      auto* p = new CpuPartition{d, std::make_shared<ThreadPool>(unsigned(cpus.size()), cpus), cpus};
      for (int c : cpus) d->partitioned.insert(c);
      info->units_requested = uint32_t(cpus.size());
      info->units_granted = uint32_t(cpus.size());
      info->mechanism = HAL_PARTITION_THREAD_SET;
      info->enforced = p->pool->pinned() ? 1 : 0;
      info->granularity = 1;
      info->first_unit = uint32_t(cpus.front());
      return p;
    };
    *part = make(std::vector<int>(free_cpus.begin(), free_cpus.begin() + want), pinfo);
    if (rem) *rem = make(std::vector<int>(free_cpus.begin() + want, free_cpus.end()), rinfo);
    return nullptr;
  })
}

hal_error* cpu_partition_caps(CpuDevice* d, uint32_t, hal_partition_caps* out) {
  out->min_units = 1;
  out->step_units = 1;
  out->mechanism = HAL_PARTITION_THREAD_SET;
  // Threads pinned to their cores; where pinning fails (a cgroup's cpuset) the partition's
  // own info says enforced 0.
  out->enforced = 1;
  return nullptr;
}

void cpu_partition_destroy(CpuPartition* p) {
  {
    std::lock_guard lock(p->device->mu);
    for (int c : p->cpus) p->device->partitioned.erase(c);
  }
  delete p;
}

// ---- communicators ------------------------------------------------------------------------

// What an exported buffer's handle holds: the shared-memory object's name and size.
struct ShmHandle {
  uint32_t magic;
  uint32_t owner_rank;
  uint64_t size;
  char name[240];
};
static_assert(sizeof(ShmHandle) <= HAL_COMM_HANDLE_BYTES);
constexpr uint32_t kShmHandleMagic = 0x48434d53;  // "SMCH"

hal_error* comm_error(hal_status status, const std::string& what) {
  return halcyon::comm::group_error(status, CpuComm::kName, what);
}

hal_error* cpu_comm_create(CpuDevice* d, const hal_comm_desc* desc, CpuComm** out, hal_comm_info* info) {
  HAL_BACKEND_GUARD({
    std::unique_ptr<halcyon::comm::ShmGroup> g;
    if (hal_error* e = halcyon::comm::group_join(desc, CpuComm::kName, "shm", &g, info)) return e;
    *out = new CpuComm{d, std::move(g)};
    return nullptr;
  })
}

hal_error* cpu_comm_buffer_create(CpuComm* c, uint64_t size, CpuBuffer** out, uint64_t* address, void** host) {
  HAL_BACKEND_GUARD({
    std::unique_ptr<halcyon::comm::ShmSegment> seg;
    if (auto e = halcyon::comm::ShmSegment::create(c->group->segment_name("b"), size_t(size), true, &seg); !e.empty())
      return comm_error(HAL_OUT_OF_MEMORY, e);
    void* p = seg->data();
    *out = new CpuBuffer{c->device, p, size, true, std::move(seg)};
    *address = reinterpret_cast<uint64_t>(p);
    *host = p;
    return nullptr;
  })
}

hal_error* cpu_comm_buffer_export(CpuComm* c, CpuBuffer* b, hal_comm_handle* out) {
  HAL_BACKEND_GUARD({
    ShmHandle h{};
    h.magic = kShmHandleMagic;
    h.owner_rank = c->group->rank();
    h.size = b->size;
    if (b->shm->name().size() >= sizeof h.name) return comm_error(HAL_INTERNAL, "segment name too long");
    std::memcpy(h.name, b->shm->name().c_str(), b->shm->name().size() + 1);
    std::memcpy(out->bytes, &h, sizeof h);
    return nullptr;
  })
}

hal_error* cpu_comm_buffer_import(CpuComm* c, uint32_t peer, const hal_comm_handle* handle, CpuBuffer** out,
                                  uint64_t* size, uint64_t* address, void** host) {
  HAL_BACKEND_GUARD({
    ShmHandle h;
    if (hal_error* e = halcyon::comm::read_handle<CpuComm>(handle, kShmHandleMagic, peer, &h)) return e;
    if (h.name[sizeof h.name - 1] != '\0')
      return comm_error(HAL_INVALID_ARGUMENT, "the handle's segment name is not terminated: not made by hal_comm_buffer_export");
    std::unique_ptr<halcyon::comm::ShmSegment> seg;
    if (auto e = halcyon::comm::ShmSegment::open(h.name, size_t(h.size), &seg); !e.empty())
      return comm_error(HAL_NOT_FOUND, fmt::format("importing rank {}'s buffer: {}", peer, e));
    void* p = seg->data();
    *out = new CpuBuffer{c->device, p, h.size, true, std::move(seg)};
    *size = h.size;
    *address = reinterpret_cast<uint64_t>(p);
    *host = p;
    return nullptr;
  })
}

// Blocks: the stream drains first (so the exchange sees the work queued before it), and the
// exchange runs on this thread before later work is queued.
hal_error* cpu_comm_all_to_all(CpuComm* c, CpuStream* s, CpuBuffer* send, const uint64_t* send_offsets,
                               const uint64_t* send_sizes, CpuBuffer* recv, const uint64_t* recv_offsets,
                               const uint64_t* recv_sizes) {
  HAL_BACKEND_GUARD({
    s->drain();
    if (auto e = c->group->all_to_all(static_cast<const char*>(send->data), send_offsets, send_sizes,
                                      static_cast<char*>(recv->data), recv_offsets, recv_sizes);
        !e.empty())
      return comm_error(HAL_DEVICE_ERROR, e);
    return nullptr;
  })
}

const hal_backend_api kApi = {
    sizeof(hal_backend_api),
    nullptr,
    HAL_ABI_MAJOR,
    HAL_ABI_MINOR,
    "cpu",
    "host CPU; kernels are host functions run on a thread pool",
    HAL_BACKEND_FN(cpu_create),
    HAL_BACKEND_FN(cpu_destroy),
    HAL_BACKEND_FN(cpu_device_count),
    nullptr,  // device_resolve: "cpu:0"
    HAL_BACKEND_FN(cpu_device_open),
    HAL_BACKEND_FN(cpu_device_close),
    HAL_BACKEND_FN(cpu_device_info),
    HAL_BACKEND_FN(cpu_buffer_create),
    HAL_BACKEND_FN(cpu_buffer_destroy),
    HAL_BACKEND_FN(cpu_stream_create),
    HAL_BACKEND_FN(cpu_stream_destroy),
    HAL_BACKEND_FN(cpu_stream_synchronize),
    HAL_BACKEND_FN(cpu_stream_write),
    HAL_BACKEND_FN(cpu_stream_read),
    HAL_BACKEND_FN(cpu_stream_copy),
    HAL_BACKEND_FN(cpu_stream_fill),
    HAL_BACKEND_FN(cpu_stream_wait_event),
    HAL_BACKEND_FN(cpu_stream_launch),
    HAL_BACKEND_FN(cpu_event_create),
    HAL_BACKEND_FN(cpu_event_destroy),
    HAL_BACKEND_FN(cpu_event_record),
    HAL_BACKEND_FN(cpu_event_query),
    HAL_BACKEND_FN(cpu_event_synchronize),
    HAL_BACKEND_FN(cpu_event_elapsed_ms),
    HAL_BACKEND_FN(cpu_module_load),
    HAL_BACKEND_FN(cpu_module_destroy),
    HAL_BACKEND_FN(cpu_kernel_get),
    HAL_BACKEND_FN(cpu_kernel_destroy),
    HAL_BACKEND_FN(cpu_partition_split),
    HAL_BACKEND_FN(cpu_partition_destroy),
    nullptr,  // tensor_map_encode: no tensor copy engine
    HAL_BACKEND_FN(cpu_device_can_run),
    HAL_BACKEND_FN(cpu_partition_caps),
    HAL_BACKEND_FN(cpu_buffer_import),
    HAL_BACKEND_FN(cpu_comm_create),
    HAL_BACKEND_FN(halcyon::comm::group_destroy<CpuComm>),
    HAL_BACKEND_FN(halcyon::comm::group_barrier<CpuComm>),
    HAL_BACKEND_FN(halcyon::comm::group_all_gather<CpuComm>),
    HAL_BACKEND_FN(cpu_comm_buffer_create),
    HAL_BACKEND_FN(cpu_comm_buffer_export),
    HAL_BACKEND_FN(cpu_comm_buffer_import),
    HAL_BACKEND_FN(cpu_comm_all_to_all),
    nullptr,  // stream_import: the CPU's streams are host queues, with no native handle to wrap
    nullptr,  // stream_native: likewise
};

}  // namespace

extern "C" const hal_backend_api* halcyon_backend_api_cpu(void) { return &kApi; }
