// An LMDB environment's data file (data.mdb) read in place: the main database's records, in key order,
// found by walking its B+tree from the newest meta page, with no liblmdb. LMDB 0.9's on-disk format
// (MDB_DATA_VERSION 1, 64-bit builds; liblmdb's mdb.c): two meta pages (0 and 1; the one with the larger
// transaction id is current), branch and leaf pages of nodes, values over a page's share in overflow pages
// (contiguous, so every value is one span of the file).
//
// Why not liblmdb: it trusts the file (a corrupt or truncated data.mdb can crash the process that reads
// it, and liblmdb maps the environment's whole map size, past a truncated file's end), and the hot path
// would not use it anyway (samples are read by offset from chute's own mapping). This walker checks every
// page number, node offset and size against the file before using it, visits each page at most once (no
// loop on a hostile tree), and is fuzzed (lmdb_fuzz.cc). It reads a dataset: an environment another process
// is writing to may be read at an older transaction, or refused.
// Named databases (mdb_dbi_open with a name), sorted duplicates (MDB_DUPSORT) and 32-bit or big-endian
// builds' files are refused with what they are.
// Thread-safety: pure functions over bytes the caller keeps.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "chute/base/status.h"

namespace chute {

struct LmdbRecord {
  std::span<const uint8_t> key;  // inside the file's bytes
  uint64_t value_offset = 0;     // in the file
  uint64_t value_size = 0;
};

struct LmdbFile {
  uint32_t page_size = 0;
  uint64_t txnid = 0;               // of the meta page read
  std::vector<LmdbRecord> records;  // the main database's, in key order
};

// `file`: data.mdb's bytes; `what` names it in errors (kCorruptData, kUnsupported).
Result<LmdbFile> read_lmdb(std::span<const uint8_t> file, const std::string& what);

}  // namespace chute
