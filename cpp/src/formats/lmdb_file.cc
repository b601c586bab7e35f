#include "chute/formats/lmdb_file.h"

#include <cstring>

namespace chute {
namespace {

// mdb.c, LMDB 0.9 (MDB_DATA_VERSION 1), 64-bit.
constexpr uint32_t kMagic = 0xBEEFC0DE;
constexpr uint32_t kDataVersion = 1;
constexpr size_t kPageHeader = 16;  // mp_pgno (8), mp_pad (2), mp_flags (2), mp_lower/mp_upper or mp_pages (4)
constexpr uint16_t kBranch = 0x01, kLeaf = 0x02, kOverflow = 0x04, kMeta = 0x08, kLeaf2 = 0x20, kSubPage = 0x40;
constexpr size_t kNodeHeader = 8;  // mn_lo, mn_hi, mn_flags, mn_ksize (2 each)
constexpr uint16_t kBigData = 0x01, kSubData = 0x02, kDupData = 0x04;
constexpr uint16_t kDupSort = 0x04;         // MDB_db.md_flags
constexpr uint64_t kNoPage = ~uint64_t{0};  // P_INVALID: an empty database
constexpr size_t kMaxDepth = 64;

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // little-endian hosts only
  return v;
}

struct Meta {
  uint32_t page_size = 0;
  uint64_t last_page = 0, txnid = 0, root = kNoPage, main_entries = 0;
  uint16_t main_flags = 0, depth = 0;
};

// The meta page at `offset`, or why it is not one.
Result<Meta> read_meta(std::span<const uint8_t> file, uint64_t offset, const std::string& what) {
  // Page header, then MDB_meta: magic (4), version (4), address (8), mapsize (8), two MDB_db of 48 bytes
  // (pad/page size (4), flags (2), depth (2), branch, leaf, overflow pages, entries, root (8 each)), last
  // page (8), txnid (8).
  constexpr size_t kMetaEnd = kPageHeader + 136;
  if (offset > file.size() || file.size() - offset < kMetaEnd)
    return corrupt_data(what + ": " + std::to_string(file.size()) +
                        " bytes, too short for LMDB's meta pages (truncated?)");
  const uint8_t* p = file.data() + offset;
  const uint8_t* m = p + kPageHeader;
  if (load<uint32_t>(m) != kMagic) {
    if (load<uint32_t>(m) == __builtin_bswap32(kMagic))
      return unsupported(what + ": an LMDB file of a big-endian machine");
    return corrupt_data(what + ": not an LMDB data file (no LMDB magic in meta page at offset " +
                        std::to_string(offset) + ")");
  }
  if (load<uint32_t>(m + 4) != kDataVersion)
    return unsupported(what + ": LMDB data format version " + std::to_string(load<uint32_t>(m + 4)) +
                       " (chute reads LMDB 0.9's version 1)");
  if (!(load<uint16_t>(p + 10) & kMeta)) return corrupt_data(what + ": meta page without its flag");
  Meta meta;
  const uint8_t* free_db = m + 24;
  const uint8_t* main_db = m + 72;
  meta.page_size = load<uint32_t>(free_db);
  meta.main_flags = load<uint16_t>(main_db + 4);
  meta.depth = load<uint16_t>(main_db + 6);
  meta.main_entries = load<uint64_t>(main_db + 32);
  meta.root = load<uint64_t>(main_db + 40);
  meta.last_page = load<uint64_t>(m + 120);
  meta.txnid = load<uint64_t>(m + 128);
  return meta;
}

class Walker {
 public:
  Walker(std::span<const uint8_t> file, const Meta& meta, const std::string& what)
      : file_(file), meta_(meta), what_(what), visited_(meta.last_page + 1, false) {}

  Status walk(uint64_t pgno, size_t depth) {
    if (depth > kMaxDepth) return bad(pgno, "the tree is deeper than " + std::to_string(kMaxDepth) + " levels");
    CHUTE_ASSIGN_OR_RETURN(const uint8_t* p, page(pgno));
    if (visited_[pgno]) return bad(pgno, "reached twice (a loop in the tree)");
    visited_[pgno] = true;
    const uint16_t flags = load<uint16_t>(p + 10);
    if (flags & (kLeaf2 | kSubPage))
      return unsupported(what_ + ": an LMDB database with sorted duplicates (MDB_DUPFIXED)");
    const bool leaf = flags & kLeaf;
    if (!leaf && !(flags & kBranch)) return bad(pgno, "neither a branch nor a leaf page");
    const uint16_t lower = load<uint16_t>(p + 12), upper = load<uint16_t>(p + 14);
    if (lower < kPageHeader || lower > upper || upper > meta_.page_size || (lower - kPageHeader) % 2)
      return bad(pgno, "bad free-space bounds");
    const size_t nodes = (lower - kPageHeader) / 2;
    if (!leaf && nodes == 0) return bad(pgno, "an empty branch page");
    for (size_t i = 0; i < nodes; ++i) {
      const uint16_t at = load<uint16_t>(p + kPageHeader + 2 * i);
      if (at < upper || at > meta_.page_size - kNodeHeader)
        return bad(pgno, "node " + std::to_string(i) + " outside the page");
      const uint8_t* n = p + at;
      const uint16_t lo = load<uint16_t>(n), hi = load<uint16_t>(n + 2), nflags = load<uint16_t>(n + 4);
      const uint16_t ksize = load<uint16_t>(n + 6);
      if (at + kNodeHeader + ksize > meta_.page_size)
        return bad(pgno, "node " + std::to_string(i) + "'s key past the page");
      if (!leaf) {  // a branch node's child page number: lo | hi << 16 | flags << 32
        const uint64_t child = lo | uint64_t{hi} << 16 | uint64_t{nflags} << 32;
        CHUTE_RETURN_IF_ERROR(walk(child, depth + 1));
        continue;
      }
      if (nflags & (kSubData | kDupData))
        return unsupported(what_ +
                           ": LMDB named databases or sorted duplicates (MDB_DUPSORT) in the main database; "
                           "chute reads the main database's plain records");
      LmdbRecord r;
      r.key = file_.subspan(static_cast<size_t>(p - file_.data()) + at + kNodeHeader, ksize);
      r.value_size = lo | uint64_t{hi} << 16;
      const uint64_t data_at = static_cast<uint64_t>(p - file_.data()) + at + kNodeHeader + ksize;
      if (nflags & kBigData) {  // the value is in overflow pages; the node holds their first page number
        if (at + kNodeHeader + ksize + 8 > meta_.page_size)
          return bad(pgno, "node " + std::to_string(i) + " cut short");
        const uint64_t over = load<uint64_t>(file_.data() + data_at);
        CHUTE_ASSIGN_OR_RETURN(const uint8_t* o, page(over));
        if (!(load<uint16_t>(o + 10) & kOverflow)) return bad(over, "an overflow page without its flag");
        const uint64_t pages = load<uint32_t>(o + 12);
        if (pages == 0 || pages > meta_.last_page - over + 1 || kPageHeader + r.value_size > pages * meta_.page_size)
          return bad(over, "an overflow value of " + std::to_string(r.value_size) + " bytes in " +
                               std::to_string(pages) + " pages");
        r.value_offset = over * meta_.page_size + kPageHeader;
        if (r.value_offset + r.value_size > file_.size()) return truncated(over);
      } else {
        if (at + kNodeHeader + ksize + r.value_size > meta_.page_size)
          return bad(pgno, "node " + std::to_string(i) + "'s value past the page");
        r.value_offset = data_at;
      }
      records_.push_back(r);
    }
    return Status::ok();
  }

  std::vector<LmdbRecord> take() { return std::move(records_); }

 private:
  Result<const uint8_t*> page(uint64_t pgno) {
    if (pgno < 2 || pgno > meta_.last_page) return bad(pgno, "a page number outside the database");
    const uint64_t offset = pgno * meta_.page_size;
    if (offset + meta_.page_size > file_.size()) return truncated(pgno);
    return file_.data() + offset;
  }
  Status bad(uint64_t pgno, const std::string& why) {
    return corrupt_data(what_ + ": page " + std::to_string(pgno) + ": " + why + " (corrupt LMDB file)");
  }
  Status truncated(uint64_t pgno) {
    return corrupt_data(what_ + ": page " + std::to_string(pgno) + " is past the end of the file (" +
                        std::to_string(file_.size()) + " bytes): truncated LMDB file?");
  }

  std::span<const uint8_t> file_;
  const Meta& meta_;
  const std::string& what_;
  std::vector<bool> visited_;
  std::vector<LmdbRecord> records_;
};

}  // namespace

Result<LmdbFile> read_lmdb(std::span<const uint8_t> file, const std::string& what) {
  CHUTE_ASSIGN_OR_RETURN(const Meta first, read_meta(file, 0, what));
  if (first.page_size < 512 || first.page_size > (1u << 16) || (first.page_size & (first.page_size - 1)))
    return corrupt_data(what + ": page size " + std::to_string(first.page_size) + " (corrupt LMDB file)");
  CHUTE_ASSIGN_OR_RETURN(const Meta second, read_meta(file, first.page_size, what));
  const Meta& meta = second.txnid > first.txnid ? second : first;  // mdb_env_pick_meta
  if (meta.page_size != first.page_size) return corrupt_data(what + ": the meta pages disagree on the page size");
  if (meta.main_flags & kDupSort)
    return unsupported(what + ": an LMDB database with sorted duplicates (MDB_DUPSORT); chute reads one value per key");
  // Every page up to the last one used must be in the file: a shorter file was cut short.
  if (meta.last_page >= file.size() / meta.page_size)
    return corrupt_data(what + ": the database uses pages up to " + std::to_string(meta.last_page) + ", of " +
                        std::to_string(meta.page_size) + " bytes, the file has " + std::to_string(file.size()) +
                        " bytes (truncated LMDB file?)");
  LmdbFile out{.page_size = meta.page_size, .txnid = meta.txnid, .records = {}};
  if (meta.root == kNoPage) return out;  // an empty database
  Walker walker(file, meta, what);
  CHUTE_RETURN_IF_ERROR(walker.walk(meta.root, 1));
  out.records = walker.take();
  if (out.records.size() != meta.main_entries)
    return corrupt_data(what + ": the tree holds " + std::to_string(out.records.size()) +
                        " records, its meta page says " + std::to_string(meta.main_entries) + " (corrupt LMDB file)");
  return out;
}

}  // namespace chute
