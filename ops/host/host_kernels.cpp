#include "host_kernels.hpp"

#include <fmt/format.h>

#include <deque>
#include <mutex>

namespace halcyon::host {
namespace {

struct Image {
  std::mutex mu;
  std::deque<std::vector<hal_kernel_arg>> arg_storage;  // stable addresses
  std::vector<hal_host_kernel_entry> entries;
  hal_host_module_image image{};
};
Image& image() {
  static Image* i = new Image;  // referenced by modules loaded until process exit
  return *i;
}

}  // namespace

void add_host_kernel(const hal_host_kernel_entry& e) {
  auto& im = image();
  std::lock_guard lock(im.mu);
  im.arg_storage.emplace_back(e.args, e.args + e.arg_count);
  hal_host_kernel_entry copy = e;
  copy.args = im.arg_storage.back().data();
  im.entries.push_back(copy);
  im.image.struct_size = sizeof(hal_host_module_image);
  im.image.kernel_count = uint32_t(im.entries.size());
  im.image.kernels = im.entries.data();
}

HostKernel::HostKernel(const char* name, hal_host_kernel_fn fn, std::initializer_list<hal_kernel_arg> a,
                       uint32_t size)
    : args(a) {
  add_host_kernel({name, fn, uint32_t(args.size()), args.data(), size});
}

void report(const char* op, const Status& s) {
  if (!s.ok()) hal_log(HAL_LOG_ERROR, fmt::format("{} (host kernel): {}", op, s.error().message()).c_str());
}

Status launch(const ops::OpContext& ctx, const char* name, uint64_t blocks, const void* args, size_t args_size) {
  auto& im = image();
  auto mod = ctx.module(HAL_MODULE_HOST, "host", &im.image, sizeof im.image, "halcyon-host-kernels");
  if (!mod) return mod.error();
  auto k = mod->kernel(name);
  if (!k) return k.error();
  if (blocks == 0) return {};
  if (blocks > UINT32_MAX) return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: {} blocks is too many", name, blocks));
  return ctx.stream.launch(*k, {uint32_t(blocks)}, {1}, args, args_size);
}

}  // namespace halcyon::host
