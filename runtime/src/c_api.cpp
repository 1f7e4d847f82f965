// runtime.h: the C ABI over the runtime's C++ API.
#include <halcyon/runtime.h>
#include <halcyon/ops/op.hpp>
#include <halcyon/runtime/moe_layer.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

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

// The extension of type `type` in an hrt_moe_layer_desc's chain, or NULL; extension types this
// runtime does not know are skipped (hal.h's rule). Every header on the way is checked.
Result<const hal_extension*> find_extension(const void* chain, uint32_t type) {
  constexpr size_t kHeader = offsetof(hrt_moe_fp8_weights, type) + sizeof(uint32_t);
  int depth = 0;
  for (auto* e = static_cast<const hal_extension*>(chain); e; e = e->next) {
    if (++depth > 64) return Error(HAL_INVALID_ARGUMENT, "hrt_moe_layer_create: the desc's extension chain is longer than 64 (a cycle?)");
    if (e->struct_size < kHeader)
      return Error(HAL_VERSION_MISMATCH, fmt::format("hrt_moe_layer_create: an extension's struct_size is {}, smaller "
                                                     "than the {} bytes of its header", e->struct_size, kHeader));
    if (e->type == type) return e;
  }
  return static_cast<const hal_extension*>(nullptr);
}

// The implementations by name of an hrt_moe_layer_impls in the chain (ABI 1.10), into *impl.
Status layer_impls(const void* chain, std::map<std::string, std::string, std::less<>>* impl) {
  auto found = find_extension(chain, HRT_EXTENSION_MOE_LAYER_IMPLS);
  if (!found) return found.error();
  const hal_extension* e = *found;
  if (!e) return {};
  if (e->struct_size < HRT_MOE_LAYER_IMPLS_MIN_SIZE)
    return Error(HAL_VERSION_MISMATCH, fmt::format("hrt_moe_layer_create: hrt_moe_layer_impls.struct_size is {}, "
                                                   "smaller than {}", e->struct_size, HRT_MOE_LAYER_IMPLS_MIN_SIZE));
  hrt_moe_layer_impls d{};
  std::memcpy(&d, e, std::min(e->struct_size, sizeof d));
  if (d.count && !d.entries)
    return Error(HAL_INVALID_ARGUMENT, fmt::format("hrt_moe_layer_create: hrt_moe_layer_impls has {} entries and a "
                                                   "NULL array", d.count));
  for (uint32_t i = 0; i < d.count; ++i) {
    const hrt_op_impl& x = d.entries[i];
    if (!x.op || !*x.op || !x.impl || !*x.impl)
      return Error(HAL_INVALID_ARGUMENT, fmt::format("hrt_moe_layer_create: hrt_moe_layer_impls entry {} has a NULL "
                                                     "or empty op or impl", i));
    if (!impl->emplace(x.op, x.impl).second)
      return Error(HAL_INVALID_ARGUMENT, fmt::format("hrt_moe_layer_create: hrt_moe_layer_impls names operator '{}' "
                                                     "twice", x.op));
  }
  return {};
}

// The FP8 expert weights of an hrt_moe_layer_desc's extension chain (hrt_moe_fp8_weights), or
// none. *dequantize: its dequantize_elsewhere (ABI 1.9; 0 in a smaller struct).
Result<std::optional<MoeFp8Weights>> fp8_weights(const void* chain, const MoeLayerConfig& c, bool* dequantize) {
  auto found = find_extension(chain, HRT_EXTENSION_MOE_FP8_WEIGHTS);
  if (!found) return found.error();
  if (const hal_extension* e = *found) {
    if (e->struct_size < HRT_MOE_FP8_WEIGHTS_MIN_SIZE)
      return Error(HAL_VERSION_MISMATCH, fmt::format("hrt_moe_layer_create: hrt_moe_fp8_weights.struct_size is {}, "
                                                     "smaller than {}", e->struct_size, HRT_MOE_FP8_WEIGHTS_MIN_SIZE));
    hrt_moe_fp8_weights d{};
    std::memcpy(&d, e, std::min(e->struct_size, sizeof d));
    *dequantize = d.dequantize_elsewhere != 0;
    const auto shapes = moe_fp8_weight_shapes(c);
    MoeFp8Weights f;
    const hal_buffer bufs[4] = {d.w_gate_up, d.w_gate_up_scale, d.w_down, d.w_down_scale};
    const uint32_t dtypes[4] = {HRT_E4M3, HRT_F32, HRT_E4M3, HRT_F32};
    const char* names[4] = {"fp8.w_gate_up", "fp8.w_gate_up_scale", "fp8.w_down", "fp8.w_down_scale"};
    Tensor* to[4] = {&f.w_gate_up, &f.w_gate_up_scale, &f.w_down, &f.w_down_scale};
    for (int i = 0; i < 4; ++i) {
      auto t = tensor_of(bufs[i], 0, dtypes[i], shapes[size_t(i)], names[i]);
      if (!t) return t.error();
      *to[i] = std::move(t).value();
    }
    return std::optional<MoeFp8Weights>(std::move(f));
  }
  return std::optional<MoeFp8Weights>();
}

// An operator call's C arguments as run_op takes them (hrt_run_op, hrt_op_create); `fn` names
// the entry point in errors.
struct CallArgs {
  std::map<std::string, Tensor, std::less<>> tensors;
  std::map<std::string, std::string> params;
};
Result<CallArgs> call_args(const hrt_tensor* tensors, uint32_t tensor_count, const hrt_param* params,
                           uint32_t param_count, const char* fn) {
  if ((tensor_count && !tensors) || (param_count && !params))
    return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: tensors or params is NULL", fn));
  CallArgs a;
  for (uint32_t i = 0; i < tensor_count; ++i) {
    auto read = element(tensors, i, HRT_TENSOR_MIN_SIZE, "hrt_tensor", fn);
    if (!read) return read.error();
    const hrt_tensor& t = *read;
    if (!t.name) return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: tensor #{} has no name", fn, i));
    if (t.rank > HRT_MAX_RANK)
      return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: tensor '{}' has rank {} > {}", fn, t.name, t.rank, HRT_MAX_RANK));
    // A repeated name would silently replace the first tensor (x aliased to another buffer).
    if (a.tensors.count(std::string_view(t.name)))
      return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: tensor '{}' is given twice (tensor #{} repeats it)", fn, t.name, i));
    auto tt = tensor_of(t.buffer, t.offset, t.dtype, std::vector<int64_t>(t.shape, t.shape + t.rank), t.name);
    if (!tt) return tt.error();
    a.tensors[t.name] = std::move(tt).value();
  }
  for (uint32_t i = 0; i < param_count; ++i) {
    auto p = element(params, i, HRT_PARAM_MIN_SIZE, "hrt_param", fn);
    if (!p) return p.error();
    if (!p->name || !p->value)
      return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: param #{} has a NULL name or value", fn, i));
    if (!a.params.emplace(p->name, p->value).second)
      return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: param '{}' is given twice (param #{} repeats it)", fn, p->name, i));
  }
  return a;
}

// A call's C options as run_op takes them; NULL: the defaults.
Result<ops::RunOptions> run_options(const hrt_call_options* options, const char* fn) {
  ops::RunOptions o;
  if (!options) return o;
  if (options->struct_size < HRT_CALL_OPTIONS_MIN_SIZE)
    return Error(HAL_VERSION_MISMATCH, fmt::format("{}: hrt_call_options.struct_size is {}, smaller than {}", fn,
                                                   options->struct_size, HRT_CALL_OPTIONS_MIN_SIZE));
  if (options->impl) o.impl = options->impl;
  return o;
}

}  // namespace

struct hrt_op_s {
  ops::PreparedOp call;
};

struct hrt_moe_layer_s {
  Device device;
  MoeLayer layer;
};

extern "C" {

HAL_API hal_error* hrt_run_op_with(hal_device device, hal_stream stream, const char* op, const hrt_tensor* tensors,
                                   uint32_t tensor_count, const hrt_param* params, uint32_t param_count,
                                   const hrt_call_options* options) {
  try {
    if (!op) return hal_error_new(HAL_INVALID_ARGUMENT, "hrt_run_op: op is NULL");
    auto args = call_args(tensors, tensor_count, params, param_count, "hrt_run_op");
    if (!args) return to_c(args.error());
    auto opts = run_options(options, "hrt_run_op");
    if (!opts) return to_c(opts.error());
    auto dev = borrow<Device, hal_device, hal_device_retain>(device, "hrt_run_op: device");
    if (!dev) return to_c(dev.error());
    auto st = borrow<Stream, hal_stream, hal_stream_retain>(stream, "hrt_run_op: stream");
    if (!st) return to_c(st.error());
    auto s = ops::run_op(*dev, *st, op, args->tensors, args->params, *opts);
    return s ? nullptr : to_c(s.error());
  } catch (const std::exception& ex) {
    return hal_error_new(HAL_INTERNAL, fmt::format("hrt_run_op: {}", ex.what()).c_str());
  }
}

HAL_API hal_error* hrt_run_op(hal_device device, hal_stream stream, const char* op, const hrt_tensor* tensors,
                              uint32_t tensor_count, const hrt_param* params, uint32_t param_count) {
  return hrt_run_op_with(device, stream, op, tensors, tensor_count, params, param_count, nullptr);
}

HAL_API hal_error* hrt_op_create_with(hal_device device, const char* op, const hrt_tensor* tensors,
                                      uint32_t tensor_count, const hrt_param* params, uint32_t param_count,
                                      const hrt_call_options* options, hrt_op* out) {
  try {
    if (!out) return hal_error_new(HAL_INVALID_ARGUMENT, "hrt_op_create: out is NULL");
    *out = nullptr;
    if (!op) return hal_error_new(HAL_INVALID_ARGUMENT, "hrt_op_create: op is NULL");
    auto args = call_args(tensors, tensor_count, params, param_count, "hrt_op_create");
    if (!args) return to_c(args.error());
    auto opts = run_options(options, "hrt_op_create");
    if (!opts) return to_c(opts.error());
    auto dev = borrow<Device, hal_device, hal_device_retain>(device, "hrt_op_create: device");
    if (!dev) return to_c(dev.error());
    auto prepared = ops::prepare_op(*dev, op, std::move(args->tensors), args->params, *opts);
    if (!prepared) return to_c(prepared.error());
    *out = new hrt_op_s{std::move(prepared).value()};
    return nullptr;
  } catch (const std::exception& ex) {
    return hal_error_new(HAL_INTERNAL, fmt::format("hrt_op_create: {}", ex.what()).c_str());
  }
}

HAL_API hal_error* hrt_op_create(hal_device device, const char* op, const hrt_tensor* tensors, uint32_t tensor_count,
                                 const hrt_param* params, uint32_t param_count, hrt_op* out) {
  return hrt_op_create_with(device, op, tensors, tensor_count, params, param_count, nullptr, out);
}

HAL_API hal_error* hrt_op_run(hrt_op op, hal_stream stream) {
  try {
    if (!op) return hal_error_new(HAL_INVALID_HANDLE, "hrt_op_run: op is NULL");
    auto st = borrow<Stream, hal_stream, hal_stream_retain>(stream, "hrt_op_run: stream");
    if (!st) return to_c(st.error());
    auto s = op->call.run(*st);
    return s ? nullptr : to_c(s.error());
  } catch (const std::exception& ex) {
    return hal_error_new(HAL_INTERNAL, fmt::format("hrt_op_run: {}", ex.what()).c_str());
  }
}

HAL_API const char* hrt_op_impl_name(hrt_op op) { return op ? op->call.impl().name.c_str() : nullptr; }

HAL_API void hrt_op_release(hrt_op op) { delete op; }

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
    // Before any shape below is computed from it (2 * inter, the FP8 scale grids).
    if (Status valid = check_moe_config(c); !valid)
      return to_c(Error(valid.error().status(), fmt::format("hrt_moe_layer_create: {}", valid.error().message())));
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
    bool dequantize = false;
    auto fp8 = fp8_weights(desc->next, c, &dequantize);
    if (!fp8) return to_c(fp8.error());
    w.fp8 = std::move(fp8).value();
    std::vector<std::pair<const char*, const Tensor*>> check{{"w_router", &w.w_router}};
    if (w.bias) check.emplace_back("bias", &*w.bias);
    // The bf16 experts: required without FP8 weights, optional (both or neither) with them.
    if (!w.fp8 || desc->w_gate_up || desc->w_down) {
      auto gu = tensor_of(desc->w_gate_up, 0, HRT_BF16, {EL, H, 2 * I}, "w_gate_up");
      if (!gu) return to_c(gu.error());
      w.w_gate_up = *gu;
      auto dn = tensor_of(desc->w_down, 0, HRT_BF16, {EL, I, H}, "w_down");
      if (!dn) return to_c(dn.error());
      w.w_down = *dn;
      check.emplace_back("w_gate_up", &w.w_gate_up);
      check.emplace_back("w_down", &w.w_down);
    }
    if (w.fp8) {
      check.emplace_back("fp8.w_gate_up", &w.fp8->w_gate_up);
      check.emplace_back("fp8.w_gate_up_scale", &w.fp8->w_gate_up_scale);
      check.emplace_back("fp8.w_down", &w.fp8->w_down);
      check.emplace_back("fp8.w_down_scale", &w.fp8->w_down_scale);
    }
    for (auto [name, t] : check)
      if (Status in = ops::check_in_buffer(*t, t->buffer.size(), fmt::format("hrt_moe_layer_create: {}", name)); !in)
        return to_c(in.error());
    MoeLayerOptions o;
    if (dequantize) o.fp8_fallback = MoeFp8Fallback::kDequantize;
    if (Status named = layer_impls(desc->next, &o.impl); !named) return to_c(named.error());
    auto layer = MoeLayer::create(*dev, c, w, o);
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
    for (auto [name, t] : {std::pair{"x", &*tx}, std::pair{"out", &*to}})
      if (Status in = ops::check_in_buffer(*t, t->buffer.size(), fmt::format("hrt_moe_layer_forward: {}", name)); !in)
        return to_c(in.error());
    auto s = layer->layer.forward(*st, *tx, *to);
    return s ? nullptr : to_c(s.error());
  } catch (const std::exception& ex) {
    return hal_error_new(HAL_INTERNAL, fmt::format("hrt_moe_layer_forward: {}", ex.what()).c_str());
  }
}

HAL_API void hrt_moe_layer_destroy(hrt_moe_layer layer) { delete layer; }

HAL_API hal_error* hrt_moe_layer_get_info(hrt_moe_layer layer, hrt_moe_layer_info* info) {
  if (!layer) return hal_error_new(HAL_INVALID_HANDLE, "hrt_moe_layer_get_info: layer is NULL");
  if (!info) return hal_error_new(HAL_INVALID_ARGUMENT, "hrt_moe_layer_get_info: info is NULL");
  if (info->struct_size < HRT_MOE_LAYER_INFO_MIN_SIZE)
    return hal_error_new(HAL_VERSION_MISMATCH, fmt::format("hrt_moe_layer_get_info: hrt_moe_layer_info.struct_size is {}, "
                                                           "smaller than {}", info->struct_size, HRT_MOE_LAYER_INFO_MIN_SIZE).c_str());
  hrt_moe_layer_info r{};
  r.struct_size = info->struct_size;
  r.next = info->next;
  r.fp8_experts = layer->layer.runs_fp8() ? 1u : 0u;
  r.fp8_dequantized = layer->layer.dequantized_fp8() ? 1u : 0u;
  r.gather = layer->layer.gathers_rows() ? 1u : 0u;
  std::memcpy(info, &r, std::min(info->struct_size, sizeof r));  // never past the caller's struct
  return nullptr;
}

}  // extern "C"
