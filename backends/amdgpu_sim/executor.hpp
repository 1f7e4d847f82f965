// Running a kernel: the decoded program of one kernel and the dispatch loop over workgroups and
// their waves (round-robin between s_barrier points).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "decoder.hpp"
#include "hsaco.hpp"
#include "inst.hpp"
#include "memory.hpp"

namespace halcyon::amdsim {

// One kernel, decoded once by linear sweep over its function symbol, with every instruction
// bound to its handler (or carrying the error that executing it will raise).
class Program {
 public:
  Program(const Decoder& decoder, const std::vector<unsigned char>& image, const hsaco::Kernel& kernel);
  const Inst* at(uint64_t addr) const;  // nullptr if addr is not an instruction boundary
  const hsaco::Kernel& kernel() const { return kernel_; }
  uint32_t vgprs() const { return vgprs_; }
  uint32_t agprs() const { return agprs_; }
  const std::vector<Inst>& instructions() const { return insts_; }

 private:
  void bind(Inst& in) const;
  hsaco::Kernel kernel_;
  uint64_t start_ = 0;
  std::vector<Inst> insts_;
  std::vector<int32_t> index_;  // (addr - start) / 4 -> instruction, -1 inside one
  uint32_t vgprs_ = 0, agprs_ = 0;
  std::string arch_;
};

struct LaunchParams {
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t dynamic_lds = 0;
  const void* args = nullptr;  // explicit arguments, laid out as the metadata says
  size_t args_size = 0;
  uint64_t code_base = 0;      // host address of the loaded image
  uint64_t max_instructions = 0;  // per launch; 0 = default (2^34)
  // Coverage report (the backend option amdgpu-sim.coverage; null = none): after the launch,
  // "<kernel> <mnemonic>" is appended for every instruction the program has executed so far.
  const char* coverage_file = nullptr;
};

// Checks the backend options amdgpu-sim.max_instructions (a whole number in [1, 2^62]) and
// amdgpu-sim.coverage (a file name, not empty); null means not given. Fills the matching
// fields of *p. Returns "" when both are good, else what is wrong, naming option and value.
std::string sim_options(const char* max_instructions, const char* coverage, LaunchParams* p);

// Runs every workgroup of the launch. Throws SimError naming the workgroup, wave, instruction
// and address on any fault.
void run_kernel(const Program& program, Memory& memory, const LaunchParams& params);

}  // namespace halcyon::amdsim
