// The registry: built-ins, plugin files accepted or refused with reasons, device URIs.
#include "test_support.hpp"

#include <cstdio>
#include <fstream>

using test::expect_error;
using test::expect_ok;
using test::unwrap;

namespace {
hal_backend_record find_record(const std::string& source) {
  auto recs = unwrap(halcyon::backend_records());
  for (auto& r : recs)
    if (source == r.source) return r;
  FAIL("no record for ", source);
  return {};
}
std::string plugin(const char* name) { return std::string(HALCYON_TEST_PLUGIN_DIR) + "/" + name; }
}  // namespace

TEST_CASE("registry: the built-in cpu backend is listed and offers cpu:0") {
  auto recs = unwrap(halcyon::backend_records());
  bool cpu = false;
  for (auto& r : recs)
    if (std::string(r.name) == "cpu" && r.state == HAL_BACKEND_AVAILABLE) {
      cpu = true;
      CHECK(std::string(r.source) == "built-in");
      CHECK(r.device_count == 1);
      CHECK(r.abi_major == HAL_ABI_MAJOR);
    }
  CHECK(cpu);
  auto uris = unwrap(halcyon::device_uris());
  REQUIRE(!uris.empty());
  CHECK(uris[0] == "cpu:0");
  char small[3];
  expect_error(hal_device_uri(0, small, sizeof small), HAL_OUT_OF_RANGE, "needs 6 bytes");
  char uri[64];
  expect_error(hal_device_uri(1000, uri, sizeof uri), HAL_OUT_OF_RANGE);
}

TEST_CASE("registry: device URIs") {
  hal_device d = nullptr;
  expect_ok(hal_device_open("cpu", &d));
  hal_device_info info{};
  info.struct_size = sizeof info;
  expect_ok(hal_device_get_info(d, &info));
  CHECK(std::string(info.uri) == "cpu:0");
  expect_ok(hal_device_release(d));
  expect_error(hal_device_open("cpu:1", &d), HAL_NOT_FOUND, "has 1 device");
  expect_error(hal_device_open("cpu:zero", &d), HAL_INVALID_ARGUMENT, "'zero' is not a device index");
  expect_error(hal_device_open("quantum:0", &d), HAL_NOT_FOUND, "no backend named 'quantum'");
  expect_error(hal_device_open("", &d), HAL_INVALID_ARGUMENT, "empty");
  expect_error(hal_device_open(nullptr, &d), HAL_INVALID_ARGUMENT);
  expect_error(hal_device_open("cpu", nullptr), HAL_INVALID_ARGUMENT, "out is NULL");
}

TEST_CASE("registry: plugin files are accepted or refused with the reason") {
  hal_backend_record r{};
  r.struct_size = sizeof r;

  expect_error(hal_registry_load_plugin(plugin("libbad_noentry.so").c_str(), &r), HAL_NOT_FOUND, "not a halcyon backend plugin");
  CHECK(r.state == HAL_BACKEND_REFUSED);

  expect_error(hal_registry_load_plugin(plugin("libbad_future.so").c_str(), &r), HAL_VERSION_MISMATCH,
               "built for halcyon ABI 2.3, this libhalcyon is ABI 1." + std::to_string(HAL_ABI_MINOR));
  CHECK(r.state == HAL_BACKEND_REFUSED);
  CHECK(r.abi_major == HAL_ABI_MAJOR + 1);
  CHECK(std::string(r.reason).find("ABI 2.3") != std::string::npos);
  CHECK(std::string(r.source).find("libbad_future.so") != std::string::npos);

  expect_error(hal_registry_load_plugin(plugin("libbad_null.so").c_str(), &r), HAL_INVALID_ARGUMENT, "returned NULL");
  expect_error(hal_registry_load_plugin(plugin("libbad_holey.so").c_str(), &r), HAL_INVALID_ARGUMENT, "required entry 'device_open' of the function table is NULL");
  expect_error(hal_registry_load_plugin(plugin("libbad_tiny.so").c_str(), &r), HAL_VERSION_MISMATCH, "smaller than ABI 1.0");
  expect_error(hal_registry_load_plugin(plugin("libdoes_not_exist.so").c_str(), &r), HAL_NOT_FOUND, "no such file");
  std::string text_file = std::string(HALCYON_TEST_PLUGIN_DIR) + "/not_elf.so";
  std::ofstream(text_file) << "this is not a shared object\n";
  expect_error(hal_registry_load_plugin(text_file.c_str(), &r), HAL_INVALID_ARGUMENT, "not an ELF file");
  // ELF headers that are not a loadable shared object of this machine, refused before dlopen
  // (hal/src/plugin_checks.cpp; tests/fuzz/fuzz_plugin_checks feeds it anything).
  auto elf_file = [&](const char* name, std::initializer_list<std::pair<size_t, unsigned char>> bytes, size_t size) {
    std::string path = std::string(HALCYON_TEST_PLUGIN_DIR) + "/" + name;
    std::string data(128, '\0');  // a header and a program header; cut to `size` below
    const unsigned char ident[] = {0x7f, 'E', 'L', 'F', 2, 1, 1};  // 64-bit, little-endian
    for (size_t i = 0; i < sizeof ident; ++i) data[i] = char(ident[i]);
    data[16] = 3;                 // e_type ET_DYN
    data[18] = 62;                // e_machine x86-64
    data[54] = 56;                // e_phentsize
    data[56] = 1;                 // e_phnum
    data[32] = 64;                // e_phoff
    for (auto [at, v] : bytes) data[at] = char(v);
    data.resize(size);
    std::ofstream(path, std::ios::binary) << data;
    return path;
  };
#if defined(__x86_64__)
  expect_error(hal_registry_load_plugin(elf_file("elf32.so", {{4, 1}}, 200).c_str(), &r), HAL_INVALID_ARGUMENT,
               "a 32-bit ELF file");
  expect_error(hal_registry_load_plugin(elf_file("arm.so", {{18, 183}}, 200).c_str(), &r), HAL_INVALID_ARGUMENT,
               "built for aarch64, this process is x86-64");
  expect_error(hal_registry_load_plugin(elf_file("exec.so", {{16, 2}}, 200).c_str(), &r), HAL_INVALID_ARGUMENT,
               "an ELF executable rather than a shared object");
  expect_error(hal_registry_load_plugin(elf_file("short.so", {}, 100).c_str(), &r), HAL_INVALID_ARGUMENT,
               "program headers (56 bytes at offset 64) lie past the end of the 100-byte file");
  expect_error(hal_registry_load_plugin(elf_file("tiny.so", {}, 20).c_str(), &r), HAL_INVALID_ARGUMENT,
               "a truncated ELF file (20 bytes");
#endif
  expect_error(hal_registry_load_plugin(nullptr, &r), HAL_INVALID_ARGUMENT);

  // A loaded plugin whose probe says no: not an error, but the backend is unavailable.
  expect_ok(hal_registry_load_plugin(plugin("libbad_unavailable.so").c_str(), &r));
  CHECK(r.state == HAL_BACKEND_UNAVAILABLE);
  CHECK(std::string(r.name) == "widget");
  CHECK(std::string(r.reason) == "widget: libwidget.so.3 not found");
  hal_device d = nullptr;
  expect_error(hal_device_open("widget:0", &d), HAL_UNAVAILABLE, "libwidget.so.3 not found");

  // The same cpu backend as a plugin file is refused: the built-in one is already there.
  expect_error(hal_registry_load_plugin(HALCYON_CPU_PLUGIN, &r), HAL_FAILED_PRECONDITION, "already loaded from built-in");

  // Every attempt is in the log that `halcyon info -v` prints.
  CHECK(find_record(plugin("libbad_future.so")).state == HAL_BACKEND_REFUSED);
  CHECK(find_record(plugin("libbad_unavailable.so")).state == HAL_BACKEND_UNAVAILABLE);
  // The cpu backend was not disturbed by any of it.
  auto dev = unwrap(halcyon::Device::open("cpu"));
  CHECK(unwrap(dev.info()).compute_units > 0);
}

TEST_CASE("registry: a plugin built for ABI 1.0 loads; entries appended since count as NULL") {
  hal_backend_record r{};
  r.struct_size = sizeof r;
  expect_ok(hal_registry_load_plugin(plugin("libbad_abi10.so").c_str(), &r));
  CHECK(r.state == HAL_BACKEND_AVAILABLE);
  CHECK(std::string(r.name) == "abi10");
  CHECK(r.abi_minor == 0);
  CHECK(r.device_count == 1);
  auto old = unwrap(halcyon::Device::open("abi10:0"));
  auto buf = unwrap(old.allocate(4096));
  // Its table stops at partition_destroy; the tensor_map_encode slot behind it (which the
  // plugin fills with a function that fails loudly) must not be read.
  auto d = halcyon::tensor_map_desc(buf.get(), HAL_TENSOR_MAP_U8, {4096}, {64});
  unsigned char map[HAL_TENSOR_MAP_BYTES];
  expect_error(hal_device_encode_tensor_map(old.get(), &d, map, sizeof map), HAL_UNSUPPORTED,
               "abi10:0 (backend abi10) does not encode tensor maps");
  CHECK_FALSE(old.has("tensor_map"));
  // hal_buffer_import (ABI 1.4) without the backend's entry: unsupported, said so.
  hal_buffer_import_desc id{};
  id.struct_size = HAL_BUFFER_IMPORT_DESC_SIZE;
  id.kind = HAL_MEMORY_DEVICE;
  hal_buffer imported = nullptr;
  expect_error(hal_buffer_import(old.get(), &id, &imported), HAL_UNSUPPORTED, "the abi10 backend cannot import");
  // A stream's native handle (ABI 1.11) without the backend's entry: none (has_native 0).
  auto stream = unwrap(old.create_stream());
  CHECK(unwrap(stream.info()).has_native == 0);
  // hal_device_can_run (ABI 1.3) without the backend's entry: exactly the device's arch.
  std::string why;
  CHECK(unwrap(old.can_run(HAL_MODULE_HOST, "none")));
  CHECK_FALSE(unwrap(old.can_run(HAL_MODULE_HOST, "host", &why)));
  CHECK(why.find("runs only code built for exactly its arch") != std::string::npos);
  CHECK_FALSE(unwrap(old.can_run(HAL_MODULE_PTX, "none", &why)));
  CHECK(why == "abi10:0 (none) does not load ptx modules");
  // A buffer of one device does not make a tensor map on another.
  auto cpu = unwrap(halcyon::Device::open("cpu:0"));
  expect_error(hal_device_encode_tensor_map(cpu.get(), &d, map, sizeof map), HAL_INVALID_ARGUMENT,
               "desc->buffer belongs to abi10:0, not cpu:0");
}

TEST_CASE("registry: an older, smaller hal_backend_record is filled only as far as it goes") {
  struct {
    hal_backend_record rec;
    unsigned char canary[8];
  } old{};
  std::memset(&old, 0x77, sizeof old);
  old.rec.struct_size = HAL_BACKEND_RECORD_MIN_SIZE;
  old.rec.next = nullptr;
  expect_ok(hal_registry_record(0, &old.rec));
  CHECK(std::string(old.rec.name) == "cpu");
  CHECK(old.rec.abi_major == 0x77777777u);  // past the old struct's end: untouched
  for (unsigned char c : old.canary) CHECK(c == 0x77);
}
