// Source: where samples come from. A source knows how many samples it has, each one's label and a name
// for error messages (its path), and reads a sample's encoded bytes on request.
//
// Thread-safety: every method may be called from many threads at once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chute/status.h"

namespace chute {

class Source {
 public:
  virtual ~Source() = default;
  virtual int64_t size() const = 0;
  virtual int64_t label(int64_t index) const = 0;
  // The sample's path or key, for error messages and inspection.
  virtual std::string name(int64_t index) const = 0;
  // Replaces `out` with the sample's encoded bytes. `out` is reused across calls to avoid allocation.
  virtual Status read(int64_t index, std::vector<uint8_t>& out) const = 0;
};

}  // namespace chute
