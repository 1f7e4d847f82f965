#include "executor.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cstdio>
#include <string_view>
#include <unordered_map>

#include "wave.hpp"

namespace halcyon::amdsim {

[[noreturn]] void fail(const Inst& in, const std::string& why) {
  throw SimError(fmt::format("{} at 0x{:x}: {}", in.text, in.addr, why));
}

namespace {

const std::unordered_map<std::string, HandlerEntry>& handler_table() {
  static const auto table = [] {
    std::unordered_map<std::string, HandlerEntry> t;
    for (auto list : {salu_handlers(), valu_handlers(), memory_handlers(), mfma_handlers()})
      for (auto& e : list) t[e.op] = e;
    return t;
  }();
  return table;
}

// Comparisons are many names over few semantics: v_cmp[x]_<cond>_<type>, s_cmp_<cond>_<type>.
// aux = condition index, aux2 = type index (see exec_valu.cpp / exec_salu.cpp).
const char* const kCmpConds[] = {"f", "lt", "eq", "le", "gt", "lg", "ge", "o", "u", "nge", "nlg", "ngt",
                                 "nle", "neq", "nlt", "tru", "ne", "t"};
const char* const kCmpTypes[] = {"f32", "i32", "u32", "f16", "i16", "u16", "f64", "i64", "u64"};

bool bind_compare(Inst& in, const std::string& prefix, const char* handler) {
  if (in.op.rfind(prefix, 0) != 0) return false;
  std::string rest = in.op.substr(prefix.size());
  auto us = rest.rfind('_');
  if (us == std::string::npos) return false;
  std::string cond = rest.substr(0, us), type = rest.substr(us + 1);
  int ci = -1, ti = -1;
  for (int i = 0; i < int(std::size(kCmpConds)); ++i)
    if (cond == kCmpConds[i]) ci = i;
  for (int i = 0; i < int(std::size(kCmpTypes)); ++i)
    if (type == kCmpTypes[i]) ti = i;
  auto it = handler_table().find(handler);
  if (ci < 0 || ti < 0 || it == handler_table().end()) return false;
  in.fn = it->second.fn;
  in.aux = ci;
  in.aux2 = ti;
  return true;
}

// DPP (VOP1/VOP2 encodings): the simulator runs 32-bit forms whose src0 is one VGPR; compares,
// lane moves and EXEC writers in DPP form are refused.
std::string bind_dpp(Inst& in) {
  const InstInfo& f = in.info;
  size_t src = f.ndefs;
  bool plain = f.cls == InstClass::Valu && !f.lane_op && !f.writes_exec && in.op.rfind("v_cmp", 0) != 0;
  if (!plain || src >= in.ops.size() || in.ops[src].kind != OpKind::Vgpr || in.ops[src].count != 1)
    return "the DPP form of '" + in.op + "' is not simulated (only 32-bit VALU operations whose src0 is one VGPR)";
  in.inner = in.fn;
  in.fn = dpp_exec;
  in.dpp_src = in.ops[src];
  in.dpp_index = int8_t(src);
  in.ops[src].kind = OpKind::Dpp;
  return "";
}

}  // namespace

Program::Program(const Decoder& decoder, const std::vector<unsigned char>& image, const hsaco::Kernel& kernel)
    : kernel_(kernel), start_(kernel.code_address), arch_(decoder.cpu()) {
  const auto& kd = kernel.descriptor;
  uint32_t allocated = ((kd.compute_pgm_rsrc1 & 0x3f) + 1) * 8;  // unified file, granules of 8
  uint32_t accum = ((kd.compute_pgm_rsrc3 & 0x3f) + 1) * 4;
  vgprs_ = std::min(accum, allocated);
  agprs_ = allocated > accum ? allocated - accum : 0;
  uint64_t end = kernel.code_size ? start_ + kernel.code_size : image.size();
  if (end > image.size()) end = image.size();
  index_.assign((end - start_ + 3) / 4, -1);
  for (uint64_t pc = start_; pc + 4 <= end;) {
    Inst in = decoder.decode(image.data() + pc, end - pc, pc);
    if (in.error.empty()) bind(in);
    index_[(pc - start_) / 4] = int32_t(insts_.size());
    pc += in.size;
    insts_.push_back(std::move(in));
  }
}

void Program::bind(Inst& in) const {
  // Registers past the descriptor's allocation are undefined on hardware: refuse them.
  for (auto& o : in.ops) {
    uint32_t last = uint32_t(o.index) + o.count;
    if (o.kind == OpKind::Vgpr && last > vgprs_)
      in.error = fmt::format("uses v{} but the kernel descriptor allocates {} VGPRs", last - 1, vgprs_);
    if (o.kind == OpKind::Agpr && last > agprs_)
      in.error = fmt::format("uses a{} but the kernel descriptor allocates {} AGPRs", last - 1, agprs_);
    if (o.kind == OpKind::Sgpr && last > uint32_t(kSgprs))
      in.error = fmt::format("uses s{}, past the {} SGPRs", last - 1, kSgprs);
  }
  if (!in.error.empty()) return;
  classify(in, arch_);
  auto& t = handler_table();
  // LDS DMA has handlers of its own: "buffer_load_dword_lds".
  if (auto it = t.find(in.mods.lds ? in.op + "_lds" : in.op); it != t.end()) {
    in.fn = it->second.fn;
    in.aux = it->second.aux;
    in.aux2 = it->second.aux2;
  } else if (in.mods.lds) {
    in.error = "'" + in.mnemonic + " ... lds' is not simulated (LDS DMA: buffer_load_dword only)";
    return;
  } else if (!bind_compare(in, "v_cmpx_", "v_cmpx") && !bind_compare(in, "v_cmp_", "v_cmp") &&
             !bind_compare(in, "s_cmp_", "s_cmp")) {
    in.error = "instruction '" + in.mnemonic + "' is not supported by the simulator";
    return;
  }
  if (in.mods.dpp) in.error = bind_dpp(in);
}

const Inst* Program::at(uint64_t addr) const {
  if (addr < start_ || (addr - start_) % 4 || (addr - start_) / 4 >= index_.size()) return nullptr;
  int32_t i = index_[(addr - start_) / 4];
  return i < 0 ? nullptr : &insts_[size_t(i)];
}

namespace {

// Fills the hidden kernel arguments of code object v5 that the simulator can honour.
void fill_hidden(const hsaco::Kernel& k, const LaunchParams& p, unsigned char* seg) {
  auto put = [&](const hsaco::Arg& a, uint64_t v) { std::memcpy(seg + a.offset, &v, std::min<uint32_t>(a.size, 8)); };
  uint32_t dims = p.grid[2] * p.block[2] > 1 ? 3 : p.grid[1] * p.block[1] > 1 ? 2 : 1;
  for (auto& a : k.args) {
    const std::string& v = a.value_kind;
    if (v == "hidden_block_count_x") put(a, p.grid[0]);
    else if (v == "hidden_block_count_y") put(a, p.grid[1]);
    else if (v == "hidden_block_count_z") put(a, p.grid[2]);
    else if (v == "hidden_group_size_x") put(a, p.block[0]);
    else if (v == "hidden_group_size_y") put(a, p.block[1]);
    else if (v == "hidden_group_size_z") put(a, p.block[2]);
    else if (v == "hidden_grid_dims") put(a, dims);
    else if (v == "hidden_dynamic_lds_size") put(a, p.dynamic_lds);
    // remainders (the grid is whole workgroups), global offsets and the rest stay zero
  }
}

struct WorkgroupRunner {
  const Program& prog;
  Memory& mem;
  const LaunchParams& p;
  uint64_t kernarg = 0, dispatch_packet = 0;
  uint64_t budget;

  void init_wave(Wave& w, const Dispatch& d, uint32_t index, uint32_t threads) {
    const auto& kd = prog.kernel().descriptor;
    w.init(prog.vgprs(), prog.agprs());
    w.index = index;
    uint32_t first = index * kLanes;
    uint32_t lanes = std::min<uint32_t>(kLanes, threads - first);
    w.exec = lanes == 64 ? ~0ull : ((1ull << lanes) - 1);
    // User SGPRs, in the order AMDGPUUsage gives.
    uint32_t s = 0;
    uint16_t props = kd.kernel_code_properties;
    auto put64 = [&](uint64_t v) {
      w.s[s++] = uint32_t(v);
      w.s[s++] = uint32_t(v >> 32);
    };
    if (props & 1) s += 4;  // private segment buffer: no scratch is simulated
    if (props & 2) put64(dispatch_packet);
    if (props & 4) put64(0);  // queue pointer: not simulated
    if (props & 8) put64(kernarg);
    if (props & 16) put64(0);  // dispatch id
    if (props & 32) put64(0);  // flat scratch init
    if (props & 64) w.s[s++] = 0;
    uint32_t rsrc2 = kd.compute_pgm_rsrc2;
    s = (rsrc2 >> 1) & 0x1f;  // USER_SGPR_COUNT is authoritative for where system SGPRs start
    if (rsrc2 & (1u << 7)) w.s[s++] = d.group[0];
    if (rsrc2 & (1u << 8)) w.s[s++] = d.group[1];
    if (rsrc2 & (1u << 9)) w.s[s++] = d.group[2];
    if (rsrc2 & (1u << 10)) w.s[s++] = 0;  // workgroup info
    if (rsrc2 & 1u) w.s[s++] = 0;          // private segment wave offset
    for (uint32_t i = 0; i < s; ++i) w.strict.sinit[i] = true;
    w.strict.sinit[kSlotExec] = w.strict.sinit[kSlotExec + 1] = true;
    w.hwreg[1] = (kd.compute_pgm_rsrc1 >> 12) & 0xff;  // MODE: the descriptor's float mode
    // Work-item ids, packed into v0 on gfx90a/gfx942 (x | y << 10 | z << 20).
    uint32_t vdims = (rsrc2 >> 11) & 3;
    for (uint32_t l = 0; l < lanes; ++l) {
      uint32_t t = first + l;
      uint32_t x = t % p.block[0], y = (t / p.block[0]) % p.block[1], z = t / (p.block[0] * p.block[1]);
      w.vr(0, l) = x | (vdims >= 1 ? y << 10 : 0) | (vdims >= 2 ? z << 20 : 0);
    }
    if (w.num_v) w.strict.vinit[0] = ~0ull;
  }

  // Runs one wave until it ends or reaches s_barrier.
  void step(Wave& w, Dispatch& d) {
    while (!w.done) {
      const Inst* in = prog.at(w.pc);
      if (!in)
        throw SimError(fmt::format("the program counter 0x{:x} is not the start of an instruction of {}", w.pc,
                                   prog.kernel().name));
      if (!in->error.empty()) fail(*in, in->error);
      d.branched = false;
      d.barrier = false;
      in->executed = true;
      strict_before(w, *in);
      uint64_t exec_before = w.exec;
      in->fn(w, *in, d);
      strict_after(w, *in, exec_before);
      w.pc = d.branched ? d.branch_target : w.pc + in->size;
      if (++d.instructions > budget)
        throw SimError(fmt::format("{} did not finish within {} instructions (last at 0x{:x}); an endless loop?",
                                   prog.kernel().name, budget, in->addr));
      if (d.barrier) {
        w.at_barrier = true;
        return;
      }
    }
  }

  void run_group(uint32_t gx, uint32_t gy, uint32_t gz, uint64_t* instructions) {
    Dispatch d;
    d.mem = &mem;
    d.grid[0] = p.grid[0]; d.grid[1] = p.grid[1]; d.grid[2] = p.grid[2];
    d.block[0] = p.block[0]; d.block[1] = p.block[1]; d.block[2] = p.block[2];
    d.group[0] = gx; d.group[1] = gy; d.group[2] = gz;
    d.code_base = p.code_base;
    d.instructions = *instructions;
    // Poisoned, as uninitialised LDS is on hardware: a kernel that reads before it writes
    // gets garbage here too.
    d.lds.assign(prog.kernel().group_segment_fixed_size + p.dynamic_lds, 0xcd);
    d.lds_tags.assign((d.lds.size() + 3) / 4, Dispatch::LdsTag{});
    uint32_t threads = p.block[0] * p.block[1] * p.block[2];
    std::vector<Wave> waves((threads + kLanes - 1) / kLanes);
    for (uint32_t i = 0; i < waves.size(); ++i) {
      init_wave(waves[i], d, i, threads);
      waves[i].pc = prog.kernel().code_address;
    }
    for (;;) {
      bool any = false;
      for (auto& w : waves) {
        if (w.done || w.at_barrier) continue;
        try {
          step(w, d);
        } catch (const SimError& e) {
          throw SimError(fmt::format("{}: workgroup ({},{},{}) wave {}: {}", prog.kernel().name, gx, gy, gz, w.index,
                                     e.what()));
        }
        any = true;
      }
      bool waiting = false;
      for (auto& w : waves) waiting |= !w.done && w.at_barrier;
      if (waiting) {
        for (auto& w : waves) w.at_barrier = false;  // every live wave has arrived
        ++d.lds_epoch;
        continue;
      }
      if (!any) break;
    }
    *instructions = d.instructions;
  }
};

}  // namespace

void run_kernel(const Program& program, Memory& memory, const LaunchParams& p) {
  const hsaco::Kernel& k = program.kernel();
  if (k.private_segment_fixed_size > 0 || k.descriptor.private_segment_fixed_size > 0)
    throw SimError(fmt::format("{} uses {} bytes of scratch (private segment), which the simulator does not model",
                               k.name, k.private_segment_fixed_size));
  if (k.wavefront_size != 0 && k.wavefront_size != 64)
    throw SimError(fmt::format("{} is built for wave{}; the simulator runs wave64", k.name, k.wavefront_size));
  // The kernarg segment: explicit arguments, then the hidden ones; read-only to the kernel.
  std::vector<uint64_t> kernarg((std::max<size_t>(k.kernarg_segment_size, p.args_size) + 7) / 8 + 1, 0);
  auto* seg = reinterpret_cast<unsigned char*>(kernarg.data());
  if (p.args_size) std::memcpy(seg, p.args, p.args_size);
  fill_hidden(k, p, seg);
  // An hsa_kernel_dispatch_packet_t for kernels that ask for the dispatch pointer.
  unsigned char packet[64] = {};
  uint16_t wg[3] = {uint16_t(p.block[0]), uint16_t(p.block[1]), uint16_t(p.block[2])};
  uint32_t grid_items[3] = {p.grid[0] * p.block[0], p.grid[1] * p.block[1], p.grid[2] * p.block[2]};
  uint32_t lds = k.group_segment_fixed_size + p.dynamic_lds;
  uint64_t kernarg_addr = reinterpret_cast<uint64_t>(seg);
  std::memcpy(packet + 4, wg, 6);
  std::memcpy(packet + 12, grid_items, 12);
  std::memcpy(packet + 28, &lds, 4);
  std::memcpy(packet + 40, &kernarg_addr, 8);

  std::lock_guard lock(memory.mutex());
  WorkgroupRunner r{program, memory, p, kernarg_addr, reinterpret_cast<uint64_t>(packet),
                    p.max_instructions ? p.max_instructions : (uint64_t(1) << 34)};
  struct Registration {  // removes the launch's own regions however the launch ends
    Memory& m;
    std::vector<uint64_t> bases;
    ~Registration() {
      for (auto b : bases) m.remove_locked(b);
    }
  } reg{memory, {}};
  memory.add_locked(kernarg_addr, kernarg.size() * 8, "the kernarg segment of " + k.name, false);
  reg.bases.push_back(kernarg_addr);
  memory.add_locked(reinterpret_cast<uint64_t>(packet), sizeof packet, "the dispatch packet", false);
  reg.bases.push_back(reinterpret_cast<uint64_t>(packet));
  uint64_t instructions = 0;
  for (uint32_t z = 0; z < p.grid[2]; ++z)
    for (uint32_t y = 0; y < p.grid[1]; ++y)
      for (uint32_t x = 0; x < p.grid[0]; ++x) r.run_group(x, y, z, &instructions);
  // Coverage (tests/amd/coverage.cmake reads it).
  if (const char* path = p.coverage_file) {
    if (std::FILE* f = std::fopen(path, "a")) {
      for (const Inst& in : program.instructions())
        if (in.executed) std::fprintf(f, "%s %s\n", k.name.c_str(), in.mnemonic.c_str());
      std::fclose(f);
    }
  }
}

std::string sim_options(const char* max_instructions, const char* coverage, LaunchParams* p) {
  if (max_instructions) {
    std::string_view v(max_instructions);
    uint64_t n = 0;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (v.empty() || ec != std::errc() || end != v.data() + v.size() || n == 0 || n > (uint64_t(1) << 62))
      return fmt::format("option amdgpu-sim.max_instructions='{}' is not a whole number in [1, 2^62]", v);
    p->max_instructions = n;
  }
  if (coverage && !*coverage) return "option amdgpu-sim.coverage is empty: name the file to append to";
  return {};
}

}  // namespace halcyon::amdsim
