#include <halcyon/ptx_kernels.hpp>

#include <cctype>

namespace halcyon::ptx {
namespace {

// "sm_90a" -> 90, "sm_80" -> 80; -1 if not of that form.
int arch_number(std::string_view t, bool* suffixed) {
  if (!t.starts_with("sm_")) return -1;
  t.remove_prefix(3);
  *suffixed = !t.empty() && !std::isdigit(static_cast<unsigned char>(t.back()));
  if (*suffixed) t.remove_suffix(1);
  int v = 0;
  for (char c : t) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return -1;
    v = v * 10 + (c - '0');
  }
  return t.empty() ? -1 : v;
}

}  // namespace

const Image* find(std::string_view name, std::string_view target) {
  for (const Image& i : all())
    if (name == i.name && target == i.target) return &i;
  return nullptr;
}

const Image* best_for(std::string_view name, std::string_view device_arch, const RunsOn& runs) {
  if (const Image* exact = find(name, device_arch); exact && runs(*exact)) return exact;
  const Image* best = nullptr;
  int best_v = -1;
  for (const Image& i : all()) {
    bool suffixed = false;
    int v = arch_number(i.target, &suffixed);
    if (name != i.name || v < 0 || v <= best_v || !runs(i)) continue;
    best = &i;
    best_v = v;
  }
  return best;
}

}  // namespace halcyon::ptx
