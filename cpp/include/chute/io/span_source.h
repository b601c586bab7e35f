// SpanSource: samples read by offset from bytes the source holds, with no per-sample work but a copy: the
// generic reader behind the formats users already have (cpp/include/chute/formats/: TFRecord files, the
// images inside an LMDB's values; Arrow IPC files and Parquet row groups next).
//
// A source is a list of parts. A part's bytes are either a file's own read-only mapping (MappedFile: read
// under its SIGBUS guard, so a file truncated while open is a sample error, not a crash) or memory that an
// owner keeps alive (an Arrow buffer that pyarrow decoded a Parquet row group into). A part's samples are
// an index in chute's index format (packed_format.h), kind span: one shard (the part's bytes: its size is
// theirs), and per sample the span (offset, payload_len), label and key. Indexes of files are built by a
// one-time scan and cached (index_cache.h); an index of memory is built in memory (encode_index + parse).
//
// What a span holds: the encoded image itself (an LMDB value's image bytes, an Arrow binary value), or a
// record that the format checks and unwraps on each read (`SpanOptions::unwrap`: a TFRecord record's
// CRC-32C, then its Example's image feature).
//
// Kind span's class table holds notes instead of class names: "scan\0<what the scan was asked>" (matched by
// the opener before a cached index is used) and, for each sample the scan found but could not read,
// "bad\0<index>\0<why>": read() returns that error (kCorruptData) and label() -1, so a bad record is a
// sample error handled by the loader's `on_error`, like any other source's.
// Thread-safety: immutable after create; every method may run on many threads.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "chute/base/mapped_file.h"
#include "chute/io/index_cache.h"
#include "chute/io/source.h"

namespace chute {

struct SpanPart {
  // The bytes the spans are in: a file's mapping, or `memory` that `owner` keeps alive.
  std::shared_ptr<const MappedFile> file;
  std::shared_ptr<const void> owner;
  std::span<const uint8_t> memory;
  std::string name;  // in messages and names: the file's path, or what the memory is
  CachedIndex index;
};

// Turns a span's bytes (the record as stored) into the image's, in place; an error is the sample's.
using SpanUnwrap = std::function<Status(std::vector<uint8_t>& bytes)>;

struct SpanOptions {
  SpanUnwrap unwrap;  // empty: the span is the image
  // Samples per shard for order='shards': contiguous index ranges adding up to size(). Empty: one shard per
  // part, unless `no_shards` (the samples lie in no order worth reading by: shard_sizes() is empty).
  std::vector<int64_t> shard_sizes;
  bool no_shards = false;
  std::vector<int64_t> labels;  // one per sample, replacing the index's (labels from outside); empty: the index's
};

// The notes of a kind span index (above) for a scan described by `scan` that could not read `bad` samples.
std::vector<std::string> span_notes(const std::string& scan, const std::vector<std::pair<uint64_t, std::string>>& bad);
// The "scan" note of an index, or "" (what an opener compares before using a cached index).
std::string span_scan_note(const IndexView& index);

class SpanSource final : public Source {
 public:
  static Result<std::shared_ptr<SpanSource>> create(std::vector<SpanPart> parts, SpanOptions options = {});

  int64_t size() const override { return total_; }
  int64_t label(int64_t index) const override;
  // "<part name>:<key>"
  std::string name(int64_t index) const override;
  Status read(int64_t index, std::vector<uint8_t>& out) const override;
  Status read_capped(int64_t index, std::vector<uint8_t>& out, uint64_t max_bytes) const override;
  std::vector<int64_t> shard_sizes() const override { return shard_sizes_; }

  // The same samples with these labels (one per sample): labels from outside the records.
  Result<std::shared_ptr<SpanSource>> with_labels(std::vector<int64_t> labels) const;

  // The key stored for the sample, prefixed with its part's file name when there are several parts (what
  // `chute pack` records: unique in the source).
  std::string key(int64_t index) const override;
  // The span's bytes (the record as stored, before `unwrap`).
  uint64_t span_size(int64_t index) const;
  size_t num_parts() const { return parts_.size(); }
  const std::string& part_name(size_t p) const { return parts_[p].part.name; }
  // Where part p's index was read from or cached; "" when it is in memory only.
  const std::string& index_path(size_t p) const { return parts_[p].part.index.path; }
  // Samples the scans could not read: (index, why), in index order.
  std::vector<std::pair<int64_t, std::string>> bad_samples() const;

 private:
  struct Part {
    SpanPart part;
    int64_t first = 0;
  };
  const Part& locate(int64_t index, uint64_t* local) const;

  std::vector<Part> parts_;
  SpanOptions options_;
  std::vector<int64_t> shard_sizes_;
  std::unordered_map<int64_t, std::string> bad_;
  int64_t total_ = 0;
};

}  // namespace chute
