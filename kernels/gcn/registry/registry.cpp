#include <halcyon/gcn/kernels.hpp>

#include <stdexcept>

#include "gcn_registry_table.hpp"

extern const halcyon::gcn::EmbeddedImage kGcnImages[];

namespace halcyon::gcn {

const std::vector<KernelImage>& kernels() {
  static const std::vector<KernelImage> all = [] {
    std::vector<KernelImage> out;
    for (const EmbeddedImage* e = kGcnImages; e->name; ++e) {
      KernelImage k;
      k.name = e->name;
      k.target = e->target;
      k.data = e->data;
      k.size = e->size;
      k.contract = e->contract;
      std::string err;
      // The build checked every object (gcn_check); failing here means a corrupt build.
      if (!hsaco::parse(e->data, e->size, &k.code, &err) || !k.code.find(k.name))
        throw std::runtime_error("embedded code object " + k.name + "." + k.target + ": " + err);
      out.push_back(std::move(k));
    }
    return out;
  }();
  return all;
}

const KernelImage* find(std::string_view name, std::string_view target) {
  for (auto& k : kernels())
    if (k.name == name && k.target == target) return &k;
  return nullptr;
}

}  // namespace halcyon::gcn
