// Whole files written and read around the page cache (O_DIRECT), from and into memory the caller reuses.
//
// Why: a buffered write copies every byte into page-cache pages, newly allocated for a new file; on a VM
// that hands free memory back to its host each of those pages faults to the host on first touch, which
// costs several times the copy (docs/REMOTE.md). O_DIRECT moves the bytes between the caller's buffer and
// the device: no page of the kernel's is allocated, and a file read back lands in the caller's (reused)
// buffer the same way.
//
// A file is `head` then `tail` (a small trailer, up to 4 KiB, such as a checksum). O_DIRECT wants the
// memory, the offsets and the lengths aligned to the device's blocks: `head` must start on a 4 KiB
// boundary (a PageBuffer does); its last partial block and `tail` go through a small aligned buffer of
// this thread's. A file system that refuses O_DIRECT (tmpfs before Linux 6.6, some FUSE mounts), or a
// head that is not aligned, gets plain reads and writes instead, with the same results.
// Thread-safety: plain functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "chute/base/status.h"

namespace chute {

inline constexpr size_t kDirectBlock = 4096;  // alignment O_DIRECT gets here (a multiple of every logical block)
inline constexpr size_t kMaxDirectTail = 4096;

// Creates `path` (O_EXCL: it must not exist) holding head then tail. On error the file may be left
// partial: the caller removes it (it writes temporary files and renames them into place).
Status write_file_direct(const std::string& path, std::span<const uint8_t> head, std::span<const uint8_t> tail);

// Reads `path` into head then tail when it holds exactly head.size() + tail.size() bytes: true. false
// when it does not exist or has another size; an error when it cannot be read.
Result<bool> read_file_direct(const std::string& path, std::span<uint8_t> head, std::span<uint8_t> tail);

}  // namespace chute
