// ShardBytes: a whole shard's bytes as a source reads them: a local file's mapping, or a remote shard
// received into memory (io/shard_stream.h: a buffer of a pool, back in the pool once the last reader lets
// go). A source copies a sample out with copy(): a mapped file's pages under its SIGBUS guard
// (base/mapped_file.h), memory with a plain copy.
// Thread-safety: immutable; shared by every reader of the shard.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <utility>

#include "chute/base/mapped_file.h"

namespace chute {

class ShardBytes {
 public:
  explicit ShardBytes(std::shared_ptr<const MappedFile> file) : file_(std::move(file)), bytes_(file_->bytes()) {}
  // `bytes` stay valid while `owner` lives.
  ShardBytes(std::shared_ptr<const void> owner, std::span<const uint8_t> bytes)
      : owner_(std::move(owner)), bytes_(bytes) {}

  std::span<const uint8_t> bytes() const { return bytes_; }
  // `n` bytes at `offset` (inside bytes()) into dst.
  Status copy(uint64_t offset, size_t n, uint8_t* dst) const {
    if (file_) return file_->copy(offset, n, dst);
    std::memcpy(dst, bytes_.data() + offset, n);
    return Status::ok();
  }

 private:
  std::shared_ptr<const MappedFile> file_;
  std::shared_ptr<const void> owner_;
  std::span<const uint8_t> bytes_;
};

}  // namespace chute
