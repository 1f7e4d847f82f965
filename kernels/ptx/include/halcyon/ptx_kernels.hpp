// PTX embedded at build time (kernels/ptx), tagged with the architecture it was built for, with
// the cubin the toolkit's ptxas made of it. Load the PTX with hal_module_load(format
// HAL_MODULE_PTX, target = image->target), or on a device of exactly that target the cubin
// (HAL_MODULE_CUBIN).
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <string_view>

namespace halcyon::ptx {

struct Image {
  const char* name;    // the kernel set, e.g. "vector_add"
  const char* target;  // "sm_90a", "sm_80"
  const char* text;    // NUL-terminated PTX
  size_t size;         // bytes, without the NUL
  const unsigned char* cubin;  // ptxas -arch=<target> of that PTX
  size_t cubin_size;
};

std::span<const Image> all();

// Exactly this name and target, or null.
const Image* find(std::string_view name, std::string_view target);

// Whether an image runs on the device at hand. The rule is not kernels/'s to know: callers pass
// the device's answer (hal_device_can_run(device, HAL_MODULE_PTX, image.target), in C++
// Device::can_run), so that one owner decides.
using RunsOn = std::function<bool(const Image&)>;

// The image of `name` that suits a device of architecture `device_arch` ("sm_90a"): one built
// for exactly that arch first, else the newest (by architecture number) of those `runs` accepts.
const Image* best_for(std::string_view name, std::string_view device_arch, const RunsOn& runs);

}  // namespace halcyon::ptx
