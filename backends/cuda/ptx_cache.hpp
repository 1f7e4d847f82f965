// The persistent PTX JIT cache: cubins the driver compiled from PTX, one file per
// (PTX text, device architecture, driver version). Files are written to a temporary name and
// renamed into place, so processes sharing the folder see either no file or a whole one; a
// file that fails its checks is ignored and replaced. Temporary files of writers that were
// killed are removed when a cache is opened. GPU-free: unit-tested anywhere.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace halcyon::cuda {

struct PtxCacheKey {
  uint64_t hash_a = 0;  // two independent 64-bit hashes of the PTX and the JIT settings
  uint64_t hash_b = 0;
  uint64_t ptx_size = 0;
  std::string arch;     // device architecture, "sm_90a"
  int driver_version = 0;
  bool operator==(const PtxCacheKey&) const = default;
};

// `options` names anything else that changes the JIT's output (flags, halcyon's version).
PtxCacheKey make_cache_key(std::string_view ptx, std::string_view arch, int driver_version,
                           std::string_view options);

// "0123456789abcdef0123456789abcdef-sm_90a-drv13000.cubin"
std::string cache_file_name(const PtxCacheKey& key);

// The key the cache file at `path` was written for, from its header (for tools and tests that
// look into a cache folder). False when the file cannot be read or is no cache file.
bool read_cache_key(const std::string& path, PtxCacheKey* key);

// Checks the backend options cuda.library (a file name, not empty, when given) and
// cuda.cache_dir ("off", or a folder; not given = off) and sets *cache_dir ("" = no cache).
// Returns "" when both are good, else what is wrong, naming the option and its value.
std::string cuda_options(const char* library, const char* cache_dir_option, std::string* cache_dir);

class PtxCache {
 public:
  // Opens the cache in `dir` ("" = no cache), removing stale temporary files there.
  explicit PtxCache(std::string dir);
  const std::string& dir() const { return dir_; }
  bool enabled() const { return !dir_.empty(); }
  std::string path(const PtxCacheKey& key) const { return dir_ + "/" + cache_file_name(key); }
  // True and fills *cubin when a valid entry exists; false for a miss or a damaged file.
  bool load(const PtxCacheKey& key, std::vector<char>* cubin) const;
  // Writes atomically (temp file + rename). False and *why on failure; the cache is optional,
  // so callers log and go on.
  bool store(const PtxCacheKey& key, const void* cubin, size_t size, std::string* why) const;
  // Drops the entry of `key` (one that passed load()'s checks but the driver refused to load),
  // so it is a miss until stored again. False when there was none or it could not be removed.
  bool remove(const PtxCacheKey& key) const;
  // Removes the temporary files ("<entry>.tmp.<pid>.<n>") that store() leaves when its process
  // is killed mid-write: those of a process that no longer exists once a minute old (the
  // minute spares a writer in another pid namespace, which looks dead from here), and any an
  // hour old (the pid may since have been reused). A live writer's file is seconds old at most.
  // Returns how many were removed; other files are never touched.
  size_t remove_stale_temp_files() const;

 private:
  std::string dir_;
};

}  // namespace halcyon::cuda
