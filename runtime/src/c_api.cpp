// runtime.h: the C ABI over the runtime's C++ API.
#include <halcyon/runtime.h>
#include <halcyon/runtime/moe_layer.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

using namespace halcyon;
using namespace halcyon::rt;

namespace {

hal_error* to_c(const Error& e) { return hal_error_new(e.status(), e.message().c_str()); }

// Wraps a borrowed C handle in an owning C++ one (one more reference).
template <typename T, typename H, hal_error* (*Retain)(H)>
Result<T> borrow(H h, const char* what) {
  if (hal_error* e = Retain(h)) {
    Error err = Error::adopt(e);
    return Error(err.status(), fmt::format("{}: {}", what, err.message()));
  }
  return T(h);
}

Result<Tensor> tensor_of(hal_buffer b, uint64_t offset, uint32_t dtype, std::vector<int64_t> shape, const char* what) {
  if (dtype > HRT_E4M3) return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: dtype {} is not an hrt_dtype", what, dtype));
  auto buf = borrow<Buffer, hal_buffer, hal_buffer_retain>(b, what);
  if (!buf) return buf.error();
  Tensor t;
  t.buffer = std::move(buf).value();
  t.offset = offset;
  t.dtype = static_cast<DType>(dtype);
  t.shape = std::move(shape);
  return t;
}

// The largest struct_size taken for an array element: far above any struct here, far below
// the address that a caller built before struct_size existed passes in its place (`name`).
constexpr size_t kMaxElementSize = 4096;

// Element i of an array of boundary structs, read at the stride of the first element's
// struct_size into a zeroed full-size copy (fields past an older caller's size keep their
// defaults). Refuses sizes below min_size or above kMaxElementSize, and unequal sizes.
template <typename T>
Result<T> element(const T* array, uint32_t i, size_t min_size, const char* type, const char* fn) {
  const size_t stride = array[0].struct_size;
  if (stride < min_size || stride > kMaxElementSize)
    return Error(HAL_VERSION_MISMATCH,
                 fmt::format("{}: {}[0].struct_size is {}; this runtime takes {} to {} bytes ({} is its own){}", fn, type,
                             stride, min_size, kMaxElementSize, sizeof(T),
                             stride > kMaxElementSize ? " — was the caller built against a runtime.h without "
                                                        "struct_size?" : ""));
  const auto* bytes = reinterpret_cast<const unsigned char*>(array) + size_t(i) * stride;
  size_t size = 0;
  std::memcpy(&size, bytes, sizeof size);
  if (size != stride)
    return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: {}[{}].struct_size is {}, {}[0]'s is {}: an array's elements "
                                                   "must all have one size", fn, type, i, size, type, stride));
  T t{};
  std::memcpy(&t, bytes, std::min(stride, sizeof(T)));
  return t;
}

}  // namespace

struct hrt_moe_layer_s {
  Device device;
  MoeLayer layer;
};

extern "C" {

HAL_API hal_error* hrt_run_op(hal_device device, hal_stream stream, const char* op, const hrt_tensor* tensors,
                              uint32_t tensor_count, const hrt_param* params, uint32_t param_count) {
  try {
    if (!op) return hal_error_new(HAL_INVALID_ARGUMENT, "hrt_run_op: op is NULL");
    if ((tensor_count && !tensors) || (param_count && !params))
      return hal_error_new(HAL_INVALID_ARGUMENT, "hrt_run_op: tensors or params is NULL");
    auto dev = borrow<Device, hal_device, hal_device_retain>(device, "hrt_run_op: device");
    if (!dev) return to_c(dev.error());
    auto st = borrow<Stream, hal_stream, hal_stream_retain>(stream, "hrt_run_op: stream");
    if (!st) return to_c(st.error());
    std::map<std::string, Tensor, std::less<>> ts;
    for (uint32_t i = 0; i < tensor_count; ++i) {
      auto read = element(tensors, i, HRT_TENSOR_MIN_SIZE, "hrt_tensor", "hrt_run_op");
      if (!read) return to_c(read.error());
      const hrt_tensor& t = *read;
      if (!t.name) return hal_error_new(HAL_INVALID_ARGUMENT, fmt::format("hrt_run_op: tensor #{} has no name", i).c_str());
      if (t.rank > HRT_MAX_RANK)
        return hal_error_new(HAL_INVALID_ARGUMENT, fmt::format("hrt_run_op: tensor '{}' has rank {} > {}", t.name, t.rank, HRT_MAX_RANK).c_str());
      auto tt = tensor_of(t.buffer, t.offset, t.dtype, std::vector<int64_t>(t.shape, t.shape + t.rank), t.name);
      if (!tt) return to_c(tt.error());
      ts[t.name] = std::move(tt).value();
    }
    std::map<std::string, std::string> ps;
    for (uint32_t i = 0; i < param_count; ++i) {
      auto p = element(params, i, HRT_PARAM_MIN_SIZE, "hrt_param", "hrt_run_op");
      if (!p) return to_c(p.error());
      if (!p->name || !p->value)
        return hal_error_new(HAL_INVALID_ARGUMENT, fmt::format("hrt_run_op: param #{} has a NULL name or value", i).c_str());
      ps[p->name] = p->value;
    }
    auto s = run_op(*dev, *st, op, ts, ps);
    return s ? nullptr : to_c(s.error());
  } catch (const std::exception& ex) {
    return hal_error_new(HAL_INTERNAL, fmt::format("hrt_run_op: {}", ex.what()).c_str());
  }
}

HAL_API hal_error* hrt_moe_layer_create(hal_device device, const hrt_moe_layer_desc* desc, hrt_moe_layer* out) {
  try {
    if (!out) return hal_error_new(HAL_INVALID_ARGUMENT, "hrt_moe_layer_create: out is NULL");
    *out = nullptr;
    if (!desc) return hal_error_new(HAL_INVALID_ARGUMENT, "hrt_moe_layer_create: desc is NULL");
    if (desc->struct_size < HRT_MOE_LAYER_DESC_MIN_SIZE)
      return hal_error_new(HAL_VERSION_MISMATCH,
                           fmt::format("hrt_moe_layer_create: hrt_moe_layer_desc.struct_size is {}, smaller than {}",
                                       desc->struct_size, HRT_MOE_LAYER_DESC_MIN_SIZE).c_str());
    auto dev = borrow<Device, hal_device, hal_device_retain>(device, "hrt_moe_layer_create: device");
    if (!dev) return to_c(dev.error());
    MoeLayerConfig c;
    c.hidden = desc->hidden;
    c.inter = desc->inter;
    c.experts = desc->experts;
    c.topk = desc->topk;
    c.n_groups = desc->n_groups;
    c.topk_groups = desc->topk_groups;
    c.expert_begin = desc->expert_begin;
    c.local_experts = desc->local_experts;
    c.score = desc->softmax ? "softmax" : "sigmoid";
    c.normalize = desc->normalize != 0;
    c.routed_scale = desc->routed_scale;
    const int64_t H = c.hidden, I = c.inter, E = c.experts, EL = c.local();
    MoeLayerWeights w;
    auto r = tensor_of(desc->w_router, 0, HRT_BF16, {H, E}, "w_router");
    if (!r) return to_c(r.error());
    w.w_router = *r;
    if (desc->bias) {
      auto b = tensor_of(desc->bias, 0, HRT_F32, {E}, "bias");
      if (!b) return to_c(b.error());
      w.bias = *b;
    }
    auto gu = tensor_of(desc->w_gate_up, 0, HRT_BF16, {EL, H, 2 * I}, "w_gate_up");
    if (!gu) return to_c(gu.error());
    w.w_gate_up = *gu;
    auto dn = tensor_of(desc->w_down, 0, HRT_BF16, {EL, I, H}, "w_down");
    if (!dn) return to_c(dn.error());
    w.w_down = *dn;
    for (auto* t : {&w.w_router, &w.w_gate_up, &w.w_down})
      if (t->buffer.size() < t->bytes())
        return hal_error_new(HAL_OUT_OF_RANGE, fmt::format("hrt_moe_layer_create: a weight buffer of {} bytes is smaller than its {} {}",
                                                           t->buffer.size(), dtype_name(t->dtype), t->shape_string()).c_str());
    auto layer = MoeLayer::create(*dev, c, w);
    if (!layer) return to_c(layer.error());
    *out = new hrt_moe_layer_s{std::move(dev).value(), std::move(layer).value()};
    return nullptr;
  } catch (const std::exception& ex) {
    return hal_error_new(HAL_INTERNAL, fmt::format("hrt_moe_layer_create: {}", ex.what()).c_str());
  }
}

HAL_API hal_error* hrt_moe_layer_forward(hrt_moe_layer layer, hal_stream stream, hal_buffer x, hal_buffer out,
                                         int64_t tokens) {
  try {
    if (!layer) return hal_error_new(HAL_INVALID_HANDLE, "hrt_moe_layer_forward: layer is NULL");
    if (tokens < 1) return hal_error_new(HAL_INVALID_ARGUMENT, fmt::format("hrt_moe_layer_forward: tokens = {}", tokens).c_str());
    auto st = borrow<Stream, hal_stream, hal_stream_retain>(stream, "hrt_moe_layer_forward: stream");
    if (!st) return to_c(st.error());
    const int64_t H = layer->layer.config().hidden;
    auto tx = tensor_of(x, 0, HRT_BF16, {tokens, H}, "x");
    if (!tx) return to_c(tx.error());
    auto to = tensor_of(out, 0, HRT_BF16, {tokens, H}, "out");
    if (!to) return to_c(to.error());
    for (auto* t : {&*tx, &*to})
      if (t->buffer.size() < t->bytes())
        return hal_error_new(HAL_OUT_OF_RANGE, fmt::format("hrt_moe_layer_forward: a {}-byte buffer cannot hold bf16 {}",
                                                           t->buffer.size(), t->shape_string()).c_str());
    auto s = layer->layer.forward(*st, *tx, *to);
    return s ? nullptr : to_c(s.error());
  } catch (const std::exception& ex) {
    return hal_error_new(HAL_INTERNAL, fmt::format("hrt_moe_layer_forward: {}", ex.what()).c_str());
  }
}

HAL_API void hrt_moe_layer_destroy(hrt_moe_layer layer) { delete layer; }

}  // extern "C"
