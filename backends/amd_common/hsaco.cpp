#include "hsaco.hpp"

#include <elf.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>

namespace halcyon::hsaco {
namespace {

// ---- msgpack: just enough for the metadata note (maps, arrays, strings, numbers, bools) ----

struct Node {
  enum Kind { Nil, Bool, Int, Float, Str, Arr, Map } kind = Nil;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<Node> arr;
  // A map as two parallel vectors: keys are strings in this format. (Not a vector of
  // pair<string, Node>: pair needs Node complete, which clang's libstdc++ checks here.)
  std::vector<std::string> keys;
  std::vector<Node> values;

  const Node* get(const std::string& key) const {
    for (size_t i = 0; i < keys.size(); ++i)
      if (keys[i] == key) return &values[i];
    return nullptr;
  }
  std::string str(const std::string& key) const {
    const Node* n = get(key);
    return n && n->kind == Str ? n->s : std::string();
  }
  uint32_t u32(const std::string& key) const {
    const Node* n = get(key);
    return n && n->kind == Int ? uint32_t(n->i) : 0;
  }
};

class MsgpackReader {
 public:
  MsgpackReader(const unsigned char* p, size_t n) : p_(p), end_(p + n) {}
  Node read(int depth = 0) {
    if (depth > 32) throw std::runtime_error("metadata nests too deeply");
    uint8_t t = byte();
    Node n;
    if (t <= 0x7f) return num(t);
    if (t >= 0xe0) return num(int8_t(t));
    if ((t & 0xf0) == 0x80) return map(t & 0x0f, depth);
    if ((t & 0xf0) == 0x90) return array(t & 0x0f, depth);
    if ((t & 0xe0) == 0xa0) return string(t & 0x1f);
    switch (t) {
      case 0xc0: return n;
      case 0xc2: n.kind = Node::Bool; return n;
      case 0xc3: n.kind = Node::Bool; n.i = 1; return n;
      case 0xca: { uint32_t v = uint32_t(be(4)); float f; std::memcpy(&f, &v, 4); n.kind = Node::Float; n.f = f; return n; }
      case 0xcb: { uint64_t v = be(8); double d; std::memcpy(&d, &v, 8); n.kind = Node::Float; n.f = d; return n; }
      case 0xcc: return num(int64_t(be(1)));
      case 0xcd: return num(int64_t(be(2)));
      case 0xce: return num(int64_t(be(4)));
      case 0xcf: return num(int64_t(be(8)));
      case 0xd0: return num(int8_t(be(1)));
      case 0xd1: return num(int16_t(be(2)));
      case 0xd2: return num(int32_t(be(4)));
      case 0xd3: return num(int64_t(be(8)));
      case 0xd9: return string(be(1));
      case 0xda: return string(be(2));
      case 0xdb: return string(be(4));
      case 0xdc: return array(be(2), depth);
      case 0xdd: return array(be(4), depth);
      case 0xde: return map(be(2), depth);
      case 0xdf: return map(be(4), depth);
      case 0xc4: case 0xc5: case 0xc6: {  // bin: skipped as an empty string
        uint64_t len = be(t == 0xc4 ? 1 : t == 0xc5 ? 2 : 4);
        need(len);
        p_ += len;
        n.kind = Node::Str;
        return n;
      }
    }
    throw std::runtime_error("unsupported msgpack type byte 0x" + hex(t));
  }

 private:
  static std::string hex(unsigned v) {
    char b[16];
    std::snprintf(b, sizeof b, "%02x", v);
    return b;
  }
  void need(uint64_t n) {
    if (uint64_t(end_ - p_) < n) throw std::runtime_error("metadata note is truncated");
  }
  uint8_t byte() { need(1); return *p_++; }
  uint64_t be(int n) {
    need(uint64_t(n));
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v = (v << 8) | *p_++;
    return v;
  }
  static Node num(int64_t v) { Node n; n.kind = Node::Int; n.i = v; return n; }
  Node string(uint64_t len) {
    need(len);
    Node n;
    n.kind = Node::Str;
    n.s.assign(reinterpret_cast<const char*>(p_), len);
    p_ += len;
    return n;
  }
  Node array(uint64_t count, int depth) {
    Node n;
    n.kind = Node::Arr;
    for (uint64_t i = 0; i < count; ++i) n.arr.push_back(read(depth + 1));
    return n;
  }
  Node map(uint64_t count, int depth) {
    Node n;
    n.kind = Node::Map;
    for (uint64_t i = 0; i < count; ++i) {
      Node k = read(depth + 1);
      if (k.kind != Node::Str) throw std::runtime_error("metadata map key is not a string");
      n.keys.push_back(k.s);
      n.values.push_back(read(depth + 1));
    }
    return n;
  }
  const unsigned char* p_;
  const unsigned char* end_;
};

// ---- ELF ----

struct Elf {
  const unsigned char* data;
  size_t size;
  const Elf64_Ehdr* eh() const { return reinterpret_cast<const Elf64_Ehdr*>(data); }
  // `data` is 8-byte aligned (parse copies the image): a structure is read in place only at an
  // offset of its own alignment, as the ELF format requires; anything else is refused, never
  // read misaligned (tests/fuzz found a section header table at an odd offset).
  template <typename T>
  const T* at(uint64_t off, uint64_t count = 1) const {
    if (off > size || count > (size - off) / sizeof(T))
      throw std::runtime_error("ELF structure at offset " + std::to_string(off) + " lies past the end of the file");
    if (off % alignof(T) != 0)
      throw std::runtime_error("ELF structure at offset " + std::to_string(off) + " is not " +
                               std::to_string(alignof(T)) + "-byte aligned");
    return reinterpret_cast<const T*>(data + off);
  }
};

void read_descriptor(const unsigned char* p, KernelDescriptor* kd) {
  auto u32 = [&](int off) { uint32_t v; std::memcpy(&v, p + off, 4); return v; };
  kd->group_segment_fixed_size = u32(0);
  kd->private_segment_fixed_size = u32(4);
  kd->kernarg_size = u32(8);
  std::memcpy(&kd->kernel_code_entry_byte_offset, p + 16, 8);
  kd->compute_pgm_rsrc3 = u32(44);
  kd->compute_pgm_rsrc1 = u32(48);
  kd->compute_pgm_rsrc2 = u32(52);
  std::memcpy(&kd->kernel_code_properties, p + 56, 2);
  std::memcpy(&kd->kernarg_preload, p + 58, 2);
}

void parse_metadata(const Node& root, CodeObject* co) {
  co->target = root.str("amdhsa.target");
  const Node* ks = root.get("amdhsa.kernels");
  if (!ks || ks->kind != Node::Arr) throw std::runtime_error("metadata has no amdhsa.kernels list");
  for (const Node& kn : ks->arr) {
    Kernel k;
    k.name = kn.str(".name");
    k.symbol = kn.str(".symbol");
    k.kernarg_segment_size = kn.u32(".kernarg_segment_size");
    k.kernarg_segment_align = kn.u32(".kernarg_segment_align");
    k.group_segment_fixed_size = kn.u32(".group_segment_fixed_size");
    k.private_segment_fixed_size = kn.u32(".private_segment_fixed_size");
    k.sgpr_count = kn.u32(".sgpr_count");
    k.vgpr_count = kn.u32(".vgpr_count");
    k.agpr_count = kn.u32(".agpr_count");
    k.wavefront_size = kn.u32(".wavefront_size");
    k.max_flat_workgroup_size = kn.u32(".max_flat_workgroup_size");
    if (const Node* args = kn.get(".args"); args && args->kind == Node::Arr) {
      for (const Node& an : args->arr) {
        Arg a;
        a.name = an.str(".name");
        a.value_kind = an.str(".value_kind");
        a.address_space = an.str(".address_space");
        a.offset = an.u32(".offset");
        a.size = an.u32(".size");
        // Every argument inside the kernarg segment (64-bit sums: no wrap): launches write
        // each one at its offset into a segment of that size, hidden ones included.
        if (uint64_t(a.offset) + a.size > k.kernarg_segment_size)
          throw std::runtime_error("kernel '" + k.name + "': argument '" + (a.name.empty() ? a.value_kind : a.name) +
                                   "' at offset " + std::to_string(a.offset) + " of " + std::to_string(a.size) +
                                   " bytes runs past its .kernarg_segment_size " +
                                   std::to_string(k.kernarg_segment_size));
        k.args.push_back(a);
      }
    }
    if (k.name.empty() || k.symbol.empty()) throw std::runtime_error("a kernel in the metadata lacks .name or .symbol");
    co->kernels.push_back(std::move(k));
  }
}

}  // namespace

uint32_t Kernel::explicit_args_size() const {
  uint32_t end = 0;
  for (auto& a : args)
    if (!a.hidden() && a.offset + a.size > end) end = a.offset + a.size;
  return end;
}

const Kernel* CodeObject::find(const std::string& name) const {
  for (auto& k : kernels)
    if (k.name == name) return &k;
  return nullptr;
}

std::vector<unsigned char> CodeObject::load_image() const {
  std::vector<unsigned char> img(image_size, 0);
  for (auto& s : segments)
    if (!s.bytes.empty()) std::memcpy(img.data() + s.vaddr, s.bytes.data(), s.bytes.size());
  return img;
}

std::string arch_from_mach(uint32_t mach) {
  switch (mach) {
    case 0x2f: return "gfx908";
    case 0x3f: return "gfx90a";
    case 0x4c: return "gfx942";
    case 0x4b: return "gfx941";
    case 0x40: return "gfx940";
    case 0x30: return "gfx1030";
    case 0x41: return "gfx1100";
  }
  return "";
}

bool parse(const void* data, size_t size, CodeObject* out, std::string* error) {
  try {
    *out = CodeObject{};
    std::vector<uint64_t> aligned((size + 7) / 8);  // the image, 8-byte aligned whatever its source
    if (size) std::memcpy(aligned.data(), data, size);
    Elf elf{reinterpret_cast<const unsigned char*>(aligned.data()), size};
    const auto* eh = elf.at<Elf64_Ehdr>(0);
    if (std::memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64)
      throw std::runtime_error("not a 64-bit ELF file");
    if (eh->e_machine != EM_AMDGPU)
      throw std::runtime_error("ELF machine is " + std::to_string(eh->e_machine) + ", not EM_AMDGPU (224)");
    if (eh->e_ident[EI_OSABI] != 64 /* ELFOSABI_AMDGPU_HSA */)
      throw std::runtime_error("ELF OS ABI is not AMDGPU_HSA");
    out->abi_version = eh->e_ident[EI_ABIVERSION];
    out->e_flags = eh->e_flags;
    out->arch = arch_from_mach(eh->e_flags & 0xff);
    if (out->arch.empty())
      throw std::runtime_error("unknown EF_AMDGPU_MACH " + std::to_string(eh->e_flags & 0xff));

    const auto* ph = elf.at<Elf64_Phdr>(eh->e_phoff, eh->e_phnum);
    for (int i = 0; i < eh->e_phnum; ++i) {
      if (ph[i].p_type != PT_LOAD) continue;
      if (ph[i].p_filesz > ph[i].p_memsz || ph[i].p_memsz > (1ull << 30) || ph[i].p_vaddr > (1ull << 30))
        throw std::runtime_error("PT_LOAD segment " + std::to_string(i) + " has implausible sizes");
      Segment s;
      s.vaddr = ph[i].p_vaddr;
      s.memsz = ph[i].p_memsz;
      const auto* b = elf.at<unsigned char>(ph[i].p_offset, ph[i].p_filesz);
      s.bytes.assign(b, b + ph[i].p_filesz);
      out->image_size = std::max(out->image_size, s.vaddr + s.memsz);
      out->segments.push_back(std::move(s));
    }

    const auto* sh = elf.at<Elf64_Shdr>(eh->e_shoff, eh->e_shnum);
    bool have_metadata = false;
    std::map<std::string, std::pair<uint64_t, uint64_t>> symbols;  // name -> value, size
    for (int i = 0; i < eh->e_shnum; ++i) {
      if (sh[i].sh_type == SHT_NOTE) {
        uint64_t off = sh[i].sh_offset, end = off + sh[i].sh_size;
        while (off + sizeof(Elf64_Nhdr) <= end) {
          const auto* nh = elf.at<Elf64_Nhdr>(off);
          uint64_t name_off = off + sizeof(Elf64_Nhdr);
          uint64_t desc_off = name_off + ((nh->n_namesz + 3) & ~3u);
          const char* name = elf.at<char>(name_off, nh->n_namesz);
          const auto* desc = elf.at<unsigned char>(desc_off, nh->n_descsz);
          if (nh->n_type == 32 /* NT_AMDGPU_METADATA */ && nh->n_namesz >= 6 && std::memcmp(name, "AMDGPU", 6) == 0) {
            MsgpackReader r(desc, nh->n_descsz);
            parse_metadata(r.read(), out);
            have_metadata = true;
          }
          off = desc_off + ((nh->n_descsz + 3) & ~3u);
        }
      } else if (sh[i].sh_type == SHT_SYMTAB || sh[i].sh_type == SHT_DYNSYM) {
        if (sh[i].sh_link >= eh->e_shnum) throw std::runtime_error("symbol table links to a missing string table");
        const Elf64_Shdr& strtab = sh[sh[i].sh_link];
        const char* strs = elf.at<char>(strtab.sh_offset, strtab.sh_size);
        uint64_t n = sh[i].sh_size / sizeof(Elf64_Sym);
        const auto* syms = elf.at<Elf64_Sym>(sh[i].sh_offset, n);
        for (uint64_t k = 0; k < n; ++k)
          if (syms[k].st_name < strtab.sh_size)
            symbols[std::string(strs + syms[k].st_name, strnlen(strs + syms[k].st_name, strtab.sh_size - syms[k].st_name))] = {syms[k].st_value, syms[k].st_size};
      }
    }
    if (!have_metadata) throw std::runtime_error("no NT_AMDGPU_METADATA note");

    auto image = out->load_image();
    for (auto& k : out->kernels) {
      auto it = symbols.find(k.symbol);
      if (it == symbols.end()) throw std::runtime_error("kernel descriptor symbol '" + k.symbol + "' is missing");
      k.descriptor_address = it->second.first;
      // Compared without adding to the address: a symbol value near 2^64 would wrap the sum
      // (the fuzzer found one: st_value = -3 passed `address + 64 > size`).
      if (k.descriptor_address > image.size() || image.size() - k.descriptor_address < 64)
        throw std::runtime_error("kernel descriptor '" + k.symbol + "' lies outside the loaded image");
      read_descriptor(image.data() + k.descriptor_address, &k.descriptor);
      int64_t code = int64_t(k.descriptor_address) + k.descriptor.kernel_code_entry_byte_offset;
      if (code < 0 || uint64_t(code) >= image.size())
        throw std::runtime_error("kernel '" + k.name + "' code entry lies outside the loaded image");
      k.code_address = uint64_t(code);
      if (auto f = symbols.find(k.name); f != symbols.end() && f->second.first == k.code_address) k.code_size = f->second.second;
    }
    return true;
  } catch (const std::exception& ex) {
    *error = ex.what();
    return false;
  }
}

}  // namespace halcyon::hsaco
