// Operator registry and dispatch.
#include <halcyon/ops/op.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <mutex>

namespace halcyon::ops {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<OpImpl> impls;
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

int sm_number(std::string_view arch) {  // "sm_90a" -> 90, "sm_80" -> 80, else -1
  if (!arch.starts_with("sm_")) return -1;
  int v = 0;
  auto [p, ec] = std::from_chars(arch.data() + 3, arch.data() + arch.size(), v);
  return ec == std::errc() ? v : -1;
}

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
  auto& r = registry();
  std::lock_guard lock(r.mu);
  r.impls.push_back(std::move(impl));
}

std::vector<OpImpl> impls_of(std::string_view op) {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  std::vector<OpImpl> out;
  for (auto& i : r.impls)
    if (i.op == op) out.push_back(i);
  return out;
}

bool target_runs_on(hal_module_format format, std::string_view target, std::string_view arch) {
  if (format == HAL_MODULE_HOST) return target == "host" || target == arch;
  if (format == HAL_MODULE_PTX) {
    // Architecture-specific ("a") PTX runs only on that exact architecture; plain PTX is
    // JIT-compiled forward to any later one.
    if (target.ends_with("a")) return target == arch;
    int want = sm_number(target), have = sm_number(arch);
    return want > 0 && have >= want;
  }
  return target == arch;  // cubins and code objects are built for one architecture
}

const OpImpl* select_impl(const Device& device, std::string_view op, std::string* why) {
  auto info = device.info();
  if (!info) {
    if (why) *why = info.error().to_string();
    return nullptr;
  }
  std::string scheme = scheme_of(info->uri);
  auto& r = registry();
  std::lock_guard lock(r.mu);
  const OpImpl* best = nullptr;
  int best_rank = 0;
  std::string considered;
  for (auto& impl : r.impls) {
    if (impl.op != op) continue;
    considered += fmt::format("{}{}:{}", considered.empty() ? "" : ", ", format_cap(impl.format), impl.target);
    if (!impl.backend.empty() && impl.backend != scheme) continue;
    if (impl.backend.empty() && !device.has(format_cap(impl.format))) continue;
    if (!target_runs_on(impl.format, impl.target, info->arch)) continue;
    int rank = impl.priority + (impl.backend.empty() ? 0 : 1000000);
    if (!best || rank > best_rank) best = &impl, best_rank = rank;
  }
  if (!best && why)
    *why = considered.empty() ? fmt::format("no implementation of '{}' exists", op)
                              : fmt::format("none of the implementations of '{}' ({}) runs on {} ({})", op, considered,
                                            info->uri, info->arch);
  return best;
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
    if (t.offset + t.bytes() > t.buffer.size())
      return Error(HAL_OUT_OF_RANGE, fmt::format("{}: '{}' {} {} needs {} bytes at offset {}, its buffer has {}", c.op,
                                                 name, dtype_name(t.dtype), t.shape_string(), t.bytes(), t.offset,
                                                 t.buffer.size()));
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
// run_op and run_op_with: the call checked against the contract, then `impl` (null: the one
// select_impl chooses) launched.
Status run_checked(const Device& device, const Stream& stream, std::string_view op, const OpImpl* impl,
                   std::map<std::string, Tensor, std::less<>>& tensors, const std::map<std::string, std::string>& params) {
  const Contract* c = find_contract(op);
  if (!c) return Error(HAL_NOT_FOUND, fmt::format("unknown operator '{}'", op));
  auto b = bind_call(*c, tensors, params);
  if (!b) return b.error();
  for (auto& out : c->outputs) {
    auto it = tensors.find(out.name);
    if (it == tensors.end()) return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: output '{}' is missing", op, out.name));
    auto want = b->shape_of(out);
    if (it->second.shape != want)
      return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: output '{}' has shape {}, expected [{}]", op, out.name,
                                                     it->second.shape_string(), fmt::join(want, ", ")));
  }
  std::string why;
  if (!impl) impl = select_impl(device, op, &why);
  if (!impl) return Error(HAL_UNSUPPORTED, why);
  OpContext ctx{device, stream, *c, *b, tensors};
  return impl->fn(ctx);
}
}  // namespace

Status run_op(const Device& device, const Stream& stream, std::string_view op,
              std::map<std::string, Tensor, std::less<>>& tensors, const std::map<std::string, std::string>& params) {
  return run_checked(device, stream, op, nullptr, tensors, params);
}

Status run_op_with(const OpImpl& impl, const Device& device, const Stream& stream,
                   std::map<std::string, Tensor, std::less<>>& tensors, const std::map<std::string, std::string>& params) {
  auto info = device.info();
  if (!info) return info.error();
  if ((!impl.backend.empty() && impl.backend != scheme_of(info->uri)) ||
      (impl.backend.empty() && !device.has(format_cap(impl.format))) || !target_runs_on(impl.format, impl.target, info->arch))
    return Error(HAL_UNSUPPORTED, fmt::format("{}: the implementation for {} does not run on {} ({})", impl.op,
                                              impl.target, info->uri, info->arch));
  return run_checked(device, stream, impl.op, &impl, tensors, params);
}

}  // namespace halcyon::ops
