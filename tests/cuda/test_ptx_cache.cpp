// The PTX JIT cache's keys, folder choice and files: no GPU needed.
#include <doctest/doctest.h>

#include "ptx_cache.hpp"

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

using namespace halcyon::cuda;

namespace {

std::string temp_dir() {
  char tmpl[] = "/tmp/halcyon_ptx_cache_XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  return tmpl;
}

std::vector<std::string> list(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') out.push_back(e->d_name);
    closedir(d);
  }
  return out;
}

std::vector<char> bytes(size_t n, char seed) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = char(seed + char(i * 7));
  return v;
}

}  // namespace

TEST_CASE("ptx cache: the key changes with the PTX, the architecture, the driver and the options") {
  auto k = make_cache_key(".target sm_80\n", "sm_90a", 13000, "o");
  CHECK(k == make_cache_key(".target sm_80\n", "sm_90a", 13000, "o"));
  CHECK_FALSE(k == make_cache_key(".target sm_80 \n", "sm_90a", 13000, "o"));
  CHECK_FALSE(k == make_cache_key(".target sm_80\n", "sm_80", 13000, "o"));
  CHECK_FALSE(k == make_cache_key(".target sm_80\n", "sm_90a", 12080, "o"));
  CHECK_FALSE(k == make_cache_key(".target sm_80\n", "sm_90a", 13000, "p"));
  std::string name = cache_file_name(k);
  CHECK(name.size() == 32 + std::string("-sm_90a-drv13000.cubin").size());
  CHECK(name.ends_with("-sm_90a-drv13000.cubin"));
  CHECK(cache_file_name(make_cache_key("x", "sm_90a", 13000, "o")) != name);
}

TEST_CASE("cuda options: cuda.cache_dir is a folder or off, cuda.library a file name") {
  std::string dir = "unchanged";
  CHECK(cuda_options(nullptr, nullptr, &dir).empty());
  CHECK(dir.empty());  // not given: no persistent cache (the library reads no environment)
  CHECK(cuda_options(nullptr, "/hc/ptx", &dir).empty());
  CHECK(dir == "/hc/ptx");
  CHECK(cuda_options("/opt/libcuda.so.1", "off", &dir).empty());
  CHECK(dir.empty());
  std::string why = cuda_options(nullptr, "", &dir);
  CHECK(why.find("cuda.cache_dir is empty") != std::string::npos);
  why = cuda_options("", "/x", &dir);
  CHECK(why.find("cuda.library is empty") != std::string::npos);
}

TEST_CASE("ptx cache: store then load returns the same cubin; other keys miss") {
  std::string dir = temp_dir() + "/nested/ptx";  // created on first store
  PtxCache cache(dir);
  auto key = make_cache_key("ptx text", "sm_90a", 13000, "o");
  std::vector<char> got;
  CHECK_FALSE(cache.load(key, &got));
  auto cubin = bytes(5000, 3);
  std::string why;
  REQUIRE_MESSAGE(cache.store(key, cubin.data(), cubin.size(), &why), why);
  REQUIRE(cache.load(key, &got));
  CHECK(got == cubin);
  CHECK_FALSE(cache.load(make_cache_key("ptx text", "sm_80", 13000, "o"), &got));
  CHECK_FALSE(cache.load(make_cache_key("ptx text", "sm_90a", 13010, "o"), &got));
  CHECK(list(dir).size() == 1);  // no temporary files left behind
}

TEST_CASE("ptx cache: damaged or foreign files are ignored and replaced") {
  std::string dir = temp_dir();
  PtxCache cache(dir);
  auto key = make_cache_key("ptx", "sm_90a", 13000, "o");
  auto cubin = bytes(4096, 1);
  std::string why;
  REQUIRE(cache.store(key, cubin.data(), cubin.size(), &why));
  std::string path = cache.path(key);
  std::vector<char> got;
  {  // cut short
    std::ifstream in(path, std::ios::binary);
    std::vector<char> all((std::istreambuf_iterator<char>(in)), {});
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(all.data(), std::streamsize(all.size() - 100));
  }
  CHECK_FALSE(cache.load(key, &got));
  CHECK(got.empty());
  REQUIRE(cache.store(key, cubin.data(), cubin.size(), &why));
  {  // one flipped byte in the cubin
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(-10, std::ios::end);
    f.put('\x7f');
  }
  CHECK_FALSE(cache.load(key, &got));
  // Same file name, written for another key (a name collision): its header says so.
  auto other = make_cache_key("other ptx", "sm_90a", 13000, "o");
  REQUIRE(cache.store(other, cubin.data(), cubin.size(), &why));
  std::rename(cache.path(other).c_str(), path.c_str());
  CHECK_FALSE(cache.load(key, &got));
  REQUIRE(cache.store(key, cubin.data(), cubin.size(), &why));
  CHECK(cache.load(key, &got));
}

TEST_CASE("ptx cache: processes writing one entry at once leave one whole file") {
  std::string dir = temp_dir();
  auto key = make_cache_key("shared ptx", "sm_90a", 13000, "o");
  auto cubin = bytes(1 << 20, 5);
  std::vector<pid_t> kids;
  for (int p = 0; p < 6; ++p) {
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      PtxCache cache(dir);
      std::string why;
      bool ok = true;
      std::vector<char> got;
      for (int i = 0; i < 20; ++i) {
        ok = ok && cache.store(key, cubin.data(), cubin.size(), &why);
        // A reader in the middle of the writers sees a miss or the whole cubin.
        if (cache.load(key, &got) && got != cubin) ok = false;
      }
      _exit(ok ? 0 : 1);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
  PtxCache cache(dir);
  std::vector<char> got;
  REQUIRE(cache.load(key, &got));
  CHECK(got == cubin);
  CHECK(list(dir).size() == 1);
}

TEST_CASE("ptx cache: an unwritable folder is an error value, not a crash") {
  PtxCache cache("/proc/halcyon-cannot-exist/ptx");
  auto key = make_cache_key("ptx", "sm_90a", 13000, "o");
  std::string why;
  char b = 1;
  CHECK_FALSE(cache.store(key, &b, 1, &why));
  CHECK(why.find("cannot create") != std::string::npos);
  CHECK_FALSE(PtxCache("").enabled());
}
