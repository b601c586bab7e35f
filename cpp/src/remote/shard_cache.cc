#include "chute/remote/shard_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL  // libxxhash-dev's header, compiled in: no run-time library to ship with the wheel
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <system_error>
#include <utility>

#include "base/detail/file_lock.h"
#include "chute/base/direct_file.h"
#include "chute/base/environment.h"

namespace chute {
namespace {

using detail::FileLock;

constexpr size_t kTailChars = 48;  // of the key, in the entry's name
constexpr const char* kCacheLock = ".cache.lock";
constexpr const char* kLimitFile = ".limit";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The entry name of a file in the cache directory (everything before its first '.'), or "" for files
// that are not the cache's (hidden ones, the cache-wide lock).
std::string name_of(const std::string& file) {
  const size_t dot = file.find('.');
  return dot == 0 || dot == std::string::npos ? std::string() : file.substr(0, dot);
}

int64_t mtime_ns(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

// The file names in `dir` (no "." and ".."); empty when it cannot be read.
std::vector<std::string> dir_files(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  ::closedir(d);
  return out;
}

// A unique suffix for temp files: pid and 64 random bits.
std::string temp_suffix() {
  thread_local std::mt19937_64 rng(std::random_device{}() ^ (static_cast<uint64_t>(::getpid()) << 32) ^
                                   reinterpret_cast<uintptr_t>(&rng));
  char buf[64];
  std::snprintf(buf, sizeof(buf), ".%d-%016" PRIx64 ".tmp", static_cast<int>(::getpid()), rng());
  return buf;
}

// Writes `data` to a new file `path` (O_EXCL).
Status write_new_file(const std::string& path, const std::string& data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return errno_status(errno, "cannot create " + path);
  for (size_t done = 0; done < data.size();) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const Status st = errno_status(n < 0 ? errno : EIO, "cannot write " + path);
      ::close(fd);
      ::unlink(path.c_str());
      return st;
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) {
    const Status st = errno_status(errno, "cannot write " + path);
    ::unlink(path.c_str());
    return st;
  }
  return Status::ok();
}

std::string read_small_file(const std::string& path) {
  std::string out;
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
    std::fclose(f);
  }
  return out;
}

// Marks an entry used now (its mtime is its last-used time). A failure (the entry was just evicted, or
// belongs to another user) only costs LRU precision.
void touch(const std::string& path) {
  const struct timespec times[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
  ::utimensat(AT_FDCWD, path.c_str(), times, 0);
}

// Unlinks `path`; ok when it was already gone.
Status remove_file(const std::string& path) {
  if (::unlink(path.c_str()) == 0 || errno == ENOENT) return Status::ok();
  return errno_status(errno, "cannot remove " + path);
}

// Removes a temp file unless released (the fill failed or threw).
class TempFile {
 public:
  explicit TempFile(std::string path) : path_(std::move(path)) {}
  ~TempFile() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }
  void release() { path_.clear(); }

 private:
  std::string path_;
};

constexpr char kTrailerMagic[8] = {'c', 'h', 'u', 't', 'e', '-', 'x', '3'};
constexpr size_t kTrailer = 16;  // the magic and the XXH3-64 of the bytes, little-endian

std::array<uint8_t, kTrailer> trailer_of(std::span<const uint8_t> bytes) {
  std::array<uint8_t, kTrailer> t{};
  std::memcpy(t.data(), kTrailerMagic, sizeof kTrailerMagic);
  const uint64_t sum = XXH3_64bits(bytes.data(), bytes.size());
  for (int i = 0; i < 8; ++i) t[8 + i] = static_cast<uint8_t>(sum >> (8 * i));
  return t;
}

}  // namespace

struct ShardCache::Names {
  std::string name;   // "<tail>-<xxh3 hex>"
  std::string base;   // dir + "/" + name
  std::string entry;  // base + ".shard"
  std::string key;    // base + ".key"
  std::string lock;   // base + ".lock"
};

ShardCache::Names ShardCache::names_for(const std::string& dir, const std::string& key) {
  const size_t from = key.size() > kTailChars ? key.size() - kTailChars : 0;
  std::string tail;
  for (size_t i = from; i < key.size(); ++i) {
    const char c = key[i];
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
    tail += plain ? c : '_';
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016" PRIx64, static_cast<uint64_t>(XXH3_64bits(key.data(), key.size())));
  ShardCache::Names n;
  n.name = tail.empty() ? std::string(hex) : tail + "-" + hex;
  n.base = dir + "/" + n.name;
  n.entry = n.base + ".shard";
  n.key = n.base + ".key";
  n.lock = n.base + ".lock";
  return n;
}

Result<std::shared_ptr<ShardCache>> ShardCache::open(CacheOptions options) {
  if (options.dir.empty()) return invalid_argument("ShardCache: the cache directory is empty");
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  if (ec) return io_error("cannot create the cache directory " + options.dir + ": " + ec.message());
  if (::access(options.dir.c_str(), W_OK | X_OK) != 0)
    return io_error("the cache directory " + options.dir + " is not writable: " + std::strerror(errno));
  {  // creating a file proves it writable, for root too
    CHUTE_ASSIGN_OR_RETURN(FileLock lock, FileLock::acquire(options.dir + "/" + kCacheLock, /*wait=*/true));
    for (const std::string& f : dir_files(options.dir))  // written under this lock: a leftover's writer died
      if (f.starts_with(std::string(kLimitFile) + ".") && ends_with(f, ".tmp"))
        ::unlink((options.dir + "/" + f).c_str());
    if (options.limit_bytes > 0) {
      const std::string tmp = options.dir + "/" + kLimitFile + temp_suffix();
      Status st = write_new_file(tmp, std::to_string(options.limit_bytes) + "\n");
      if (st.is_ok() && ::rename(tmp.c_str(), (options.dir + "/" + kLimitFile).c_str()) != 0) {
        st = errno_status(errno, "cannot write " + options.dir + "/" + kLimitFile);
        ::unlink(tmp.c_str());
      }
      if (!st.is_ok())
        return Status(st.code(), "the cache directory " + options.dir + " is not writable: " + st.message());
    }
  }
  std::shared_ptr<ShardCache> cache(new ShardCache(std::move(options)));
  cache->sweep_stale_temps();
  return cache;
}

uint64_t ShardCache::recorded_limit(const std::string& dir) {
  const std::string text = read_small_file(dir + "/" + kLimitFile);
  return std::strtoull(text.c_str(), nullptr, 10);
}

std::string ShardCache::entry_path(const std::string& key) const { return names_for(options_.dir, key).entry; }

uint64_t ShardCache::entry_bytes(uint64_t size) { return size + kTrailer; }

Result<bool> ShardCache::load(const Names& n, std::span<uint8_t> dst) const {
  std::array<uint8_t, kTrailer> trailer;
  CHUTE_ASSIGN_OR_RETURN(bool found, read_file_direct(n.entry, dst, trailer));
  if (!found) return false;
  if (trailer != trailer_of(dst)) {
    if (std::memcmp(trailer.data(), kTrailerMagic, sizeof kTrailerMagic) != 0) return false;  // not an entry of ours
    return corrupt_data("the cache entry " + n.entry + " fails its checksum (damaged on disk)");
  }
  return true;
}

Status ShardCache::drop_damaged(const Names& n, const std::string& key, const Status& why) {
  ++damaged_;
  std::fprintf(stderr, "chute: %s, for '%s': removed, and fetched again\n", why.message().c_str(), key.c_str());
  CHUTE_ASSIGN_OR_RETURN(FileLock cache_lock, FileLock::acquire(options_.dir + "/" + kCacheLock, true));
  CHUTE_RETURN_IF_ERROR(remove_file(n.entry));
  return remove_file(n.key);
}

Result<ShardCache::Got> ShardCache::get(const std::string& key, std::span<uint8_t> dst, const Fill& fill,
                                        const std::function<void()>& ready) {
  const Names n = names_for(options_.dir, key);
  // Without the key's lock first: a hit costs a read and its checksum.
  Result<bool> found = load(n, dst);
  if (found.is_ok() && *found) {
    touch(n.entry);
    ++hits_;
    return Got::kHit;
  }
  if (!found.is_ok() && found.status().code() != StatusCode::kCorruptData) return found.status();
  // A miss, or a damaged entry: under the key's lock (waiting while another thread or process fills it).
  bool waited = false;
  CHUTE_ASSIGN_OR_RETURN(FileLock lock, FileLock::acquire(n.lock, /*wait=*/true, &waited));
  lock.remove_on_release();  // lock files do not pile up: one exists only while its key is being filled
  if (waited) ++waits_;
  found = load(n, dst);
  if (found.is_ok() && *found) {
    touch(n.entry);
    ++hits_;
    return Got::kHit;
  }
  if (!found.is_ok()) {
    if (found.status().code() != StatusCode::kCorruptData) return found.status();
    CHUTE_RETURN_IF_ERROR(drop_damaged(n, key, found.status()));
  }
  ++misses_;
  CHUTE_RETURN_IF_ERROR(fill_locked(n, key, dst, fill, ready));
  return Got::kFilled;
}

Status ShardCache::fill_locked(const Names& n, const std::string& key, std::span<uint8_t> dst, const Fill& fill,
                               const std::function<void()>& ready) {
  remove_temps(n.name);  // we hold the key's lock: any temp of this key is a dead filler's
  if (Status st = fill(dst); !st.is_ok())
    return Status(st.code(), "cache fill of '" + key + "' failed: " + st.message());
  bytes_fetched_ += dst.size();
  if (ready) ready();
  // The bytes are good and in use: an entry that cannot be written costs this cache, not the caller.
  if (Status st = write_entry(n, key, dst); !st.is_ok()) {
    if (write_errors_++ == 0)
      std::fprintf(stderr, "chute: cannot write the cache entry for '%s' (%s): the cache keeps no copy of it\n",
                   key.c_str(), st.message().c_str());
  }
  return Status::ok();
}

Status ShardCache::write_entry(const Names& n, const std::string& key, std::span<const uint8_t> bytes) {
  const std::string failed = "cache entry of '" + key + "'";
  TempFile tmp(n.base + temp_suffix());
  const std::array<uint8_t, kTrailer> trailer = trailer_of(bytes);
  if (Status st = write_file_direct(tmp.path(), bytes, trailer); !st.is_ok())
    return Status(st.code(), failed + ": " + st.message());  // the partial temp file is removed
  TempFile key_tmp(n.base + temp_suffix());
  CHUTE_RETURN_IF_ERROR(write_new_file(key_tmp.path(), key));
  // Into place under the cache-wide lock: the set of entries changes only under it.
  CHUTE_ASSIGN_OR_RETURN(FileLock cache_lock, FileLock::acquire(options_.dir + "/" + kCacheLock, true));
  if (::rename(key_tmp.path().c_str(), n.key.c_str()) != 0)
    return errno_status(errno, failed + ": cannot rename " + key_tmp.path() + " to " + n.key);
  key_tmp.release();
  if (::rename(tmp.path().c_str(), n.entry.c_str()) != 0) {
    const Status st = errno_status(errno, failed + ": cannot rename " + tmp.path() + " to " + n.entry);
    ::unlink(n.key.c_str());
    return st;
  }
  tmp.release();
  if (options_.limit_bytes > 0) evict_locked(n.name);
  return Status::ok();
}

namespace {

struct EntryFile {
  std::string name;
  uint64_t size;
  int64_t mtime_ns;
};

std::vector<EntryFile> entry_files(const std::string& dir) {
  std::vector<EntryFile> out;
  for (const std::string& f : dir_files(dir)) {
    const std::string name = name_of(f);
    if (name.empty() || f != name + ".shard") continue;
    struct stat st;
    if (::stat((dir + "/" + f).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;  // evicted meanwhile
    out.push_back({name, static_cast<uint64_t>(st.st_size), mtime_ns(st)});
  }
  return out;
}

}  // namespace

void ShardCache::evict_locked(const std::string& keep) {
  std::vector<EntryFile> entries = entry_files(options_.dir);
  uint64_t total = 0;
  for (const EntryFile& e : entries) total += e.size;
  if (total <= options_.limit_bytes) return;
  std::sort(entries.begin(), entries.end(), [](const EntryFile& a, const EntryFile& b) {
    return a.mtime_ns != b.mtime_ns ? a.mtime_ns < b.mtime_ns : a.name < b.name;
  });
  for (const EntryFile& e : entries) {
    if (total <= options_.limit_bytes) break;
    if (e.name == keep) continue;
    const std::string base = options_.dir + "/" + e.name;
    if (!remove_file(base + ".shard").is_ok()) continue;  // e.g. another user's entry: not ours to evict
    ::unlink((base + ".key").c_str());
    total -= e.size;
    ++evictions_;
    // Its lock file too, when no one holds it (the holder would be filling or reading it).
    Result<FileLock> lock = FileLock::acquire(base + ".lock", /*wait=*/false);
    if (lock.is_ok() && lock->held()) lock->remove();
  }
}

void ShardCache::remove_temps(const std::string& name) const {
  for (const std::string& f : dir_files(options_.dir))
    if (name_of(f) == name && ends_with(f, ".tmp")) ::unlink((options_.dir + "/" + f).c_str());
}

void ShardCache::sweep_stale_temps() const {
  std::vector<std::string> names;
  for (const std::string& f : dir_files(options_.dir))
    if (ends_with(f, ".tmp") && !name_of(f).empty()) names.push_back(name_of(f));
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  for (const std::string& name : names) {
    // A temp whose key's lock is free belongs to no running fill (its filler died).
    Result<FileLock> lock = FileLock::acquire(options_.dir + "/" + name + ".lock", /*wait=*/false);
    if (lock.is_ok() && lock->held()) {
      remove_temps(name);
      lock->remove();
    }
  }
}

std::vector<CacheEntry> ShardCache::list() const {
  std::vector<CacheEntry> out;
  for (const EntryFile& e : entry_files(options_.dir)) {
    const std::string base = options_.dir + "/" + e.name;
    out.push_back({read_small_file(base + ".key"), base + ".shard", e.size, e.mtime_ns});
  }
  std::sort(out.begin(), out.end(), [](const CacheEntry& a, const CacheEntry& b) {
    return a.last_used_ns != b.last_used_ns ? a.last_used_ns > b.last_used_ns : a.path < b.path;
  });
  return out;
}

Status ShardCache::clear() {
  CHUTE_ASSIGN_OR_RETURN(FileLock cache_lock, FileLock::acquire(options_.dir + "/" + kCacheLock, true));
  std::vector<std::string> files = dir_files(options_.dir);
  std::vector<std::string> names;
  for (const std::string& f : files)
    if (!name_of(f).empty()) names.push_back(name_of(f));
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  Status first_error;
  for (const std::string& name : names) {
    const std::string base = options_.dir + "/" + name;
    Result<FileLock> lock = FileLock::acquire(base + ".lock", /*wait=*/false);
    if (!lock.is_ok()) {
      if (first_error.is_ok()) first_error = lock.status();
      continue;
    }
    if (!lock->held()) continue;  // being filled right now
    for (const char* suffix : {".shard", ".key"}) {
      const Status st = remove_file(base + suffix);
      if (!st.is_ok() && first_error.is_ok()) first_error = st;
    }
    remove_temps(name);
    lock->remove();
  }
  return first_error;
}

uint64_t ShardCache::bytes() const {
  uint64_t total = 0;
  for (const EntryFile& e : entry_files(options_.dir)) total += e.size;
  return total;
}

CacheStats ShardCache::stats() const {
  return {.hits = hits_.load(),
          .misses = misses_.load(),
          .evictions = evictions_.load(),
          .bytes_fetched = bytes_fetched_.load(),
          .waits = waits_.load(),
          .damaged = damaged_.load(),
          .write_errors = write_errors_.load()};
}

}  // namespace chute
