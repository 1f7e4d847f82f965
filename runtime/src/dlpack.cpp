// DLPack export and import (halcyon/dlpack.h says the rules).
#include <halcyon/dlpack.h>
#include <halcyon/runtime/dlpack.hpp>

#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <string>

namespace halcyon::rt {
namespace {

using ops::DType;

// hrt_dtype / ops::DType <-> DLPack's (code, bits), lanes 1. DLPack 0.6-0.8 has no FP8 type, so
// e4m3 exports as its bits, uint8 (the row after u8's: an import without an override takes the
// first row that matches, u8), and imports with an override (halcyon/dlpack.h).
struct DTypeRow {
  DType dtype;
  uint8_t code;
  uint8_t bits;
};
constexpr DTypeRow kDTypes[] = {
    {DType::f32, kDLFloat, 32}, {DType::f16, kDLFloat, 16}, {DType::bf16, kDLBfloat, 16}, {DType::i32, kDLInt, 32},
    {DType::i64, kDLInt, 64},   {DType::u8, kDLUInt, 8},    {DType::f64, kDLFloat, 64},   {DType::e4m3, kDLUInt, 8},
};

// hal URI scheme <-> DLPack device type.
struct DeviceRow {
  const char* scheme;
  DLDeviceType type;
};
// kDLOneAPI (14, DLPack 0.7 and later; Debian 12's dlpack.h is 0.6): a oneAPI USM pointer, as
// PyTorch's XPU tensors give theirs; the Level Zero backend imports it (hal_buffer_import).
constexpr auto kDLOneAPIDevice = DLDeviceType(14);
constexpr DeviceRow kDevices[] = {{"cpu", kDLCPU}, {"cuda", kDLCUDA}, {"hip", kDLROCM}, {"ze", kDLOneAPIDevice}};

std::string dl_device_name(DLDevice d) {
  for (const DeviceRow& r : kDevices)
    if (r.type == d.device_type) return fmt::format("{}:{}", r.scheme, d.device_id);
  return fmt::format("DLPack device type {} id {}", int(d.device_type), d.device_id);
}

std::string list(const int64_t* v, int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += fmt::format("{}{}", i ? ", " : "", v[i]);
  return s + "]";
}

struct Exported {
  DLManagedTensor managed{};
  int64_t shape[HRT_MAX_RANK] = {};
  int64_t strides[HRT_MAX_RANK] = {};
  Buffer buffer;  // the reference the consumer holds
};

void delete_exported(DLManagedTensor* m) { delete static_cast<Exported*>(m->manager_ctx); }

// hal_buffer_import's release: the producer's deleter, once the buffer is gone.
void release_managed(void* user) {
  auto* m = static_cast<DLManagedTensor*>(user);
  if (m->deleter) m->deleter(m);
}

Error bad(std::string_view name, std::string message) {
  return Error(HAL_INVALID_ARGUMENT, fmt::format("DLPack tensor '{}': {}", name, message));
}

}  // namespace

Result<DLDevice> dlpack_device(const Device& device) {
  auto info = device.info();
  if (!info) return info.error();
  std::string_view uri = info->uri;
  const size_t colon = uri.find(':');
  std::string_view scheme = uri.substr(0, colon);
  int id = 0;
  if (colon != std::string_view::npos) {
    std::string rest(uri.substr(colon + 1));
    char* end = nullptr;
    long v = std::strtol(rest.c_str(), &end, 10);
    if (rest.empty() || *end != '\0' || v < 0 || v > std::numeric_limits<int32_t>::max())
      return Error(HAL_UNSUPPORTED, fmt::format("{}: DLPack has no device for this URI", uri));
    id = int(v);
  }
  for (const DeviceRow& r : kDevices)
    if (scheme == r.scheme) return DLDevice{r.type, id};
  return Error(HAL_UNSUPPORTED, fmt::format("{}: DLPack has no device type for the '{}' backend", uri, scheme));
}

Result<DLManagedTensor*> to_dlpack(const Device& device, const ops::Tensor& t) {
  auto dev = dlpack_device(device);
  if (!dev) return dev.error();
  if (t.shape.size() > HRT_MAX_RANK)
    return Error(HAL_INVALID_ARGUMENT, fmt::format("to_dlpack: rank {} is above {}", t.shape.size(), HRT_MAX_RANK));
  auto info = t.buffer.info();
  if (!info) return info.error();
  // The consumer takes the pointer as memory of `device`: another device's address would be
  // read as this one's (on the CPU, a GPU address dereferenced).
  auto device_info = device.info();
  if (!device_info) return device_info.error();
  if (std::string_view(info->device_uri) != device_info->uri)
    return Error(HAL_INVALID_ARGUMENT, fmt::format("to_dlpack: the buffer is memory of {}, the export is for {}",
                                                   info->device_uri, device_info->uri));
  // Negative dimensions and sizes past 2^63 - 1 refused, the offset compared without wrapping.
  if (Status in = ops::check_in_buffer(t, info->size, "to_dlpack: the tensor"); !in) return in.error();
  auto e = std::make_unique<Exported>();
  e->buffer = t.buffer;
  const int n = int(t.shape.size());
  int64_t stride = 1;
  for (int i = n - 1; i >= 0; --i) {
    e->shape[i] = t.shape[size_t(i)];
    e->strides[i] = stride;
    // With a zero dimension the byte count is 0 whatever the others are, but the strides,
    // over dimensions taken as at least 1, must still fit DLPack's int64.
    if (i > 0 && __builtin_mul_overflow(stride, std::max<int64_t>(t.shape[size_t(i)], 1), &stride))
      return Error(HAL_OUT_OF_RANGE, fmt::format("to_dlpack: the strides of {} overflow int64", t.shape_string()));
  }
  DLTensor& d = e->managed.dl_tensor;
  d.data = reinterpret_cast<void*>(info->device_address + t.offset);
  d.device = *dev;
  d.ndim = n;
  for (const DTypeRow& r : kDTypes)
    if (r.dtype == t.dtype) d.dtype = DLDataType{r.code, r.bits, 1};
  d.shape = e->shape;
  d.strides = e->strides;
  d.byte_offset = 0;
  e->managed.manager_ctx = e.get();
  e->managed.deleter = delete_exported;
  return &e.release()->managed;
}

Result<ops::Tensor> from_dlpack(const Device& device, DLManagedTensor* managed, std::string_view name,
                                std::optional<DType> as, uint32_t import_flags) {
  if (!managed) return bad(name, "the DLManagedTensor is NULL");
  const DLTensor& d = managed->dl_tensor;
  auto want = dlpack_device(device);
  if (!want) return want.error();
  if (d.device.device_type != want->device_type || d.device.device_id != want->device_id)
    return bad(name, fmt::format("it is on {}, the device is {}", dl_device_name(d.device), dl_device_name(*want)));
  if (d.ndim < 0 || d.ndim > HRT_MAX_RANK) return bad(name, fmt::format("rank {} is not 0..{}", d.ndim, HRT_MAX_RANK));
  if (d.ndim > 0 && !d.shape) return bad(name, fmt::format("rank {} with a NULL shape", d.ndim));
  std::optional<DType> dtype = as;
  if (as) {  // any one-lane type of the same size (uint16 as bf16), read as `as`
    if (d.dtype.lanes != 1 || d.dtype.bits != 8 * ops::dtype_size(*as))
      return bad(name, fmt::format("cannot be read as {}: its elements are {} bits x {} lanes, not {} bits",
                                   ops::dtype_name(*as), int(d.dtype.bits), int(d.dtype.lanes), 8 * ops::dtype_size(*as)));
  } else {
    for (const DTypeRow& r : kDTypes)
      if (!dtype && d.dtype.code == r.code && d.dtype.bits == r.bits && d.dtype.lanes == 1) dtype = r.dtype;
  }
  if (!dtype)
    return bad(name, fmt::format("dtype (code {}, {} bits, {} lanes) has no halcyon dtype", int(d.dtype.code),
                                 int(d.dtype.bits), int(d.dtype.lanes)));
  ops::Tensor t;
  t.dtype = *dtype;
  uint64_t numel = 1;
  bool overflow = false;
  for (int i = 0; i < d.ndim; ++i) {
    if (d.shape[i] < 0) return bad(name, fmt::format("dimension {} is {}", i, d.shape[i]));
    overflow |= d.shape[i] != 0 && numel > std::numeric_limits<uint64_t>::max() / 16 / uint64_t(d.shape[i]);
    numel *= uint64_t(d.shape[i]);
    t.shape.push_back(d.shape[i]);
  }
  if (overflow) return bad(name, fmt::format("shape {} has more bytes than an address space", list(d.shape, d.ndim)));
  if (d.strides && numel > 0) {
    int64_t expect = 1;
    for (int i = d.ndim - 1; i >= 0; --i) {
      if (d.shape[i] != 1 && d.strides[i] != expect)
        return bad(name, fmt::format("it is not contiguous (shape {}, strides {}; row-major needs {} at dimension {}): "
                                     "make it contiguous first (torch: .contiguous())",
                                     list(d.shape, d.ndim), list(d.strides, d.ndim), expect, i));
      expect *= d.shape[i];
    }
  }
  const uint64_t bytes = numel * ops::dtype_size(*dtype);
  const uint64_t address = reinterpret_cast<uint64_t>(d.data) + d.byte_offset;
  if (bytes > 0 && !d.data) return bad(name, "data is NULL");
  auto b = device.import_memory(bytes > 0 ? address : 0, bytes, release_managed, managed, import_flags);
  if (!b) return Error(b.error().status(), fmt::format("DLPack tensor '{}': {}", name, b.error().message()));
  t.buffer = std::move(*b);
  return t;
}

}  // namespace halcyon::rt

// ---- C ABI ----

using namespace halcyon;

namespace {
hal_error* to_c(const Error& e) { return hal_error_new(e.status(), e.message().c_str()); }
}  // namespace

extern "C" {

HAL_API hal_error* hrt_dlpack_export(hal_device device, const hrt_tensor* tensor, DLManagedTensor** out) {
  if (!out) return hal_error_new(HAL_INVALID_ARGUMENT, "hrt_dlpack_export: out is NULL");
  *out = nullptr;
  if (!tensor) return hal_error_new(HAL_INVALID_ARGUMENT, "hrt_dlpack_export: tensor is NULL");
  if (tensor->struct_size < HRT_TENSOR_MIN_SIZE || tensor->struct_size > 4096)
    return hal_error_new(HAL_VERSION_MISMATCH, fmt::format("hrt_dlpack_export: hrt_tensor.struct_size is {}, this "
                                                           "runtime takes {} or more", tensor->struct_size,
                                                           HRT_TENSOR_MIN_SIZE).c_str());
  if (tensor->dtype > HRT_E4M3 || tensor->rank > HRT_MAX_RANK)
    return hal_error_new(HAL_INVALID_ARGUMENT, fmt::format("hrt_dlpack_export: dtype {} or rank {} out of range",
                                                           tensor->dtype, tensor->rank).c_str());
  if (hal_error* e = hal_device_retain(device)) return e;
  Device dev(device);
  if (hal_error* e = hal_buffer_retain(tensor->buffer)) return e;
  ops::Tensor t;
  t.buffer = Buffer(tensor->buffer);
  t.offset = tensor->offset;
  t.dtype = static_cast<ops::DType>(tensor->dtype);
  t.shape.assign(tensor->shape, tensor->shape + tensor->rank);
  auto m = rt::to_dlpack(dev, t);
  if (!m) return to_c(m.error());
  *out = *m;
  return nullptr;
}

HAL_API hal_error* hrt_dlpack_import(hal_device device, DLManagedTensor* managed, const char* name,
                                     uint32_t dtype_override, hrt_tensor* out) {
  return hrt_dlpack_import_flags(device, managed, name, dtype_override, 0, out);
}

HAL_API hal_error* hrt_dlpack_import_flags(hal_device device, DLManagedTensor* managed, const char* name,
                                           uint32_t dtype_override, uint32_t import_flags, hrt_tensor* out) {
  if (!out) return hal_error_new(HAL_INVALID_ARGUMENT, "hrt_dlpack_import: out is NULL");
  if (dtype_override != HRT_DTYPE_FROM_DLPACK && dtype_override > HRT_E4M3)
    return hal_error_new(HAL_INVALID_ARGUMENT,
                         fmt::format("hrt_dlpack_import: dtype_override {} is not an hrt_dtype", dtype_override).c_str());
  if (hal_error* e = hal_device_retain(device)) return e;
  Device dev(device);
  std::optional<ops::DType> as;
  if (dtype_override != HRT_DTYPE_FROM_DLPACK) as = static_cast<ops::DType>(dtype_override);
  auto t = rt::from_dlpack(dev, managed, name ? name : "?", as, import_flags);
  if (!t) return to_c(t.error());
  hrt_tensor r{};
  r.struct_size = HRT_TENSOR_SIZE;
  r.name = name;
  r.buffer = t->buffer.release_ownership();
  r.offset = t->offset;
  r.dtype = uint32_t(t->dtype);
  r.rank = uint32_t(t->shape.size());
  for (size_t i = 0; i < t->shape.size(); ++i) r.shape[i] = t->shape[i];
  *out = r;
  return nullptr;
}

}  // extern "C"
