// Reader for AMD HSA code objects (ELF, code object v4/v5): the loadable image, the kernel
// descriptors and the NT_AMDGPU_METADATA note (msgpack). It depends on nothing but the C++
// library, so the HIP backend, the amdgpu-sim backend and the build-time metadata check all
// read code objects the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace halcyon::hsaco {

struct Arg {
  std::string name;        // may be empty
  std::string value_kind;  // "global_buffer", "by_value", "hidden_block_count_x", ...
  std::string address_space;
  uint32_t offset = 0;
  uint32_t size = 0;
  bool hidden() const { return value_kind.rfind("hidden_", 0) == 0; }
};

// The 64-byte kernel descriptor (AMDGPUUsage, "Kernel Descriptor").
struct KernelDescriptor {
  uint32_t group_segment_fixed_size = 0;
  uint32_t private_segment_fixed_size = 0;
  uint32_t kernarg_size = 0;
  int64_t kernel_code_entry_byte_offset = 0;
  uint32_t compute_pgm_rsrc3 = 0;
  uint32_t compute_pgm_rsrc1 = 0;
  uint32_t compute_pgm_rsrc2 = 0;
  uint16_t kernel_code_properties = 0;
  uint16_t kernarg_preload = 0;
};

struct Kernel {
  std::string name;
  std::string symbol;  // "<name>.kd"
  std::vector<Arg> args;
  uint32_t kernarg_segment_size = 0;
  uint32_t kernarg_segment_align = 0;
  uint32_t group_segment_fixed_size = 0;
  uint32_t private_segment_fixed_size = 0;
  uint32_t sgpr_count = 0;
  uint32_t vgpr_count = 0;
  uint32_t agpr_count = 0;
  uint32_t wavefront_size = 0;
  uint32_t max_flat_workgroup_size = 0;
  uint64_t descriptor_address = 0;  // virtual address of the kernel descriptor
  uint64_t code_address = 0;        // virtual address of the first instruction
  uint64_t code_size = 0;           // bytes of the kernel's function symbol (0 if unknown)
  KernelDescriptor descriptor;
  // Bytes of the explicit (non-hidden) arguments: what a caller's packed blob holds.
  uint32_t explicit_args_size() const;
};

struct Segment {
  uint64_t vaddr = 0;
  uint64_t memsz = 0;
  std::vector<unsigned char> bytes;  // filesz bytes; the rest up to memsz is zero
};

struct CodeObject {
  std::string target;  // amdhsa.target, e.g. "amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-"
  std::string arch;    // "gfx942", from the ELF header's e_flags
  uint32_t e_flags = 0;
  uint8_t abi_version = 0;  // ELFABIVERSION_AMDGPU_HSA_V5 = 3
  std::vector<Kernel> kernels;
  std::vector<Segment> segments;  // PT_LOAD segments
  uint64_t image_size = 0;        // highest vaddr + memsz

  const Kernel* find(const std::string& name) const;
  // Copies the loadable image into a zeroed buffer of image_size bytes (vaddr 0 = index 0).
  std::vector<unsigned char> load_image() const;
};

// Parses `data`. On failure returns false and sets *error to what is wrong and where.
bool parse(const void* data, size_t size, CodeObject* out, std::string* error);

// The architecture name for an EF_AMDGPU_MACH value ("gfx942"), or "" when unknown.
std::string arch_from_mach(uint32_t mach);

}  // namespace halcyon::hsaco
