// TFRecord files: the framing of tf.io.TFRecordWriter (tensorflow/core/lib/io/record_writer.cc), read in
// place. Each record is
//   uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes | data[length] | uint32 masked CRC-32C of
//   data
// (crc32c.h). scan_tfrecord() walks the headers, checking each length's CRC and that the record fits in the
// file; a record's data CRC is checked by check_tfrecord_crc() when it is read. Compressed files (TFRecord's
// GZIP and ZLIB options compress the whole file) cannot be read in place: GZIP is recognised by its magic and
// refused with what to do; ZLIB has no magic and fails its first length CRC.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "chute/base/status.h"

namespace chute {

inline constexpr size_t kTfRecordHeaderSize = 12;  // length + its CRC
inline constexpr size_t kTfRecordFooterSize = 4;   // the data's CRC

struct TfRecord {
  uint64_t offset = 0;  // of the data, in the file
  uint64_t size = 0;    // of the data
};

// Whether `header` (at least 12 bytes) starts with a record header: a length and its masked CRC (a 2^-32
// accident otherwise): how a TFRecord file is recognised by its content.
bool is_tfrecord_header(std::span<const uint8_t> header);

// The record whose header is at `offset` of `file` (< file.size()); errors as scan_tfrecord's, `index`
// numbering the record in them.
Result<TfRecord> read_tfrecord_header(std::span<const uint8_t> file, uint64_t offset, size_t index,
                                      const std::string& what);

// The records of a TFRecord file, in order. kCorruptData naming `what`, the record and its offset when a
// length CRC fails or a record runs past the end (truncated); kUnsupported for a GZIP-compressed file.
Result<std::vector<TfRecord>> scan_tfrecord(std::span<const uint8_t> file, const std::string& what);

// `record` is a record's data followed by its 4-byte masked CRC: kCorruptData when they disagree.
Status check_tfrecord_crc(std::span<const uint8_t> record);

}  // namespace chute
