#include "chute/formats/parquet_pages.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace chute {
namespace {

// parquet.thrift's numbers.
constexpr int32_t kDataPage = 0, kIndexPage = 1, kDictionaryPage = 2, kDataPageV2 = 3;
constexpr int32_t kPlain = 0;
constexpr int kMaxDepth = 32;  // nesting of skipped structs (a Statistics struct is 1 deep)

// Thrift's compact protocol, as far as a PageHeader needs: field headers, zigzag varints, and skipping any
// field it does not read. Every read is checked against the bytes; false means malformed (or past the end).
class Compact {
 public:
  explicit Compact(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  size_t pos() const { return pos_; }

  bool varint(uint64_t* v) {
    uint64_t out = 0;
    for (int shift = 0; shift < 64 && pos_ < bytes_.size(); shift += 7) {
      const uint8_t c = bytes_[pos_++];
      out |= static_cast<uint64_t>(c & 0x7f) << shift;
      if ((c & 0x80) == 0) {
        *v = out;
        return true;
      }
    }
    return false;
  }
  bool zigzag(int64_t* v) {
    uint64_t u;
    if (!varint(&u)) return false;
    *v = static_cast<int64_t>(u >> 1) ^ -static_cast<int64_t>(u & 1);
    return true;
  }
  bool i32(int32_t* v) {
    int64_t x;
    if (!zigzag(&x) || x < INT32_MIN || x > INT32_MAX) return false;
    *v = static_cast<int32_t>(x);
    return true;
  }
  // The next field's id and type (0: the struct's end). `last` is the previous field's id in this struct.
  bool field(int16_t* last, int16_t* id, uint8_t* type) {
    if (pos_ >= bytes_.size()) return false;
    const uint8_t h = bytes_[pos_++];
    *type = h & 0x0f;
    if (*type == 0) return true;
    if ((h >> 4) != 0) {
      *id = static_cast<int16_t>(*last + (h >> 4));
    } else {
      int64_t v;
      if (!zigzag(&v) || v < INT16_MIN || v > INT16_MAX) return false;
      *id = static_cast<int16_t>(v);
    }
    *last = *id;
    return true;
  }
  bool skip(uint8_t type, int depth) {
    uint64_t n;
    switch (type) {
      case 1:  // booleans: the value is the field's type
      case 2:
        return true;
      case 3:
        return advance(1);
      case 4:
      case 5:
      case 6:
        return varint(&n);
      case 7:
        return advance(8);
      case 8:
        return varint(&n) && advance(n);
      case 9:  // list, set: size and element type in one byte, a varint size when it is 15
      case 10: {
        if (pos_ >= bytes_.size()) return false;
        const uint8_t h = bytes_[pos_++];
        n = h >> 4;
        if (n == 15 && !varint(&n)) return false;
        return elements(n, h & 0x0f, depth);
      }
      case 11: {
        if (!varint(&n)) return false;
        if (n == 0) return true;
        if (pos_ >= bytes_.size()) return false;
        const uint8_t kv = bytes_[pos_++];
        for (uint64_t i = 0; i < n; ++i)
          if (!element(kv >> 4, depth) || !element(kv & 0x0f, depth)) return false;
        return true;
      }
      case 12: {
        if (depth >= kMaxDepth) return false;
        int16_t last = 0, id;
        for (uint8_t t;;) {
          if (!field(&last, &id, &t)) return false;
          if (t == 0) return true;
          if (!skip(t, depth + 1)) return false;
        }
      }
      default:
        return false;
    }
  }

 private:
  bool advance(uint64_t n) {
    if (n > bytes_.size() - pos_) return false;
    pos_ += n;
    return true;
  }
  // A collection's element: a boolean is a byte here, not part of a field header.
  bool element(uint8_t type, int depth) { return (type == 1 || type == 2) ? advance(1) : skip(type, depth + 1); }
  bool elements(uint64_t n, uint8_t type, int depth) {
    for (uint64_t i = 0; i < n; ++i)  // each element takes a byte at least: the loop ends with the bytes
      if (!element(type, depth)) return false;
    return true;
  }

  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
};

struct PageHeader {
  int32_t type = -1, uncompressed_size = -1, compressed_size = -1;
  bool v1 = false, v2 = false;
  int32_t num_values = -1, encoding = -1;
  int32_t definition_bytes = 0, repetition_bytes = 0;  // v2
};

bool read_data_page_header(Compact& in, PageHeader* h, bool v2) {
  int16_t last = 0, id;
  for (uint8_t t;;) {
    if (!in.field(&last, &id, &t)) return false;
    if (t == 0) return true;
    bool ok;
    if (id == 1 && t == 5)
      ok = in.i32(&h->num_values);
    else if (id == (v2 ? 4 : 2) && t == 5)
      ok = in.i32(&h->encoding);
    else if (v2 && id == 5 && t == 5)
      ok = in.i32(&h->definition_bytes);
    else if (v2 && id == 6 && t == 5)
      ok = in.i32(&h->repetition_bytes);
    else
      ok = in.skip(t, 1);
    if (!ok) return false;
  }
}

bool read_page_header(Compact& in, PageHeader* h) {
  int16_t last = 0, id;
  for (uint8_t t;;) {
    if (!in.field(&last, &id, &t)) return false;
    if (t == 0) return h->type >= 0 && h->compressed_size >= 0 && h->uncompressed_size >= 0;
    bool ok;
    if (id == 1 && t == 5)
      ok = in.i32(&h->type);
    else if (id == 2 && t == 5)
      ok = in.i32(&h->uncompressed_size);
    else if (id == 3 && t == 5)
      ok = in.i32(&h->compressed_size);
    else if ((id == 5 || id == 8) && t == 12) {
      (id == 8 ? h->v2 : h->v1) = true;
      ok = read_data_page_header(in, h, id == 8);
    } else
      ok = in.skip(t, 0);
    if (!ok) return false;
  }
}

// The RLE / bit-packed hybrid encoding of `count` definition levels: per row, whether its level is `max`.
Status decode_levels(std::span<const uint8_t> in, int max, uint64_t count, std::vector<uint8_t>& defined) {
  const unsigned width = static_cast<unsigned>(std::bit_width(static_cast<unsigned>(max))), top = max;
  defined.clear();
  while (defined.size() < count) {
    Compact run(in);
    uint64_t header;
    if (!run.varint(&header)) return corrupt_data("its definition levels end after " + std::to_string(defined.size()));
    in = in.subspan(run.pos());
    if (header & 1) {  // bit-packed: (header >> 1) groups of 8 values, `width` bits each, least significant first
      const uint64_t groups = header >> 1;
      if (groups > in.size() / width) return corrupt_data("a bit-packed run of definition levels runs past their end");
      for (uint64_t v = 0; v < groups * 8 && defined.size() < count; ++v) {
        unsigned level = 0;
        for (unsigned b = 0; b < width; ++b) {
          const uint64_t bit = v * width + b;
          level |= ((in[static_cast<size_t>(bit / 8)] >> (bit % 8)) & 1u) << b;
        }
        if (level > top) return corrupt_data("a definition level above the column's maximum");
        defined.push_back(level == top);
      }
      in = in.subspan(static_cast<size_t>(groups * width));
    } else {  // a run of one value, in ceil(width / 8) little-endian bytes
      const size_t bytes = (width + 7) / 8;
      if (bytes > in.size()) return corrupt_data("an RLE run of definition levels runs past their end");
      unsigned level = 0;
      for (size_t b = 0; b < bytes; ++b) level |= static_cast<unsigned>(in[b]) << (8 * b);
      if (level > top) return corrupt_data("a definition level above the column's maximum");
      const uint64_t take = std::min<uint64_t>(header >> 1, count - defined.size());
      defined.insert(defined.end(), static_cast<size_t>(take), level == top);
      in = in.subspan(bytes);
    }
  }
  return Status::ok();
}

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;  // little-endian hosts only (chute's)
}

}  // namespace

Status scan_parquet_chunk(std::span<const uint8_t> file, const ParquetChunk& chunk, const std::string& what,
                          ParquetValues& out) {
  if (chunk.offset > file.size() || chunk.size > file.size() - chunk.offset)
    return corrupt_data(what + ": the column chunk at " + std::to_string(chunk.offset) + " (" +
                        std::to_string(chunk.size) + " bytes) runs past the file's end (" +
                        std::to_string(file.size()) + " bytes): a truncated file");
  if (chunk.max_definition_level < 0 || chunk.max_definition_level > 255)
    return invalid_argument(what + ": a maximum definition level of " + std::to_string(chunk.max_definition_level));
  const auto bytes = file.subspan(chunk.offset, chunk.size);
  uint64_t rows = 0;
  std::vector<uint8_t> defined;
  for (size_t pos = 0; rows < chunk.num_values;) {
    const std::string at = what + ": the page at offset " + std::to_string(chunk.offset + pos);
    if (pos >= bytes.size())
      return corrupt_data(at + ": the column chunk ends after " + std::to_string(rows) + " of its " +
                          std::to_string(chunk.num_values) + " values");
    Compact in(bytes.subspan(pos));
    PageHeader h;
    if (!read_page_header(in, &h)) return corrupt_data(at + ": not a Parquet page header");
    const size_t data = pos + in.pos();
    if (static_cast<uint64_t>(h.compressed_size) > bytes.size() - data)
      return corrupt_data(at + ": its " + std::to_string(h.compressed_size) +
                          " bytes run past the column chunk's end (a truncated file)");
    const auto page = bytes.subspan(data, static_cast<size_t>(h.compressed_size));
    pos = data + page.size();
    if (h.type == kIndexPage) continue;
    if (h.type == kDictionaryPage)
      return unsupported(at + ": a dictionary page: the column is dictionary-encoded, not PLAIN");
    if ((h.type != kDataPage || !h.v1) && (h.type != kDataPageV2 || !h.v2))
      return corrupt_data(at + ": page type " + std::to_string(h.type) + " without its data page header");
    if (h.encoding != kPlain)
      return unsupported(at + ": values in encoding " + std::to_string(h.encoding) + ", not PLAIN");
    if (h.compressed_size != h.uncompressed_size)
      return unsupported(at + ": a compressed page (" + std::to_string(h.compressed_size) + " bytes of " +
                         std::to_string(h.uncompressed_size) + ")");
    if (h.num_values < 0 || static_cast<uint64_t>(h.num_values) > chunk.num_values - rows)
      return corrupt_data(at + ": " + std::to_string(h.num_values) + " values, more than the chunk has left");
    const auto count = static_cast<uint64_t>(h.num_values);
    std::span<const uint8_t> levels, values = page;
    if (h.v2) {
      if (h.repetition_bytes != 0) return unsupported(at + ": repeated values (a list column)");
      if (h.definition_bytes < 0 || static_cast<size_t>(h.definition_bytes) > page.size())
        return corrupt_data(at + ": its definition levels run past the page");
      levels = page.first(static_cast<size_t>(h.definition_bytes));
      values = page.subspan(levels.size());
    } else if (chunk.max_definition_level > 0) {
      if (page.size() < 4) return corrupt_data(at + ": no room for its definition levels' length");
      const uint32_t n = load_u32(page.data());
      if (n > page.size() - 4) return corrupt_data(at + ": its definition levels run past the page");
      levels = page.subspan(4, n);
      values = page.subspan(4 + n);
    }
    if (chunk.max_definition_level > 0) {
      Status st = decode_levels(levels, chunk.max_definition_level, count, defined);
      if (!st.is_ok()) return corrupt_data(at + ": " + st.message());
    } else {
      defined.assign(static_cast<size_t>(count), 1);
    }
    size_t v = 0;
    for (uint64_t r = 0; r < count; ++r) {
      if (!defined[static_cast<size_t>(r)]) {
        out.offsets.push_back(0), out.lengths.push_back(0), out.null.push_back(1);
        continue;
      }
      if (values.size() - v < 4) return corrupt_data(at + ": value " + std::to_string(r) + " runs past the page");
      const uint32_t n = load_u32(values.data() + v);
      v += 4;
      if (n > values.size() - v)
        return corrupt_data(at + ": value " + std::to_string(r) + " claims " + std::to_string(n) + " bytes, " +
                            std::to_string(values.size() - v) + " are left in the page");
      out.offsets.push_back(chunk.offset + static_cast<uint64_t>(values.data() + v - bytes.data()));
      out.lengths.push_back(n);
      out.null.push_back(0);
      v += n;
    }
    rows += count;
  }
  return Status::ok();
}

}  // namespace chute
