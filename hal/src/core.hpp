// Internal to libhalcyon: core objects behind the opaque handles, the handle table, and
// helpers that every hal_* entry point uses to validate input before calling a backend.
#pragma once

#include <halcyon/hal.h>

#include <fmt/format.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string_view>
#include <string>
#include <string_view>
#include <vector>

struct hal_error_s {
  hal_status status;
  std::string message;
};

namespace halcyon::core {

// ---- errors -------------------------------------------------------------------------------
hal_error* make_error(hal_status status, std::string message);

template <typename... Args>
hal_error* err(hal_status status, fmt::format_string<Args...> f, Args&&... args) {
  return make_error(status, fmt::format(f, std::forward<Args>(args)...));
}

// Converts an exception escaping a core function into an error value.
hal_error* error_from_current_exception(const char* function);

void log(hal_log_level level, const std::string& message);
// hal_init_desc.log_level: "debug", "info", "warning" or "error" becomes the default sink's
// threshold; anything else is HAL_INVALID_ARGUMENT naming it (the threshold is unchanged).
hal_error* set_log_threshold(std::string_view name);
extern const hal_host_api kHostApi;
// hal_host_api.option: a backend's option from hal_init_desc.backend_options, or NULL.
const char* backend_option(const char* backend, const char* key);

// ---- backends -----------------------------------------------------------------------------
struct Backend {
  const hal_backend_api* api = nullptr;
  hal_be_backend* be = nullptr;
  std::string name;
  std::string source;  // "built-in" or the plugin's path
  uint32_t device_count = 0;
  void* dl = nullptr;
  // Table entries appended after ABI 1.0 are usable only if the plugin's table holds them.
  bool has_partition_split() const {
    return api->struct_size >= HAL_SIZE_THROUGH(hal_backend_api, partition_destroy) &&
           api->partition_split && api->partition_destroy;
  }
  bool has_partition_caps() const {
    return api->struct_size >= HAL_SIZE_THROUGH(hal_backend_api, partition_caps) && api->partition_caps;
  }
  bool has_buffer_import() const {
    return api->struct_size >= HAL_SIZE_THROUGH(hal_backend_api, buffer_import) && api->buffer_import;
  }
  bool has_stream_import() const {
    return api->struct_size >= HAL_SIZE_THROUGH(hal_backend_api, stream_import) && api->stream_import;
  }
  bool has_stream_native() const {
    return api->struct_size >= HAL_SIZE_THROUGH(hal_backend_api, stream_native) && api->stream_native;
  }
  bool has_tensor_map_encode() const {
    return api->struct_size >= HAL_SIZE_THROUGH(hal_backend_api, tensor_map_encode) &&
           api->tensor_map_encode;
  }
  // ABI 1.4: the communicator entries, all eight or none counts as none.
  bool has_comm() const {
    return api->struct_size >= HAL_SIZE_THROUGH(hal_backend_api, comm_all_to_all) && api->comm_create &&
           api->comm_destroy && api->comm_barrier && api->comm_all_gather && api->comm_buffer_create &&
           api->comm_buffer_export && api->comm_buffer_import && api->comm_all_to_all;
  }
  bool has_device_can_run() const {
    return api->struct_size >= HAL_SIZE_THROUGH(hal_backend_api, device_can_run) && api->device_can_run;
  }
};

// ---- objects ------------------------------------------------------------------------------
enum class ObjType : uint8_t {
  Device = 1, Buffer, Stream, Event, Module, Kernel, Partition, Comm
};
const char* type_name(ObjType t);

struct Object {
  explicit Object(ObjType t) : type(t) {}
  virtual ~Object() = default;
  Object(const Object&) = delete;
  Object& operator=(const Object&) = delete;
  const ObjType type;
  std::atomic<uint32_t> user_refs{1};
  uint64_t handle = 0;
};

struct DeviceObj final : Object {
  DeviceObj() : Object(ObjType::Device) {}
  ~DeviceObj() override;
  Backend* backend = nullptr;
  hal_be_device* be = nullptr;
  std::string uri;
  hal_device_info info{};
  std::atomic<int> live_children{0};  // for the "released before its children" report
  std::mutex partition_mu;            // guards reserved_units
  uint32_t reserved_units = 0;        // held by live partitions (hal.h: partitions reserve)
  const hal_backend_api& api() const { return *backend->api; }
};

// Whether the device's capability tags hold `tag` (a whole, space-separated word).
bool has_capability(const DeviceObj& dev, std::string_view tag);

// Every object but a device belongs to one; it keeps the device alive until it goes.
struct DeviceChild : Object {
  DeviceChild(ObjType t, std::shared_ptr<DeviceObj> d) : Object(t), device(std::move(d)) {
    device->live_children.fetch_add(1);
  }
  ~DeviceChild() override { device->live_children.fetch_sub(1); }
  std::shared_ptr<DeviceObj> device;
  const hal_backend_api& api() const { return device->api(); }
};

struct PartitionObj final : DeviceChild {
  explicit PartitionObj(std::shared_ptr<DeviceObj> d) : DeviceChild(ObjType::Partition, std::move(d)) {}
  ~PartitionObj() override;
  hal_be_partition* be = nullptr;  // NULL: a soft partition of the core's (no enforcement)
  hal_partition_info info{};
  uint32_t reserved = 0;           // units it holds of the device's (returned on destruction)
};

struct CommObj final : DeviceChild {
  explicit CommObj(std::shared_ptr<DeviceObj> d) : DeviceChild(ObjType::Comm, std::move(d)) {}
  ~CommObj() override;
  hal_be_comm* be = nullptr;
  hal_comm_info info{};
};

struct BufferObj final : DeviceChild {
  explicit BufferObj(std::shared_ptr<DeviceObj> d) : DeviceChild(ObjType::Buffer, std::move(d)) {}
  ~BufferObj() override;
  hal_be_buffer* be = nullptr;
  uint32_t kind = HAL_MEMORY_DEVICE;  // hal_memory_kind
  uint64_t size = 0;
  uint64_t address = 0;
  void* host = nullptr;
  // Imported memory (hal_buffer_import): called once after the backend's buffer_destroy.
  hal_release_fn release = nullptr;
  void* release_user = nullptr;
  std::shared_ptr<CommObj> exported_by;  // set when made by hal_comm_buffer_create
};

struct StreamObj final : DeviceChild {
  explicit StreamObj(std::shared_ptr<DeviceObj> d) : DeviceChild(ObjType::Stream, std::move(d)) {}
  ~StreamObj() override;
  hal_be_stream* be = nullptr;
  std::shared_ptr<PartitionObj> partition;
};

struct EventObj final : DeviceChild {
  explicit EventObj(std::shared_ptr<DeviceObj> d) : DeviceChild(ObjType::Event, std::move(d)) {}
  ~EventObj() override;
  hal_be_event* be = nullptr;
  bool timing = true;
  std::atomic<bool> recorded{false};
};

struct ModuleObj final : DeviceChild {
  explicit ModuleObj(std::shared_ptr<DeviceObj> d) : DeviceChild(ObjType::Module, std::move(d)) {}
  ~ModuleObj() override;
  hal_be_module* be = nullptr;
  std::string name;
};

struct KernelObj final : DeviceChild {
  KernelObj(std::shared_ptr<DeviceObj> d, std::shared_ptr<ModuleObj> m)
      : DeviceChild(ObjType::Kernel, std::move(d)), module(std::move(m)) {}
  ~KernelObj() override;
  hal_be_kernel* be = nullptr;
  std::shared_ptr<ModuleObj> module;
  hal_kernel_info info{};
  std::vector<hal_kernel_arg> args;
};

template <typename T> constexpr ObjType type_of();
template <> constexpr ObjType type_of<DeviceObj>() { return ObjType::Device; }
template <> constexpr ObjType type_of<BufferObj>() { return ObjType::Buffer; }
template <> constexpr ObjType type_of<StreamObj>() { return ObjType::Stream; }
template <> constexpr ObjType type_of<EventObj>() { return ObjType::Event; }
template <> constexpr ObjType type_of<ModuleObj>() { return ObjType::Module; }
template <> constexpr ObjType type_of<KernelObj>() { return ObjType::Kernel; }
template <> constexpr ObjType type_of<PartitionObj>() { return ObjType::Partition; }
template <> constexpr ObjType type_of<CommObj>() { return ObjType::Comm; }

// ---- handle table -------------------------------------------------------------------------
// A handle encodes type (8 bits), generation (24 bits) and slot+1 (32 bits). A released
// handle's slot gets a new generation, so a stale handle is recognised, never dereferenced.
uint64_t handle_insert(std::shared_ptr<Object> obj);
// Looks a handle up; on failure returns null and sets *error (naming `what` and the value).
std::shared_ptr<Object> handle_lookup(uint64_t h, ObjType type, const char* function,
                                      const char* what, hal_error** error);
hal_error* handle_retain(uint64_t h, ObjType type, const char* function);
// Drops one user reference; the object is destroyed once no call or child still holds it.
hal_error* handle_release(uint64_t h, ObjType type, const char* function);

template <typename T, typename H>
std::shared_ptr<T> lookup(H handle, const char* function, const char* what, hal_error** error) {
  auto obj = handle_lookup(reinterpret_cast<uint64_t>(handle), type_of<T>(), function, what, error);
  return std::static_pointer_cast<T>(obj);
}

template <typename H, typename T>
H to_handle(const std::shared_ptr<T>& obj) {
  return reinterpret_cast<H>(obj->handle);
}

// ---- struct versioning --------------------------------------------------------------------
// Copies a caller's input struct into a full-size local one: fields past its struct_size keep
// the defaults already in `out`; extra bytes from a newer caller are ignored.
template <typename T>
hal_error* read_struct(const T* in, size_t min_size, T* out, const char* function,
                       const char* type_name) {
  if (in == nullptr)
    return err(HAL_INVALID_ARGUMENT, "{}: {} pointer is NULL", function, type_name);
  if (in->struct_size < min_size)
    return err(HAL_VERSION_MISMATCH,
               "{}: {}.struct_size is {}, smaller than its first version ({} bytes): "
               "set struct_size = sizeof({})",
               function, type_name, in->struct_size, min_size, type_name);
  std::memcpy(static_cast<void*>(out), in, std::min(in->struct_size, sizeof(T)));
  out->struct_size = sizeof(T);
  return nullptr;
}

// Checks an output struct's header; the caller later calls write_struct.
template <typename T>
hal_error* check_out_struct(const T* out, size_t min_size, const char* function,
                            const char* type_name) {
  if (out == nullptr)
    return err(HAL_INVALID_ARGUMENT, "{}: output {} pointer is NULL", function, type_name);
  if (out->struct_size < min_size)
    return err(HAL_VERSION_MISMATCH,
               "{}: output {}.struct_size is {}, smaller than its first version ({} bytes)",
               function, type_name, out->struct_size, min_size);
  return nullptr;
}

// Writes only the fields that fit in the caller's struct; its struct_size and next stay.
template <typename T>
void write_struct(const T& full, T* out) {
  size_t n = std::min(out->struct_size, sizeof(T));
  size_t header = offsetof(T, next) + sizeof(out->next);
  if (n > header)
    std::memcpy(reinterpret_cast<char*>(out) + header, reinterpret_cast<const char*>(&full) + header,
                n - header);
}

// ---- registry -----------------------------------------------------------------------------
hal_error* registry_ensure_init();
// Finds a backend by URI scheme; fills the selector part.
hal_error* registry_resolve(const char* uri, Backend** backend, uint32_t* index,
                            std::string* canonical_uri);

}  // namespace halcyon::core

// In a hal_* body (with `fn` its name): looks `handle` up as a T named `what` into `var`,
// returning the error when it is not one.
#define LOOKUP(var, T, handle, what)                  \
  hal_error* var##_e = nullptr;                       \
  auto var = lookup<T>(handle, fn, what, &var##_e);   \
  if (!var) return var##_e

// Every hal_* body runs inside this: no exception crosses the C ABI.
#define HAL_CORE_GUARD(function, ...)                                   \
  try {                                                                 \
    __VA_ARGS__                                                         \
  } catch (...) {                                                       \
    return ::halcyon::core::error_from_current_exception(function);     \
  }

namespace halcyon::core {

// The entry points every handle type has, with the same checks wherever they are defined:
// retain and release through the handle table, get_info copying the object's `info` (the
// device's or communicator's, filled when it was made) into the caller's struct.
template <ObjType type, typename Handle>
hal_error* retain_entry(Handle h, const char* fn) {
  HAL_CORE_GUARD(fn, { return handle_retain(reinterpret_cast<uint64_t>(h), type, fn); })
}
template <ObjType type, typename Handle>
hal_error* release_entry(Handle h, const char* fn) {
  HAL_CORE_GUARD(fn, { return handle_release(reinterpret_cast<uint64_t>(h), type, fn); })
}
template <typename Obj, typename Handle, typename Info>
hal_error* get_info_entry(Handle h, Info* out, size_t min_size, const char* fn, const char* what,
                          const char* info_name) {
  HAL_CORE_GUARD(fn, {
    LOOKUP(obj, Obj, h, what);
    if (hal_error* e = check_out_struct(out, min_size, fn, info_name)) return e;
    write_struct(obj->info, out);
    return nullptr;
  })
}

}  // namespace halcyon::core

// Defines hal_<name>_retain, hal_<name>_release and hal_<name>_get_info (hal.h) for one handle
// type, through the shared entries above: hal_device_*, hal_comm_*.
#define HAL_DEFINE_HANDLE_ENTRIES(name, Type, Obj, info_min_size, what)                                   \
  HAL_API hal_error* hal_##name##_retain(hal_##name h) {                                                  \
    return ::halcyon::core::retain_entry<::halcyon::core::ObjType::Type>(h, "hal_" #name "_retain");      \
  }                                                                                                       \
  HAL_API hal_error* hal_##name##_release(hal_##name h) {                                                 \
    return ::halcyon::core::release_entry<::halcyon::core::ObjType::Type>(h, "hal_" #name "_release");    \
  }                                                                                                       \
  HAL_API hal_error* hal_##name##_get_info(hal_##name h, hal_##name##_info* out) {                        \
    return ::halcyon::core::get_info_entry<::halcyon::core::Obj>(h, out, info_min_size,                   \
                                                                 "hal_" #name "_get_info", what,          \
                                                                 "hal_" #name "_info");                   \
  }
