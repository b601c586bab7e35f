#include "chute/base/memory_map.h"

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace chute {

bool Mapping::same_memory_at(const Mapping& now, uintptr_t address) const {
  if (file_backed() != now.file_backed() || shared != now.shared) return false;
  if (!file_backed()) return path == now.path;
  return device == now.device && inode == now.inode && path == now.path &&
         offset + (address - start) == now.offset + (address - now.start);
}

Result<Mapping> mapping_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  FILE* f = std::fopen("/proc/self/maps", "re");
  if (f == nullptr) return Status(StatusCode::kIoError, std::string("/proc/self/maps: ") + std::strerror(errno));
  // Lines are sorted by address: the first one ending past `address` is the only candidate.
  char line[4096 + 256];
  Mapping found;
  bool held = false;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    uintptr_t start = 0, end = 0;
    char perms[8] = {};
    uint64_t offset = 0, inode = 0;
    unsigned major = 0, minor = 0;
    int path_at = 0;
    if (std::sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s %" SCNx64 " %x:%x %" SCNu64 " %n", &start, &end, perms,
                    &offset, &major, &minor, &inode, &path_at) < 7)
      continue;
    if (end <= address) continue;
    held = start <= address;
    if (held) {
      found.start = start, found.end = end, found.shared = perms[3] == 's';
      found.device = (uint64_t{major} << 32) | minor, found.inode = inode, found.offset = offset;
      if (path_at > 0) found.path = line + path_at;
      while (!found.path.empty() && (found.path.back() == '\n' || found.path.back() == ' ')) found.path.pop_back();
    }
    break;
  }
  std::fclose(f);
  if (!held) return Status(StatusCode::kNotFound, "no mapping holds the address");
  return found;
}

}  // namespace chute
