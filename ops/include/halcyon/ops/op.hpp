// Operators: a contract plus one implementation per (module format, target) — host code
// for the CPU backend, PTX for NVIDIA, HSA code objects for AMD. run_op() checks the call
// against the contract, picks the implementation the device can run, and launches it.
#pragma once

#include <halcyon/halcyon.hpp>
#include <halcyon/ops/contract.hpp>
#include <halcyon/ops/tensor.hpp>

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace halcyon::ops {

// What an implementation gets: checked tensors (inputs and outputs by contract name; an
// absent optional input is simply missing), resolved dims and params.
struct OpContext {
  const Device& device;
  const Stream& stream;
  const Contract& contract;
  const Binding& binding;
  std::map<std::string, Tensor, std::less<>>& tensors;

  const Tensor& tensor(std::string_view name) const;
  const Tensor* optional_tensor(std::string_view name) const;
  int64_t dim(std::string_view s) const { return binding.dim(s); }
  const ParamSet& params() const { return binding.params; }
  // Loads (once per device, then cached) an embedded module.
  Result<Module> module(hal_module_format format, const char* target, const void* data,
                        size_t size, const char* name) const;
};

using OpImplFn = Status (*)(OpContext& ctx);

struct OpImpl {
  std::string op;
  hal_module_format format = HAL_MODULE_HOST;  // the device must advertise "module.<format>"
  std::string target;   // "host", "sm_90a", "sm_80", "gfx942", ... ; see target_runs_on()
  std::string backend;  // "" = any backend; else only devices of this URI scheme (tests)
  int priority = 0;     // higher wins among those that can run
  OpImplFn fn = nullptr;
};

// Registers an implementation (normally from a static initialiser next to it).
void register_op_impl(OpImpl impl);
struct RegisterOpImpl {
  explicit RegisterOpImpl(OpImpl impl) { register_op_impl(std::move(impl)); }
};

// Can a binary built for `target` run on a device whose arch is `device_arch`?
// ("sm_80" PTX runs on sm_80 and later; "sm_90a" only on sm_90a; "gfx942" only on gfx942;
// "host" on any device that loads host modules.)
bool target_runs_on(hal_module_format format, std::string_view target, std::string_view device_arch);

// The implementation run_op would choose for this device, or null (with why).
const OpImpl* select_impl(const Device& device, std::string_view op, std::string* why = nullptr);
std::vector<OpImpl> impls_of(std::string_view op);

// Runs `op` on `stream`: tensors holds inputs and pre-allocated outputs by name; params are
// text values ("8", "sigmoid", "true") checked against the contract.
Status run_op(const Device& device, const Stream& stream, std::string_view op,
              std::map<std::string, Tensor, std::less<>>& tensors,
              const std::map<std::string, std::string>& params = {});

// run_op with the caller's explicit choice of implementation (one of impls_of(op)): for
// tests and benchmarks that check or time each variant. HAL_UNSUPPORTED when it cannot run
// on this device.
Status run_op_with(const OpImpl& impl, const Device& device, const Stream& stream,
                   std::map<std::string, Tensor, std::less<>>& tensors,
                   const std::map<std::string, std::string>& params = {});

// Allocates every output of `op` for the given inputs and params (shapes from the contract).
Status allocate_outputs(const Device& device, std::string_view op,
                        std::map<std::string, Tensor, std::less<>>& tensors,
                        const std::map<std::string, std::string>& params = {});

}  // namespace halcyon::ops
