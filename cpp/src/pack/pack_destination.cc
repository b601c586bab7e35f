#include "pack/detail/pack_destination.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <vector>

#include "chute/base/atomic_file.h"
#include "chute/base/mapped_file.h"
#include "chute/io/packed_format.h"
#include "chute/pack/pack_writer.h"

namespace chute::detail {
namespace {

// "chute pack (pid 123 on node7, since 2025-01-31 12:00:00)": who holds the lock, for the run it refuses.
std::string describe(const std::string& what) {
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  char since[32] = "";
  if (localtime_r(&now, &local) != nullptr) std::strftime(since, sizeof since, "%Y-%m-%d %H:%M:%S", &local);
  return what + " (pid " + std::to_string(::getpid()) + " on " + host + ", since " + since + ")";
}

// Written beside the lock, not through it: the lock's descriptor is read-only, and a flock belongs to its own
// open file description, so this second one neither takes nor drops it. Shared holders overwrite each other:
// the file then names one of them.
void write_holder(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text << "\n";
}

std::string read_holder(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line.empty() ? "another chute run (it has not said which)" : line;
}

// The names of chute's own files in a pack directory, by their writers' functions (never a pattern of ours).
bool is_index_name(const std::string& name) {
  int part = 0, parts = 0;
  return name == kIndexFileName || parse_part_index_name(name, part, parts);
}

bool is_temporary_of_ours(const std::string& name) {
  if (temporary_name_pid(name) <= 0) return false;
  const std::string base = name.substr(0, name.rfind(".tmp-"));
  return is_shard_file_name(base) || is_index_name(base);
}

}  // namespace

Result<PackDestination> PackDestination::lock(const std::string& dst, Role role, const std::string& what) {
  const std::string path = dst + "/" + kLockFileName;
  const bool exclusive = role == Role::kWholePack;
  Result<FileLock> acquired = exclusive ? FileLock::acquire(path, /*wait=*/false) : FileLock::acquire_shared(path);
  if (!acquired.is_ok() && acquired.status().code() == StatusCode::kUnsupported) {
    // Packing needs no lock; only the guard against a concurrent run and the removal of leftovers do.
    std::fprintf(stderr,
                 "chute pack: %s; a second pack into %s at the same time would not be refused, and files an "
                 "earlier run left there are kept\n",
                 acquired.status().message().c_str(), dst.c_str());
    ::unlink(path.c_str());
    return PackDestination(FileLock(), dst, false);
  }
  if (!acquired.is_ok()) return acquired.status();
  FileLock held = std::move(acquired).value();
  if (!held.held())
    return invalid_argument(dst + " is being written by " + read_holder(path) +
                            "; wait for it to finish, or pack elsewhere");
  if (exclusive) held.remove_on_release();
  write_holder(path, describe(what));
  return PackDestination(std::move(held), dst, exclusive);
}

bool PackDestination::try_exclusive() {
  if (!exclusive_ && lock_.try_upgrade()) {
    exclusive_ = true;
    lock_.remove_on_release();
  }
  return exclusive_;
}

Result<int> PackDestination::remove_leftovers() const {
  CHUTE_CHECK(exclusive_);  // another run may be writing: its files are not leftovers
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dst_, ec)) {
    std::error_code type_ec;
    if (entry.symlink_status(type_ec).type() == fs::file_type::regular)  // links and folders are never ours
      files.push_back(entry.path().filename().string());
  }
  if (ec) return io_error("cannot list " + dst_ + ": " + ec.message());

  // The shards some index lists. An index that does not parse lists unknown shards: then none is an orphan.
  std::set<std::string> listed;
  bool all_listed = false;
  for (const std::string& name : files) {
    if (!is_index_name(name)) continue;
    Result<std::shared_ptr<const MappedFile>> file = MappedFile::open(dst_ + "/" + name);
    Result<IndexView> view = file.is_ok() ? IndexView::parse((*file)->bytes(), name) : file.status();
    if (!view.is_ok()) {
      all_listed = true;
      continue;
    }
    for (const ShardInfo& shard : view->shards()) listed.insert(shard.name);
  }

  int removed = 0;
  for (const std::string& name : files) {
    const bool orphan = !all_listed && is_shard_file_name(name) && !listed.count(name);
    if (!orphan && !is_temporary_of_ours(name)) continue;
    const std::string path = dst_ + "/" + name;
    if (::unlink(path.c_str()) == 0)
      ++removed;
    else if (errno != ENOENT)
      return io_error("cannot remove " + path + ", left by an earlier run: " + std::strerror(errno));
  }
  return removed;
}

}  // namespace chute::detail
