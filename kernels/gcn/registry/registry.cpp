#include <halcyon/gcn/kernels.hpp>

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
      k.contract = e->contract;  // the build held every object to it (gcn_check)
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
