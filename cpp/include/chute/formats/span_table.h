// A SpanSource from spans that a scan elsewhere located: pyarrow's metadata (Arrow IPC buffers, Parquet
// pages found through parquet_pages.h), h5py's (hdf5_heap.h). The scan is the format library's reading of
// the file's own metadata, cheap and redone at each open, so these indexes live in memory only (encode_index
// + IndexView::parse), never in the cache.
// Thread-safety: open_span_table() is a plain function; the source is a SpanSource.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "chute/io/span_source.h"

namespace chute {

struct SpanTable {
  // The bytes: a file's mapping, or memory that `owner` keeps alive (as SpanPart).
  std::shared_ptr<const MappedFile> file;
  std::shared_ptr<const void> owner;
  std::span<const uint8_t> memory;
  std::string name;
  // Per sample: its span in the bytes and its label. A sample's key is `first_key` + its place in the table.
  std::vector<uint64_t> offsets, lengths;
  std::vector<int64_t> labels;
  uint64_t first_key = 0;
  std::vector<std::pair<uint64_t, std::string>> bad;  // samples that cannot be read: (place, why)
};

// `options`: shard sizes (empty: one shard per table) and an order, as SpanSource's.
Result<std::shared_ptr<SpanSource>> open_span_table(std::vector<SpanTable> tables, SpanOptions options);

}  // namespace chute
