// `halcyon launch`: loads one PTX file or HSA code object, launches one kernel with arguments
// given on the command line (buffers from .npy files, scalars by value) and writes every buffer
// argument back to DIR/NAME.npy. The arguments are checked against the kernel's own metadata
// (count, pointer or value, size) before anything runs.
#include <halcyon/halcyon.hpp>
#include <halcyon/runtime/npy.hpp>

#include <fmt/format.h>

#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <optional>

#include "command.hpp"

namespace {

const char* kUsage =
    "usage: halcyon launch --device URI --module FILE --kernel NAME --grid X[,Y,Z] --block X[,Y,Z]\n"
    "                      [--shared BYTES] --arg KIND:VALUE ... --out DIR\n"
    "  FILE: .ptx (PTX; target from its .target line) or .hsaco/.co/.o (HSA code object; target\n"
    "        from the ELF header).\n"
    "  --arg, once per kernel argument, in order:\n"
    "        buf:NAME=FILE.npy   a device buffer filled from the file, written back to DIR/NAME.npy\n"
    "        u32:V  i32:V  u64:V  f32:V   a scalar\n";

struct Arg {
  std::string kind;   // buf, u32, i32, u64, f32
  std::string name;   // buffers
  std::string value;  // scalars: the literal; buffers: the .npy path
  std::vector<unsigned char> bytes;  // scalars: the value as the kernel reads it, encoded once while parsing
  halcyon::rt::NpyArray array;
};

struct Options {
  std::string device, module, kernel, out;
  halcyon::Dim3 grid, block;
  uint32_t shared = 0;
  std::vector<Arg> args;
};

bool parse_dim(const std::string& s, halcyon::Dim3* d, std::string* err) {
  uint32_t v[3] = {1, 1, 1};
  size_t i = 0, pos = 0;
  while (pos <= s.size() && i < 3) {
    size_t comma = s.find(',', pos);
    std::string part = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    uint64_t x = 0;
    auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), x);  // digits only: no sign, no space
    if (part.empty() || ec != std::errc() || end != part.data() + part.size() || x == 0 || x > 0xffffffffu) {
      *err = "'" + s + "' is not X[,Y,Z] with positive integers";
      return false;
    }
    v[i++] = uint32_t(x);
    if (comma == std::string::npos) break;
    pos = comma + 1;
    if (i == 3) {
      *err = "'" + s + "' has more than three dimensions";
      return false;
    }
  }
  *d = {v[0], v[1], v[2]};
  return true;
}

std::string parse_arg(const std::string& s, Arg* a) {
  auto colon = s.find(':');
  if (colon == std::string::npos) return "--arg '" + s + "' is not KIND:VALUE";
  a->kind = s.substr(0, colon);
  std::string rest = s.substr(colon + 1);
  if (a->kind == "buf") {
    auto eq = rest.find('=');
    if (eq == std::string::npos || eq == 0) return "--arg '" + s + "' is not buf:NAME=FILE.npy";
    a->name = rest.substr(0, eq);
    a->value = rest.substr(eq + 1);
    if (a->name.find('/') != std::string::npos) return "buffer name '" + a->name + "' may not contain '/'";
    return "";
  }
  if (a->kind != "u32" && a->kind != "i32" && a->kind != "u64" && a->kind != "f32")
    return "--arg '" + s + "': kind '" + a->kind + "' is not one of buf, u32, i32, u64, f32";
  a->value = rest;
  return "";
}

// Encodes a scalar argument into a->bytes; "" or the reason it does not parse.
std::string encode_scalar(Arg* arg) {
  const Arg& a = *arg;
  std::vector<unsigned char>* out = &arg->bytes;
  const char* s = a.value.c_str();
  char* end = nullptr;
  errno = 0;
  // strto* skip leading spaces and take a sign: " -1" would become 2^64 - 1 as a u64.
  if (a.value.empty() || std::isspace(static_cast<unsigned char>(a.value[0])) || a.value[0] == '+')
    return "'" + a.value + "' is not a valid " + a.kind;
  auto put = [&](const void* p, size_t n) { out->assign(static_cast<const unsigned char*>(p), static_cast<const unsigned char*>(p) + n); };
  if (a.kind == "f32") {
    float f = std::strtof(s, &end);
    put(&f, 4);
  } else if (a.kind == "i32") {
    long long v = std::strtoll(s, &end, 0);
    if (v < INT32_MIN || v > INT32_MAX) errno = ERANGE;
    int32_t x = int32_t(v);
    put(&x, 4);
  } else {
    if (*s == '-') errno = ERANGE;
    unsigned long long v = std::strtoull(s, &end, 0);
    if (a.kind == "u32") {
      if (v > 0xffffffffull) errno = ERANGE;
      uint32_t x = uint32_t(v);
      put(&x, 4);
    } else {
      uint64_t x = v;
      put(&x, 8);
    }
  }
  if (a.value.empty() || *end || errno) return "'" + a.value + "' is not a valid " + a.kind;
  return "";
}

// The module file; a directory or FIFO is refused up front (reading one would throw or block).
std::optional<std::vector<char>> read_file(const std::string& path, std::string* err) {
  struct stat st{};
  if (stat(path.c_str(), &st) != 0) {
    *err = fmt::format("cannot read {}: {}", path, std::strerror(errno));
    return std::nullopt;
  }
  if (!S_ISREG(st.st_mode)) {
    *err = fmt::format("cannot read {}: not a regular file", path);
    return std::nullopt;
  }
  std::ifstream in(path, std::ios::binary);
  std::vector<char> data(size_t(st.st_size));
  if (!in || !in.read(data.data(), std::streamsize(data.size()))) {
    *err = fmt::format("cannot read {}", path);
    return std::nullopt;
  }
  return data;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// PTX: the word after ".target" ("sm_90a"). HSA code object: EF_AMDGPU_MACH of the ELF header.
std::string module_target(const std::vector<char>& data, hal_module_format format, std::string* err) {
  if (format == HAL_MODULE_PTX) {
    std::string text(data.begin(), data.end());
    auto t = text.find(".target");
    if (t == std::string::npos) {
      *err = "the PTX has no .target line";
      return "";
    }
    size_t b = text.find_first_not_of(" \t", t + 7), e = text.find_first_of(" \t,\r\n", b);
    return text.substr(b, e - b);
  }
  if (data.size() < 64 || std::memcmp(data.data(), "\x7f" "ELF", 4) != 0 || uint8_t(data[18]) != 224) {
    *err = "the file is not an AMDGPU ELF code object";
    return "";
  }
  uint32_t flags;
  std::memcpy(&flags, data.data() + 48, 4);
  switch (flags & 0xff) {  // EF_AMDGPU_MACH_AMDGCN_*
    case 0x2f: return "gfx908";
    case 0x3f: return "gfx90a";
    case 0x40: return "gfx940";
    case 0x4b: return "gfx941";
    case 0x4c: return "gfx942";
    case 0x41: return "gfx1100";
  }
  *err = fmt::format("unknown EF_AMDGPU_MACH 0x{:x} in the ELF header", flags & 0xff);
  return "";
}

int fail(const std::string& msg) {
  fmt::print(stderr, "halcyon launch: {}\n", msg);
  return 1;
}

// A bad option value: one line, exit status 2 (tools/README.md).
int bad_value(const std::string& msg) {
  fmt::print(stderr, "halcyon launch: {}\n", msg);
  return 2;
}

int run(const std::vector<std::string>& argv) {
  Options o;
  std::string err;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "-h" || a == "--help") {
      fmt::print("{}", kUsage);
      return 0;
    }
    if (i + 1 >= argv.size()) {
      fmt::print(stderr, "halcyon launch: option '{}' needs a value\n{}", a, kUsage);
      return 2;
    }
    const std::string& v = argv[++i];
    if (a == "--device") o.device = v;
    else if (a == "--module") o.module = v;
    else if (a == "--kernel") o.kernel = v;
    else if (a == "--out") o.out = v;
    else if (a == "--grid" || a == "--block") {
      if (!parse_dim(v, a == "--grid" ? &o.grid : &o.block, &err)) return bad_value(a + ": " + err);
    } else if (a == "--shared") {
      uint64_t bytes = 0;
      auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), bytes);
      if (v.empty() || ec != std::errc() || end != v.data() + v.size() || bytes > 0xffffffffu)
        return bad_value("--shared: '" + v + "' is not a byte count");
      o.shared = uint32_t(bytes);
    } else if (a == "--arg") {
      Arg arg;
      if (std::string e = parse_arg(v, &arg); !e.empty()) return bad_value(e);
      if (arg.kind != "buf")
        if (std::string e = encode_scalar(&arg); !e.empty()) return bad_value("--arg '" + v + "': " + e);
      for (const Arg& seen : o.args)
        if (arg.kind == "buf" && seen.kind == "buf" && seen.name == arg.name)
          return bad_value("--arg buf:" + arg.name + " is given twice (each buffer is written back to NAME.npy)");
      o.args.push_back(std::move(arg));
    } else {
      fmt::print(stderr, "halcyon launch: unknown option '{}'\n{}", a, kUsage);
      return 2;
    }
  }
  for (auto [name, val] : {std::pair{"--device", &o.device}, {"--module", &o.module}, {"--kernel", &o.kernel}, {"--out", &o.out}})
    if (val->empty()) {
      fmt::print(stderr, "halcyon launch: {} is required\n{}", name, kUsage);
      return 2;
    }

  auto data = read_file(o.module, &err);
  if (!data) return fail(err);
  hal_module_format format = HAL_MODULE_FORMAT_INVALID;
  if (ends_with(o.module, ".ptx")) {
    format = HAL_MODULE_PTX;
    data->push_back('\0');
  } else if (ends_with(o.module, ".hsaco") || ends_with(o.module, ".co") || ends_with(o.module, ".o")) {
    format = HAL_MODULE_HSACO;
  } else {
    return fail("cannot tell the format of " + o.module + " (expected .ptx, .hsaco, .co or .o)");
  }
  std::string target = module_target(*data, format, &err);
  if (target.empty()) return fail(o.module + ": " + err);

  auto dev = halcyon::Device::open(o.device.c_str());
  if (!dev) return fail(dev.error().to_string());
  auto mod = dev->load_module(format, target.c_str(), data->data(), data->size(), o.module.c_str());
  if (!mod) return fail(mod.error().to_string());
  auto kern = mod->kernel(o.kernel.c_str());
  if (!kern) return fail(kern.error().to_string());
  auto info = kern->info();
  auto params = kern->args();
  if (!info || !params) return fail("cannot read the kernel's argument layout");

  // The arguments given must match the kernel's metadata one by one.
  if (params->size() != o.args.size())
    return fail(fmt::format("kernel '{}' takes {} arguments, {} were given with --arg", o.kernel, params->size(), o.args.size()));
  std::vector<unsigned char> blob(info->args_size, 0);
  std::vector<halcyon::Buffer> buffers(o.args.size());  // released before the device
  for (size_t i = 0; i < o.args.size(); ++i) {
    Arg& a = o.args[i];
    const hal_kernel_arg& p = (*params)[i];
    std::string want = p.kind == HAL_ARG_POINTER ? "a buffer" : fmt::format("a {}-byte value", p.size);
    if (a.kind == "buf") {
      if (p.kind != HAL_ARG_POINTER || p.size != 8)
        return fail(fmt::format("argument {} of '{}' is {}, but buf:{} gives a buffer", i, o.kernel, want, a.name));
      auto arr = halcyon::rt::read_npy(a.value);
      if (!arr) return fail(arr.error().message());
      a.array = std::move(arr).value();
      auto b = dev->allocate(std::max<uint64_t>(1, a.array.data.size()));
      if (!b) return fail(b.error().to_string());
      buffers[i] = std::move(*b);
      uint64_t addr = buffers[i].address();
      std::memcpy(blob.data() + p.offset, &addr, 8);
    } else {
      if (p.kind != HAL_ARG_VALUE || p.size != a.bytes.size())
        return fail(fmt::format("argument {} of '{}' is {}, but {}:{} gives a {}-byte value", i, o.kernel, want, a.kind,
                                a.value, a.bytes.size()));
      std::memcpy(blob.data() + p.offset, a.bytes.data(), a.bytes.size());
    }
  }

  auto stream = dev->create_stream();
  if (!stream) return fail(stream.error().to_string());
  for (size_t i = 0; i < o.args.size(); ++i)
    if (o.args[i].kind == "buf" && !o.args[i].array.data.empty())
      if (auto s = stream->write(buffers[i], 0, o.args[i].array.data.data(), o.args[i].array.data.size()); !s)
        return fail(s.error().to_string());
  auto start = dev->create_event(), end = dev->create_event();
  if (start) (void)stream->record(*start);
  if (auto s = stream->launch(*kern, o.grid, o.block, blob.data(), blob.size(), o.shared); !s)
    return fail(s.error().to_string());
  if (end) (void)stream->record(*end);
  if (auto s = stream->synchronize(); !s) return fail(s.error().to_string());

  if (mkdir(o.out.c_str(), 0777) != 0 && errno != EEXIST) return fail("cannot create " + o.out + ": " + std::strerror(errno));
  std::vector<std::string> written;
  for (size_t i = 0; i < o.args.size(); ++i) {
    Arg& a = o.args[i];
    if (a.kind != "buf") continue;
    if (!a.array.data.empty())
      if (auto s = stream->read(buffers[i], 0, a.array.data.data(), a.array.data.size()); !s) return fail(s.error().to_string());
    if (auto s = stream->synchronize(); !s) return fail(s.error().to_string());
    std::string path = o.out + "/" + a.name + ".npy";
    if (auto w = halcyon::rt::write_npy(path, a.array.descr, a.array.shape, a.array.data.data(), a.array.data.size()); !w)
      return fail(w.error().message());
    written.push_back(path);
  }
  float ms = 0;
  bool timed = false;
  if (start && end)
    if (auto e = end->elapsed_since(*start); e.ok()) {
      ms = e.value();
      timed = true;
    }
  fmt::print("launched {} on {}: grid ({},{},{}) block ({},{},{}){}\n", o.kernel, o.device, o.grid.x, o.grid.y, o.grid.z,
             o.block.x, o.block.y, o.block.z, timed ? fmt::format(", {:.3f} ms", ms) : "");
  for (auto& w : written) fmt::print("wrote {}\n", w);
  return 0;
}

halcyon::cli::Register reg({"launch", "run one kernel of a PTX file or HSA code object on .npy inputs", run});

}  // namespace
