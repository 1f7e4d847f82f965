#include "ptx_cache.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

namespace halcyon::cuda {
namespace {

constexpr char kMagic[8] = {'H', 'L', 'C', 'Y', 'P', 'T', 'X', '1'};

// On-disk header; the cubin follows. Everything needed to reject a file written for another
// key (a hash collision on the name) or cut short.
struct FileHeader {
  char magic[8];
  uint32_t header_size;
  int32_t driver_version;
  uint64_t hash_a, hash_b, ptx_size;
  uint64_t cubin_size, cubin_hash;
  char arch[16];
};

uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

uint64_t mix64(uint64_t x) {  // splitmix64 finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A second hash unrelated to FNV: 8-byte words folded through splitmix.
uint64_t word_hash(const void* data, size_t n) {
  auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = mix64(h ^ w) + 0x9e3779b97f4a7c15ull;
  }
  uint64_t tail = 0;
  if (n > i) std::memcpy(&tail, p + i, n - i);
  return mix64(h ^ tail ^ (uint64_t(n - i) << 56));
}

bool mkdirs(const std::string& dir) {
  for (size_t p = 1; p <= dir.size(); ++p) {
    if (p == dir.size() || dir[p] == '/') {
      std::string part = dir.substr(0, p);
      if (mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) return false;
    }
  }
  return true;
}

bool write_all(int fd, const void* data, size_t n) {
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= size_t(w);
  }
  return true;
}

constexpr char kTempTag[] = ".cubin.tmp.";
constexpr time_t kDeadWriterGrace = 60;  // seconds a dead writer's file is kept
constexpr time_t kStaleTemp = 3600;      // seconds after which any writer's file is removed

// The pid in a temporary file's name, "<hashes>-<arch>-drv<N>.cubin.tmp.<pid>.<n>", or 0 when
// the name is not one store() makes.
pid_t temp_file_pid(const char* name) {
  const char* tag = std::strstr(name, kTempTag);
  if (!tag || tag == name) return 0;
  const char* p = tag + sizeof kTempTag - 1;
  const char* pid_end = p;
  while (std::isdigit(static_cast<unsigned char>(*pid_end))) ++pid_end;
  if (pid_end == p || pid_end - p > 9 || *pid_end != '.') return 0;
  const char* n = pid_end + 1;
  if (!*n) return 0;
  for (; *n; ++n)
    if (!std::isdigit(static_cast<unsigned char>(*n))) return 0;
  return pid_t(std::strtol(p, nullptr, 10));
}

// Whether a temporary file written by `pid`, last modified at `mtime`, is left over.
bool stale_temp(pid_t pid, time_t mtime, time_t now) {
  const time_t age = now - mtime;
  if (age >= kStaleTemp) return true;
  // kill(pid, 0): ESRCH = no such process; EPERM means it exists under another user.
  return age >= kDeadWriterGrace && ::kill(pid, 0) != 0 && errno == ESRCH;
}

}  // namespace

PtxCache::PtxCache(std::string dir) : dir_(std::move(dir)) {
  if (enabled()) remove_stale_temp_files();
}

PtxCacheKey make_cache_key(std::string_view ptx, std::string_view arch, int driver_version,
                           std::string_view options) {
  PtxCacheKey k;
  k.hash_a = fnv1a(options.data(), options.size(), fnv1a(ptx.data(), ptx.size()));
  k.hash_b = mix64(word_hash(ptx.data(), ptx.size()) ^ word_hash(options.data(), options.size()));
  k.ptx_size = ptx.size();
  k.arch = std::string(arch);
  k.driver_version = driver_version;
  return k;
}

std::string cache_file_name(const PtxCacheKey& key) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%016llx%016llx-", static_cast<unsigned long long>(key.hash_a),
                static_cast<unsigned long long>(key.hash_b));
  std::string arch;
  for (char c : key.arch) arch += std::isalnum(static_cast<unsigned char>(c)) || c == '_' ? c : '_';
  return buf + arch + "-drv" + std::to_string(key.driver_version) + ".cubin";
}

std::string cuda_options(const char* library, const char* cache_dir_option, std::string* cache_dir) {
  cache_dir->clear();
  if (library && !*library) return "option cuda.library is empty: name the driver library file, e.g. libcuda.so.1";
  if (!cache_dir_option || std::string_view(cache_dir_option) == "off") return {};
  if (!*cache_dir_option) return "option cuda.cache_dir is empty: give a folder, or off for no PTX cache";
  *cache_dir = cache_dir_option;
  return {};
}

bool read_cache_key(const std::string& path, PtxCacheKey* key) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  FileHeader h{};
  const bool ok = std::fread(&h, sizeof h, 1, f) == 1 && std::memcmp(h.magic, kMagic, 8) == 0 &&
                  h.header_size == sizeof h;
  std::fclose(f);
  if (!ok) return false;
  key->hash_a = h.hash_a;
  key->hash_b = h.hash_b;
  key->ptx_size = h.ptx_size;
  key->arch.assign(h.arch, strnlen(h.arch, sizeof h.arch));
  key->driver_version = h.driver_version;
  return true;
}

bool PtxCache::load(const PtxCacheKey& key, std::vector<char>* cubin) const {
  if (!enabled()) return false;
  std::FILE* f = std::fopen(path(key).c_str(), "rb");
  if (!f) return false;
  FileHeader h{};
  bool ok = std::fread(&h, sizeof h, 1, f) == 1 && std::memcmp(h.magic, kMagic, 8) == 0 &&
            h.header_size == sizeof h && h.driver_version == key.driver_version &&
            h.hash_a == key.hash_a && h.hash_b == key.hash_b && h.ptx_size == key.ptx_size &&
            std::string(h.arch, strnlen(h.arch, sizeof h.arch)) == key.arch &&
            h.cubin_size > 0 && h.cubin_size < (1ull << 32);
  if (ok) {
    cubin->resize(h.cubin_size);
    ok = std::fread(cubin->data(), 1, cubin->size(), f) == cubin->size() &&
         std::fgetc(f) == EOF && fnv1a(cubin->data(), cubin->size()) == h.cubin_hash;
  }
  std::fclose(f);
  if (!ok) cubin->clear();
  return ok;
}

bool PtxCache::store(const PtxCacheKey& key, const void* cubin, size_t size, std::string* why) const {
  if (!enabled()) {
    *why = "the cache is disabled";
    return false;
  }
  if (key.arch.size() >= sizeof(FileHeader::arch)) {
    *why = "architecture name '" + key.arch + "' is too long";
    return false;
  }
  if (!mkdirs(dir_)) {
    *why = "cannot create " + dir_ + ": " + std::strerror(errno);
    return false;
  }
  FileHeader h{};
  std::memcpy(h.magic, kMagic, 8);
  h.header_size = sizeof h;
  h.driver_version = key.driver_version;
  h.hash_a = key.hash_a;
  h.hash_b = key.hash_b;
  h.ptx_size = key.ptx_size;
  h.cubin_size = size;
  h.cubin_hash = fnv1a(cubin, size);
  std::memcpy(h.arch, key.arch.data(), key.arch.size());
  // A name no other process or thread uses: pid plus a per-process counter.
  static std::atomic<uint64_t> counter{0};
  std::string final_path = path(key);
  std::string tmp = final_path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(counter++);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    *why = "cannot create " + tmp + ": " + std::strerror(errno);
    return false;
  }
  bool ok = write_all(fd, &h, sizeof h) && write_all(fd, cubin, size);
  int saved = errno;
  ok = (::close(fd) == 0) && ok;
  if (ok && std::rename(tmp.c_str(), final_path.c_str()) != 0) {
    saved = errno;
    ok = false;
  }
  if (!ok) {
    *why = "cannot write " + final_path + ": " + std::strerror(saved);
    ::unlink(tmp.c_str());
  }
  return ok;
}

bool PtxCache::remove(const PtxCacheKey& key) const {
  return enabled() && ::unlink(path(key).c_str()) == 0;
}

size_t PtxCache::remove_stale_temp_files() const {
  if (!enabled()) return 0;
  DIR* d = ::opendir(dir_.c_str());
  if (!d) return 0;  // no folder yet: nothing left over
  const time_t now = std::time(nullptr);
  size_t removed = 0;
  while (dirent* e = ::readdir(d)) {
    const pid_t pid = temp_file_pid(e->d_name);
    if (pid <= 0) continue;
    const std::string file = dir_ + "/" + e->d_name;
    struct stat st{};
    if (::lstat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    // Another process may remove it first: ENOENT is no failure, just not ours to count.
    if (stale_temp(pid, st.st_mtime, now) && ::unlink(file.c_str()) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}

}  // namespace halcyon::cuda
