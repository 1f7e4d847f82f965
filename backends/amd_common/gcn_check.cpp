// Build-time check of an assembled code object against its kernel contract
// (kernels/gcn/contracts/<kernel>.kernel): the ELF target and code-object version, and the
// NT_AMDGPU_METADATA argument offsets/sizes/kinds, LDS size and register counts, which must
// also agree with the kernel descriptor the assembler produced from the .amdhsa directives.
//
//   gcn_check <contract> <code object> <arch>
// Prints every mismatch and exits 1 if there is any.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "hsaco.hpp"

namespace {

struct ContractArg {
  std::string name, kind;
  uint32_t offset = 0, size = 0;
};

struct Contract {
  std::string kernel;
  std::vector<ContractArg> args;
  uint32_t lds = 0, sgpr_max = 0, vgpr_max = 0, agpr = 0, workgroup = 0;
};

bool read_contract(const std::string& path, Contract* c, std::string* err) {
  std::ifstream in(path);
  if (!in) {
    *err = "cannot open " + path;
    return false;
  }
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (auto h = line.find('#'); h != std::string::npos) line.resize(h);
    std::istringstream ss(line);
    std::string key;
    if (!(ss >> key)) continue;
    bool ok = true;
    if (key == "kernel") {
      ok = bool(ss >> c->kernel);
    } else if (key == "arg") {
      ContractArg a;
      ok = bool(ss >> a.name >> a.kind >> a.offset >> a.size);
      c->args.push_back(a);
    } else if (key == "lds") {
      ok = bool(ss >> c->lds);
    } else if (key == "sgpr_max") {
      ok = bool(ss >> c->sgpr_max);
    } else if (key == "vgpr_max") {
      ok = bool(ss >> c->vgpr_max);
    } else if (key == "agpr") {
      ok = bool(ss >> c->agpr);
    } else if (key == "workgroup") {
      ok = bool(ss >> c->workgroup);
    } else {
      ok = false;
    }
    if (!ok) {
      *err = path + ":" + std::to_string(lineno) + ": cannot read '" + line + "'";
      return false;
    }
  }
  if (c->kernel.empty()) {
    *err = path + ": no 'kernel' line";
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: gcn_check <contract> <code object> <arch>\n");
    return 2;
  }
  std::string cpath = argv[1], opath = argv[2], arch = argv[3];
  Contract c;
  std::string err;
  if (!read_contract(cpath, &c, &err)) {
    std::fprintf(stderr, "gcn_check: %s\n", err.c_str());
    return 1;
  }
  std::ifstream in(opath, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  halcyon::hsaco::CodeObject co;
  if (!halcyon::hsaco::parse(bytes.data(), bytes.size(), &co, &err)) {
    std::fprintf(stderr, "gcn_check: %s: %s\n", opath.c_str(), err.c_str());
    return 1;
  }
  std::vector<std::string> bad;
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok) bad.push_back(what);
  };
  auto num = [](uint64_t v) { return std::to_string(v); };
  expect(co.arch == arch, "ELF e_flags say " + co.arch + ", expected " + arch);
  expect(co.abi_version == 3, "code object ABI version " + num(co.abi_version) + ", expected 3 (code object v5)");
  expect(co.target.rfind("amdgcn-amd-amdhsa--" + arch, 0) == 0, "metadata target '" + co.target + "' is not for " + arch);
  const halcyon::hsaco::Kernel* k = co.find(c.kernel);
  if (!k) {
    std::fprintf(stderr, "gcn_check: %s: kernel %s is not in the metadata\n", opath.c_str(), c.kernel.c_str());
    return 1;
  }
  std::vector<const halcyon::hsaco::Arg*> explicit_args;
  for (auto& a : k->args)
    if (!a.hidden()) explicit_args.push_back(&a);
  expect(explicit_args.size() == c.args.size(),
         "metadata has " + num(explicit_args.size()) + " explicit arguments, contract " + num(c.args.size()));
  for (size_t i = 0; i < c.args.size() && i < explicit_args.size(); ++i) {
    const auto& m = *explicit_args[i];
    const auto& w = c.args[i];
    expect(m.name == w.name && m.value_kind == w.kind && m.offset == w.offset && m.size == w.size,
           "argument " + num(i) + ": metadata " + m.name + " " + m.value_kind + " @" + num(m.offset) + "+" +
               num(m.size) + ", contract " + w.name + " " + w.kind + " @" + num(w.offset) + "+" + num(w.size));
  }
  const auto& kd = k->descriptor;
  expect(k->kernarg_segment_size >= k->explicit_args_size(), "kernarg_segment_size is smaller than the arguments");
  expect(kd.kernarg_size == k->kernarg_segment_size,
         "descriptor kernarg_size " + num(kd.kernarg_size) + " != metadata " + num(k->kernarg_segment_size));
  expect(k->group_segment_fixed_size == c.lds, "metadata LDS " + num(k->group_segment_fixed_size) + " != contract " + num(c.lds));
  expect(kd.group_segment_fixed_size == c.lds, "descriptor LDS " + num(kd.group_segment_fixed_size) + " != contract " + num(c.lds));
  expect(k->private_segment_fixed_size == 0 && kd.private_segment_fixed_size == 0, "kernel uses scratch");
  expect(k->wavefront_size == 64, "wavefront size " + num(k->wavefront_size));
  expect(k->max_flat_workgroup_size == c.workgroup,
         "max_flat_workgroup_size " + num(k->max_flat_workgroup_size) + " != contract " + num(c.workgroup));
  expect(k->sgpr_count <= c.sgpr_max, "metadata sgpr_count " + num(k->sgpr_count) + " > contract " + num(c.sgpr_max));
  expect(k->vgpr_count <= c.vgpr_max, "metadata vgpr_count " + num(k->vgpr_count) + " > contract " + num(c.vgpr_max));
  expect(k->agpr_count == c.agpr, "metadata agpr_count " + num(k->agpr_count) + " != contract " + num(c.agpr));
  // gfx90a/gfx942: one unified file; VGPRs in granules of 8, AGPRs start at accum_offset.
  uint32_t allocated = ((kd.compute_pgm_rsrc1 & 0x3f) + 1) * 8;
  uint32_t accum_offset = ((kd.compute_pgm_rsrc3 & 0x3f) + 1) * 4;
  expect(accum_offset >= k->vgpr_count, "descriptor accum_offset " + num(accum_offset) + " < vgpr_count " + num(k->vgpr_count));
  expect(allocated >= accum_offset + k->agpr_count,
         "descriptor allocates " + num(allocated) + " registers, fewer than accum_offset + agpr_count");
  uint32_t sgprs = ((kd.compute_pgm_rsrc1 >> 6) & 0xf) * 8 + 8;  // granules of 8 on gfx9 (plus VCC etc.)
  expect(sgprs >= k->sgpr_count, "descriptor allocates " + num(sgprs) + " SGPRs, fewer than sgpr_count " + num(k->sgpr_count));
  for (auto& b : bad) std::fprintf(stderr, "gcn_check: %s (%s, %s): %s\n", opath.c_str(), c.kernel.c_str(), arch.c_str(), b.c_str());
  return bad.empty() ? 0 : 1;
}
