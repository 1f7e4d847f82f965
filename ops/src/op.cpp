// Operator registry and dispatch.
#include <halcyon/ops/op.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <deque>
#include <mutex>

namespace halcyon::ops {
namespace {

struct Registry {
  std::mutex mu;
  std::deque<OpImpl> impls;  // a deque: select_impl hands out pointers that registration keeps valid
};
Registry& registry() {
  static Registry r;
  return r;
}

const char* format_cap(hal_module_format f) {
  switch (f) {
    case HAL_MODULE_PTX: return "module.ptx";
    case HAL_MODULE_CUBIN: return "module.cubin";
    case HAL_MODULE_HSACO: return "module.hsaco";
    case HAL_MODULE_SPIRV: return "module.spirv";
    case HAL_MODULE_HOST: return "module.host";
    default: return "";
  }
}

std::string scheme_of(std::string_view uri) { return std::string(uri.substr(0, uri.find(':'))); }

int rank_of(const OpImpl& impl) { return impl.priority + (impl.backend.empty() ? 0 : 1000000); }

// Modules loaded per device URI. The cache opens its own device handle per URI so that the
// user's device handles never see cached children (their release stays clean).
struct ModuleCache {
  std::mutex mu;
  std::map<std::string, Device> devices;
  std::map<std::string, Module> modules;  // key: uri + '\n' + name + '\n' + target
};
ModuleCache& cache() {
  static auto* c = new ModuleCache;  // lives for the process, like loaded driver modules
  return *c;
}

}  // namespace

void register_op_impl(OpImpl impl) {
  if (impl.name.empty()) {
    impl.name = impl.target;
    std::erase(impl.name, '_');
  }
  auto& r = registry();
  std::lock_guard lock(r.mu);
  r.impls.push_back(std::move(impl));
}

std::vector<OpImpl> impls_of(std::string_view op) {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  // Highest rank first; equal ranks keep their registration order. (An index sort rather
  // than std::stable_sort: libstdc++ 12's stable_sort trips clang 19's deprecation warning.)
  std::vector<size_t> order;
  for (size_t i = 0; i < r.impls.size(); ++i)
    if (r.impls[i].op == op) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto ra = rank_of(r.impls[a]), rb = rank_of(r.impls[b]);
    return ra != rb ? ra > rb : a < b;
  });
  std::vector<OpImpl> out;
  for (size_t i : order) out.push_back(r.impls[i]);
  return out;
}

bool DeviceFacts::has(std::string_view cap) const {
  std::string_view caps(capabilities);
  size_t pos = 0;
  while (pos <= caps.size()) {
    size_t sp = std::min(caps.find(' ', pos), caps.size());
    if (caps.substr(pos, sp - pos) == cap) return true;
    pos = sp + 1;
  }
  return false;
}

Result<DeviceFacts> device_facts(const Device& device) {
  auto info = device.info();
  if (!info) return info.error();
  return DeviceFacts{info->uri, info->arch, info->capabilities, info->compute_units, info->max_shared_per_block,
                     info->memory_bytes_per_s};
}

const Tensor* ApplyContext::tensor(std::string_view name) const {
  if (!tensors) return nullptr;
  auto it = tensors->find(name);
  return it == tensors->end() ? nullptr : &it->second;
}

bool ApplyContext::can_run(hal_module_format format, const char* target, std::string* why) const {
  if (!device) {
    if (why) *why = "no device to ask";
    return false;
  }
  auto yes = device->can_run(format, target, why);
  if (!yes && why) *why = yes.error().to_string();
  return yes && *yes;
}

namespace {

// Judges one implementation; true when it can run (usable), with why not otherwise.
bool usable(const OpImpl& impl, const Device& device, const ApplyContext& ctx, std::string* why) {
  if (!impl.backend.empty() && impl.backend != scheme_of(ctx.facts.uri)) {
    *why = fmt::format("only for backend '{}'", impl.backend);
    return false;
  }
  if (impl.backend.empty()) {
    auto yes = device.can_run(impl.format, impl.target.c_str(), why);
    if (!yes) *why = yes.error().to_string();
    if (!yes || !*yes) return false;
  }
  return !impl.applies || impl.applies(ctx, why);
}

}  // namespace

std::vector<ImplVerdict> judge_impls(const Device& device, std::string_view op, const ApplyContext* call) {
  std::vector<ImplVerdict> out;
  Result<DeviceFacts> facts = call ? Result<DeviceFacts>(call->facts) : device_facts(device);
  if (!facts) return out;
  ApplyContext dev_only{*facts, &device};
  const ApplyContext& ctx = call ? *call : dev_only;
  bool chosen = false;
  for (OpImpl& impl : impls_of(op)) {
    ImplVerdict v{std::move(impl)};
    v.usable = usable(v.impl, device, ctx, &v.why);
    if (v.usable && !chosen) {
      if (!v.impl.automatic) v.why = "only when named";
      else if (!v.impl.preferred || v.impl.preferred(ctx, &v.why)) v.chosen = chosen = true;
      else v.why = "passed over: " + v.why;
    }
    out.push_back(std::move(v));
  }
  return out;
}

namespace {

// The registry's own entry of a judged copy (names may repeat across backends: test backends
// register their own "host").
const OpImpl* find_registered(const OpImpl& impl) {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  for (auto& i : r.impls)
    if (i.op == impl.op && i.name == impl.name && i.backend == impl.backend && i.format == impl.format &&
        i.target == impl.target && i.fn == impl.fn)
      return &i;
  return nullptr;
}

std::string verdicts_text(const std::vector<ImplVerdict>& vs) {
  std::string s;
  for (auto& v : vs)
    s += fmt::format("\n  {} ({} {}){}{}", v.impl.name, format_cap(v.impl.format) + 7, v.impl.target,
                     v.chosen ? ": the registry's choice" : v.usable && v.why.empty() ? ": can run" : ": ",
                     v.chosen || (v.usable && v.why.empty()) ? "" : v.why);
  return s;
}

}  // namespace

Result<const OpImpl*> select_impl(const Device& device, std::string_view op, const RunOptions& options,
                                  const ApplyContext* call) {
  Result<DeviceFacts> facts = call ? Result<DeviceFacts>(call->facts) : device_facts(device);
  if (!facts) return facts.error();
  auto verdicts = judge_impls(device, op, call);
  if (verdicts.empty()) return Error(HAL_NOT_FOUND, fmt::format("no implementation of '{}' exists", op));
  if (!options.impl.empty()) {
    for (auto& v : verdicts) {
      if (v.impl.name != options.impl) continue;
      if (!v.usable)
        return Error(HAL_UNSUPPORTED, fmt::format("{}: implementation '{}' cannot run on {} ({}): {}; the implementations:{}",
                                                  op, options.impl, facts->uri, facts->arch, v.why,
                                                  verdicts_text(verdicts)));
      return find_registered(v.impl);
    }
    return Error(HAL_NOT_FOUND, fmt::format("{}: no implementation named '{}'; the implementations:{}", op,
                                            options.impl, verdicts_text(verdicts)));
  }
  for (auto& v : verdicts)
    if (v.chosen) return find_registered(v.impl);
  return Error(HAL_UNSUPPORTED, fmt::format("none of the implementations of '{}' runs on {} ({}):{}", op, facts->uri,
                                            facts->arch, verdicts_text(verdicts)));
}

const OpImpl* select_impl(const Device& device, std::string_view op, std::string* why) {
  auto r = select_impl(device, op, RunOptions{});
  if (!r) {
    if (why) *why = r.error().message();
    return nullptr;
  }
  return *r;
}

const Tensor& OpContext::tensor(std::string_view name) const { return tensors.find(name)->second; }

const Tensor* OpContext::optional_tensor(std::string_view name) const {
  auto it = tensors.find(name);
  return it == tensors.end() ? nullptr : &it->second;
}

Result<Module> OpContext::module(hal_module_format format, const char* target, const void* data, size_t size,
                                 const char* name) const {
  auto info = device.info();
  if (!info) return info.error();
  std::string uri = info->uri;
  std::string key = uri + "\n" + name + "\n" + target;
  auto& c = cache();
  std::lock_guard lock(c.mu);
  if (auto it = c.modules.find(key); it != c.modules.end()) return it->second;
  auto dit = c.devices.find(uri);
  if (dit == c.devices.end()) {
    auto d = Device::open(uri.c_str());
    if (!d) return d.error();
    dit = c.devices.emplace(uri, std::move(d).value()).first;
  }
  auto m = dit->second.load_module(format, target, data, size, name);
  if (!m) return m.error();
  c.modules.emplace(key, *m);
  return m;
}

namespace {

Result<Binding> bind_call(const Contract& c, const std::map<std::string, Tensor, std::less<>>& tensors,
                          const std::map<std::string, std::string>& params) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (auto& [name, t] : tensors) {
    const TensorSpec* spec = c.find_tensor(name);
    if (!spec) return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: no input or output named '{}'", c.op, name));
    if (t.dtype != spec->dtype)
      return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: '{}' is {}, the contract says {}", c.op, name,
                                                     dtype_name(t.dtype), dtype_name(spec->dtype)));
    if (!t.buffer) return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: '{}' has no buffer", c.op, name));
    if (Status in = check_in_buffer(t, t.buffer.size(), fmt::format("{}: '{}'", c.op, name)); !in) return in.error();
    shapes[name] = t.shape;
  }
  for (auto& in : c.inputs)
    if (!in.optional && !tensors.count(in.name))
      return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: input '{}' is missing", c.op, in.name));
  return bind(c, params, {}, shapes);
}

}  // namespace

Status allocate_outputs(const Device& device, std::string_view op, std::map<std::string, Tensor, std::less<>>& tensors,
                        const std::map<std::string, std::string>& params) {
  const Contract* c = find_contract(op);
  if (!c) return Error(HAL_NOT_FOUND, fmt::format("unknown operator '{}'", op));
  std::map<std::string, Tensor, std::less<>> inputs;
  for (auto& [k, v] : tensors)
    if (std::any_of(c->inputs.begin(), c->inputs.end(), [&](auto& s) { return s.name == k; })) inputs.emplace(k, v);
  auto b = bind_call(*c, inputs, params);
  if (!b) return b.error();
  for (auto& out : c->outputs) {
    auto t = make_tensor(device, out.dtype, b->shape_of(out));
    if (!t) return t.error();
    tensors[out.name] = std::move(t).value();
  }
  return {};
}

namespace {

// A call's binding with its outputs checked: present, with the contract's shapes.
Result<Binding> bind_checked(const Contract& c, std::string_view op,
                             const std::map<std::string, Tensor, std::less<>>& tensors,
                             const std::map<std::string, std::string>& params) {
  auto b = bind_call(c, tensors, params);
  if (!b) return b.error();
  for (auto& out : c.outputs) {
    auto it = tensors.find(out.name);
    if (it == tensors.end()) return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: output '{}' is missing", op, out.name));
    auto want = b->shape_of(out);
    if (it->second.shape != want)
      return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: output '{}' has shape {}, expected [{}]", op, out.name,
                                                     it->second.shape_string(), fmt::join(want, ", ")));
  }
  return b;
}

}  // namespace

bool fused_pays_for_call(const Device& device, std::string_view op,
                         const std::map<std::string, Tensor, std::less<>>& tensors,
                         const std::map<std::string, std::string>& params, const RunOptions& options,
                         std::string* why) {
  auto say = [&](std::string text) {
    if (why) *why = std::move(text);
    return false;
  };
  const Contract* c = find_contract(op);
  if (!c) return say(fmt::format("unknown operator '{}'", op));
  auto b = bind_checked(*c, op, tensors, params);
  if (!b) return say(b.error().message());
  auto facts = device_facts(device);
  if (!facts) return say(facts.error().message());
  const ApplyContext call{*facts, &device, &*b, &tensors, options.code};
  auto impl = select_impl(device, op, options, &call);
  if (!impl) return say(impl.error().message());
  if (!options.impl.empty()) return true;
  if (!(*impl)->fused_pays) return say(fmt::format("{} has not been shown to beat the sequence it fuses", (*impl)->name));
  return (*impl)->fused_pays(call, why);
}

PreparedOp::PreparedOp(Device device, const Contract* contract, Binding binding,
                       std::map<std::string, Tensor, std::less<>> tensors, const OpImpl* impl, CodeSource code)
    : device_(std::move(device)), contract_(contract), binding_(std::move(binding)), tensors_(std::move(tensors)),
      impl_(impl), code_(code) {}

namespace {

// A call's memory and stream belong to its device: a kernel handed another device's address
// faults (CUDA: a sticky error that ends the context) or, through a peer mapping, reads it
// over the link, instead of the call failing with the tensor's name. `uri`: the device's.
Status check_tensor_on(std::string_view op, std::string_view uri, std::string_view name, const Tensor& t) {
  if (!t.buffer) return {};  // an absent optional input (the binding has judged it)
  auto b = t.buffer.info();
  if (!b) return b.error();
  if (std::string_view(b->device_uri) != uri)
    return Error(HAL_INVALID_ARGUMENT,
                 fmt::format("{}: tensor '{}' is in memory of {}, the call runs on {}", op, name, b->device_uri, uri));
  return {};
}

Status check_stream_on(std::string_view op, std::string_view uri, const Stream& stream) {
  auto s = stream.info();
  if (!s) return s.error();
  if (std::string_view(s->device_uri) != uri)
    return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: the stream is on {}, the call runs on {}", op, s->device_uri, uri));
  return {};
}

// A call checked against its contract, its memory (and `stream`, where given) against its
// device, and the implementation that takes it (run_op, prepare_op).
struct CheckedCall {
  const Contract* contract;
  Binding binding;
  const OpImpl* impl;
};
Result<CheckedCall> check_call(const Device& device, std::string_view op,
                               const std::map<std::string, Tensor, std::less<>>& tensors,
                               const std::map<std::string, std::string>& params, const RunOptions& options,
                               const Stream* stream) {
  const Contract* c = find_contract(op);
  if (!c) return Error(HAL_NOT_FOUND, fmt::format("unknown operator '{}'", op));
  auto b = bind_checked(*c, op, tensors, params);
  if (!b) return b.error();
  auto facts = device_facts(device);
  if (!facts) return facts.error();
  for (const auto& [name, t] : tensors)
    if (Status on = check_tensor_on(op, facts->uri, name, t); !on) return on.error();
  if (options.sm_trace)
    if (Status on = check_tensor_on(op, facts->uri, "RunOptions::sm_trace", *options.sm_trace); !on) return on.error();
  const ApplyContext ctx{*facts, &device, &*b, &tensors, options.code};
  auto impl = select_impl(device, op, options, &ctx);
  if (!impl) return impl.error();
  if (stream)
    if (Status on = check_stream_on(op, facts->uri, *stream); !on) return on.error();
  return CheckedCall{c, std::move(b).value(), *impl};
}

}  // namespace

// The choice run_op makes, and the errors it returns before launching: the same checks.
Result<const OpImpl*> select_impl_for_call(const Device& device, std::string_view op,
                                           const std::map<std::string, Tensor, std::less<>>& tensors,
                                           const std::map<std::string, std::string>& params,
                                           const RunOptions& options) {
  auto call = check_call(device, op, tensors, params, options, nullptr);
  if (!call) return call.error();
  return call->impl;
}

Result<PreparedOp> prepare_op(const Device& device, std::string_view op, std::map<std::string, Tensor, std::less<>> tensors,
                              const std::map<std::string, std::string>& params, const RunOptions& options) {
  if (options.sm_trace || options.ep_peers)
    return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: a prepared call takes no RunOptions::sm_trace or ep_peers "
                                                   "(run_op does)", op));
  auto call = check_call(device, op, tensors, params, options, nullptr);
  if (!call) return call.error();
  return PreparedOp(device, call->contract, std::move(call->binding), std::move(tensors), call->impl, options.code);
}

Status PreparedOp::run(const Stream& stream) {
  if (stream.get() != checked_stream_) {  // a handle's value is not reused (slot generations)
    auto dev = device_.info();
    if (!dev) return dev.error();
    if (Status on = check_stream_on(contract_->op, dev->uri, stream); !on) return on;
    checked_stream_ = stream.get();
  }
  OpContext ctx{device_, stream, *contract_, binding_, tensors_, code_};
  return impl_->fn(ctx);
}

Status run_op(const Device& device, const Stream& stream, std::string_view op,
              std::map<std::string, Tensor, std::less<>>& tensors, const std::map<std::string, std::string>& params,
              const RunOptions& options) {
  auto call = check_call(device, op, tensors, params, options, &stream);
  if (!call) return call.error();
  const OpImpl& impl = *call->impl;
  if (const Tensor* t = options.sm_trace) {
    if (!impl.records_sm)
      return Error(HAL_UNSUPPORTED, fmt::format("{}: implementation '{}' does not record the units it runs on "
                                                "(RunOptions::sm_trace)", op, impl.name));
    if (t->dtype != DType::i32 || t->shape.size() != 1 || t->buffer.get() == nullptr)
      return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: sm_trace must be a 1-d i32 tensor, not {} {}", op,
                                                     dtype_name(t->dtype), t->shape_string()));
    // The kernel writes it: it must lie in its buffer like the call's tensors.
    if (Status in = check_in_buffer(*t, t->buffer.size(), fmt::format("{}: RunOptions::sm_trace", op)); !in)
      return in.error();
  }
  if (options.ep_peers && !call->contract->op.starts_with("ep_"))
    return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: RunOptions::ep_peers is for the expert-parallel operators", op));
  OpContext ctx{device, stream, *call->contract, call->binding, tensors, options.code, options.sm_trace, options.ep_peers};
  return impl.fn(ctx);
}

}  // namespace halcyon::ops
