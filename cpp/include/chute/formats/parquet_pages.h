// The values of a Parquet column chunk stored uncompressed and PLAIN-encoded, located in the file: what
// Hugging Face `datasets` writes for an Image column (its struct's `bytes` leaf: compression "none",
// encoding PLAIN, no dictionary, so that the Hub can deduplicate the bytes), and what pyarrow writes with
// `compression=None, use_dictionary=False`. Each value is then a span of the file, read by offset.
//
// A chunk is a run of pages, each a Thrift compact-protocol PageHeader (parquet.thrift) and its bytes. Data
// pages (v1: repetition and definition levels, each prefixed by its 4-byte length; v2: their lengths in the
// header) hold, per row, a definition level (RLE / bit-packed hybrid) and, for each row whose level is the
// column's maximum, a PLAIN BYTE_ARRAY value: a 4-byte little-endian length and the bytes. Index pages are
// skipped; a dictionary page, an encoding other than PLAIN, a compressed v2 page or repeated values (lists)
// are errors saying what was found. Every header field, level run and length is checked against the chunk.
// The caller gives the chunk's place and counts from the file's footer (pyarrow's metadata).
// Thread-safety: a pure function over bytes the caller keeps.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "chute/base/status.h"

namespace chute {

struct ParquetChunk {
  uint64_t offset = 0;      // the first page's header (the dictionary page's when there is one)
  uint64_t size = 0;        // total_compressed_size
  uint64_t num_values = 0;  // the column chunk's values (rows: the column is not repeated)
  int max_definition_level = 0;
};

struct ParquetValues {
  // Per row: where its value is in the file, or null (offset 0, length 0, null[row] true).
  std::vector<uint64_t> offsets, lengths;
  std::vector<uint8_t> null;
};

// Appends the chunk's rows to `out`. `what` names the file and column in errors.
Status scan_parquet_chunk(std::span<const uint8_t> file, const ParquetChunk& chunk, const std::string& what,
                          ParquetValues& out);

}  // namespace chute
