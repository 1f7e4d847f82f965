// The PTX JIT cache's keys, folder choice and files: no GPU needed.
#include <doctest/doctest.h>

#include "ptx_cache.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <ctime>
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

// A file holding "x", last modified `age_s` seconds ago.
void touch(const std::string& path, time_t age_s) {
  std::ofstream(path) << "x";
  timeval tv[2] = {{std::time(nullptr) - age_s, 0}, {std::time(nullptr) - age_s, 0}};
  REQUIRE(utimes(path.c_str(), tv) == 0);
}

bool listed(const std::vector<std::string>& files, const std::string& name) {
  return std::find(files.begin(), files.end(), name) != files.end();
}

// A cache in a fresh folder holding one entry, of `size` bytes for `ptx`.
struct OneEntry {
  PtxCache cache{temp_dir()};
  PtxCacheKey key;
  std::vector<char> cubin;
  OneEntry(const char* ptx, size_t size) : key(make_cache_key(ptx, "sm_90a", 13000, "o")), cubin(bytes(size, 9)) {
    std::string why;
    REQUIRE_MESSAGE(cache.store(key, cubin.data(), cubin.size(), &why), why);
  }
};

// A pid that no process has: a child's, once it has exited and been waited for.
pid_t dead_pid() {
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) _exit(0);
  int status = 0;
  waitpid(pid, &status, 0);
  return pid;
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

TEST_CASE("ptx cache: an entry the driver refused is removed, and misses until stored again") {
  OneEntry e("ptx", 512);
  const PtxCache& cache = e.cache;
  const PtxCacheKey& key = e.key;
  CHECK(cache.remove(key));
  std::vector<char> got;
  CHECK_FALSE(cache.load(key, &got));
  CHECK_FALSE(cache.remove(key));  // nothing left to remove
  CHECK(list(cache.dir()).empty());
  std::string why;
  REQUIRE(cache.store(key, e.cubin.data(), e.cubin.size(), &why));
  CHECK(cache.load(key, &got));
  CHECK_FALSE(PtxCache("").remove(key));
}

// A writer killed between creating its temporary file and renaming it left the file for good.
TEST_CASE("ptx cache: opening it removes temporary files of writers that are gone, never a live one's") {
  OneEntry e("ptx", 256);
  const std::string dir = e.cache.dir();
  const PtxCacheKey& key = e.key;
  const std::string entry = cache_file_name(key);
  const std::string dead = std::to_string(dead_pid()), me = std::to_string(getpid());
  const std::string gone = entry + ".tmp." + dead + ".0";         // dead writer, 2 minutes old: removed
  const std::string just_died = entry + ".tmp." + dead + ".1";    // dead writer, fresh: kept a minute
  const std::string live = entry + ".tmp." + me + ".0";           // live writer, 2 minutes old: kept
  const std::string stale_live = entry + ".tmp." + me + ".1";     // live pid, 2 hours old: reused pid, removed
  const std::string other_user = entry + ".tmp.1.0";              // pid 1 exists (EPERM when not root): kept
  const std::string not_temp = "notes.tmp." + dead + ".0";        // not a name store() makes: kept
  const std::string no_count = entry + ".tmp." + dead;            // ditto
  touch(dir + "/" + gone, 120);
  touch(dir + "/" + just_died, 0);
  touch(dir + "/" + live, 120);
  touch(dir + "/" + stale_live, 7200);
  touch(dir + "/" + other_user, 120);
  touch(dir + "/" + not_temp, 7200);
  touch(dir + "/" + no_count, 7200);
  REQUIRE(mkdir((dir + "/" + entry + ".tmp." + dead + ".2").c_str(), 0755) == 0);  // not a file: kept
  REQUIRE(list(dir).size() == 9);

  PtxCache cache(dir);
  auto files = list(dir);
  CHECK_FALSE(listed(files, gone));
  CHECK_FALSE(listed(files, stale_live));
  for (const std::string& kept : {entry, just_died, live, other_user, not_temp, no_count, entry + ".tmp." + dead + ".2"})
    CHECK_MESSAGE(listed(files, kept), kept);
  CHECK(files.size() == 7);
  std::vector<char> got;
  CHECK(cache.load(key, &got));
  CHECK(cache.remove_stale_temp_files() == 0);
  touch(dir + "/" + just_died, 120);  // a minute on, the dead writer's file goes too
  CHECK(cache.remove_stale_temp_files() == 1);
  CHECK_FALSE(listed(list(dir), just_died));
  CHECK(PtxCache("").remove_stale_temp_files() == 0);
  CHECK(PtxCache(dir + "/not-made-yet").remove_stale_temp_files() == 0);
}

TEST_CASE("ptx cache: a file's key reads back from its header") {
  OneEntry e("some ptx", 64);
  PtxCacheKey back;
  REQUIRE(read_cache_key(e.cache.path(e.key), &back));
  CHECK(back == e.key);
  const PtxCache& cache = e.cache;
  std::ofstream(cache.dir() + "/other") << "not a cache file, though longer than a header would be: 0123456789";
  CHECK_FALSE(read_cache_key(cache.dir() + "/other", &back));
  CHECK_FALSE(read_cache_key(cache.dir() + "/missing", &back));
}
