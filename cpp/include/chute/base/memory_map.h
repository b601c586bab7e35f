// The mappings of this process's address space, as /proc/self/maps lists them: which one holds an
// address, and whether the memory there is still what it was. GPU delivery uses it to tie a page-locked
// registration (cudaHostRegister) to the mapping it was made for: a registration pins the pages mapped at
// that moment, and if the range is unmapped and something else is mapped there, a copy from the address
// would still read the old pages (docs/GPU.md, "Registered memory").
// Thread-safety: free functions with no state; each call reads /proc/self/maps afresh.
#pragma once

#include <cstdint>
#include <string>

#include "chute/base/status.h"

namespace chute {

struct Mapping {
  uintptr_t start = 0, end = 0;  // [start, end)
  bool shared = false;           // MAP_SHARED ('s' in the permissions)
  uint64_t device = 0;           // the backing file's device and inode; 0 for anonymous memory
  uint64_t inode = 0;
  uint64_t offset = 0;  // the file offset at `start`
  std::string path;     // as listed: a file (" (deleted)" kept), "[heap]", or empty for anonymous memory

  bool file_backed() const { return inode != 0; }
  // Whether the memory at `address` (inside both mappings) is the same memory in `now` as in this one:
  // the same file at the same file offset. Anonymous memory is compared by its kind only (a remapping of
  // anonymous memory cannot be told apart): callers that need the guarantee register file-backed memory.
  bool same_memory_at(const Mapping& now, uintptr_t address) const;
};

// The mapping that holds `p`: kNotFound when none does (unmapped).
Result<Mapping> mapping_of(const void* p);

}  // namespace chute
