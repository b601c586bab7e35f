// PackDestination: the directory a pack writes into, held for one run: its lock, and what earlier runs left.
//
// The lock is a flock() on DST/.chute-pack.lock (base/detail/file_lock.h; the kernel drops it when its holder
// dies, kill -9 included). A whole pack holds it exclusively, so a second pack into the same directory is
// refused with an error naming the first (the lock file holds its description). The writers of a pack's parts
// (`chute pack --part`, chute.ray.pack's tasks) and merge_parts() share it: parts are written concurrently by
// design, and a retried part may run beside its first attempt. The lock file is removed by the last exclusive
// holder; parts leave it for merge_parts().
//
// Leftovers: every chute writer into DST holds the lock, so while it is held exclusively, no other run is
// writing there, and what an earlier run left is dead: temporaries of chute's files (a shard, the index or a
// part index, with atomic_file.h's temporary suffix) and shards that no index in DST lists (a run killed
// between renaming its shards and its index, possibly with another shard size). remove_leftovers() deletes
// exactly those; a file whose name is not one chute writes is never touched, nor is a shard an index lists.
// Thread-safety: one PackDestination per run; not shared.
#pragma once

#include <string>

#include "base/detail/file_lock.h"
#include "chute/base/status.h"

namespace chute::detail {

class PackDestination {
 public:
  enum class Role {
    kWholePack,  // exclusive: refused while anything else writes into DST
    kPart,       // shared with other parts and merge_parts(); refused while a whole pack runs
  };
  inline static constexpr const char* kLockFileName = ".chute-pack.lock";

  // Locks `dst` (an existing directory) for `role`; `what` describes this run for the error another run
  // gets ("chute pack", "chute pack part 3 of 8"). kInvalidArgument naming the holder when it is busy. On a
  // filesystem without locks, an unlocked destination (never exclusive), and a warning on stderr.
  static Result<PackDestination> lock(const std::string& dst, Role role, const std::string& what);

  // Whether this run holds dst alone (a whole pack's lock, or try_exclusive()'s).
  bool exclusive() const { return exclusive_; }

  // A shared holder that finds itself the only one becomes exclusive (and can remove leftovers); false
  // otherwise, and the lock is then released (file_lock.h: flock() converts by unlocking first).
  bool try_exclusive();

  // Removes what earlier runs left (see above); only when exclusive(). Returns how many files it removed;
  // a file it cannot remove is an error naming it.
  Result<int> remove_leftovers() const;

  // Releases the lock; an exclusive holder removes the lock file first.
  void release() { lock_ = FileLock(); }

 private:
  PackDestination(FileLock lock, std::string dst, bool exclusive)
      : lock_(std::move(lock)), dst_(std::move(dst)), exclusive_(exclusive) {}
  FileLock lock_;
  std::string dst_;
  bool exclusive_ = false;
};

}  // namespace chute::detail
