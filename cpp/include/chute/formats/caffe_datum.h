// Caffe's Datum record (caffe/src/caffe/proto/caffe.proto), as `convert_imageset` writes it into LMDB:
//   message Datum {
//     optional int32 channels = 1;  optional int32 height = 2;  optional int32 width = 3;
//     optional bytes data = 4;      // the image file's bytes when `encoded`, else raw pixels (C x H x W, BGR)
//     optional int32 label = 5;
//     repeated float float_data = 6;
//     optional bool encoded = 7 [default = false];   // convert_imageset --encoded
//   }
// parsed in place: `data` is a span of the value, so an encoded image is read from the file by offset.
// Thread-safety: pure functions over bytes the caller keeps.
#pragma once

#include <cstdint>
#include <span>

#include "chute/base/status.h"

namespace chute {

struct CaffeDatum {
  int64_t channels = 0, height = 0, width = 0;
  bool has_data = false;
  std::span<const uint8_t> data;  // inside the value
  int64_t label = 0;
  bool has_label = false;
  bool encoded = false;
  size_t float_data = 0;  // values in float_data
};

// kCorruptData (naming the byte) for bytes that are not a Datum.
Result<CaffeDatum> parse_datum(std::span<const uint8_t> value);

}  // namespace chute
