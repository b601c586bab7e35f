#include "chute/formats/hdf5_heap.h"

#include <cstring>
#include <unordered_map>

namespace chute {
namespace {

constexpr uint64_t kCollectionHeader = 8;  // "GCOL", version, 3 reserved; then the size

uint64_t load(const uint8_t* p, int n) {  // little-endian, n <= 8
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

struct HeapObject {
  uint64_t offset = 0, size = 0;
};

// A collection's objects by index, or why it cannot be read.
struct Collection {
  std::unordered_map<uint64_t, HeapObject> objects;
  std::string error;
};

Collection read_collection(std::span<const uint8_t> file, uint64_t address, int sizeof_size) {
  Collection c;
  const std::string at = "the global heap collection at offset " + std::to_string(address);
  const uint64_t header = kCollectionHeader + static_cast<uint64_t>(sizeof_size);
  if (address > file.size() || header > file.size() - address) {
    c.error = at + " is past the file's end (a truncated file)";
    return c;
  }
  const uint8_t* p = file.data() + address;
  if (std::memcmp(p, "GCOL", 4) != 0 || p[4] != 1) {
    c.error = at + " is not one (no GCOL signature of version 1)";
    return c;
  }
  const uint64_t size = load(p + kCollectionHeader, sizeof_size);
  if (size < header || size > file.size() - address) {
    c.error = at + " claims " + std::to_string(size) + " bytes, past the file's end (a truncated file)";
    return c;
  }
  const uint64_t object_header = 8 + static_cast<uint64_t>(sizeof_size);
  for (uint64_t pos = header; size - pos >= object_header;) {
    const uint8_t* o = p + pos;
    const uint64_t index = load(o, 2), n = load(o + 8, sizeof_size);
    if (index == 0) break;  // the free space: the rest of the collection
    if (n > size - pos - object_header) {
      c.error = at + ": object " + std::to_string(index) + " claims " + std::to_string(n) + " bytes, past its end";
      return c;
    }
    c.objects[index] = {address + pos + object_header, n};
    pos += object_header + ((n + 7) & ~uint64_t{7});
  }
  return c;
}

}  // namespace

Result<Hdf5Spans> hdf5_vlen_spans(std::span<const uint8_t> file, std::span<const uint8_t> elements, int sizeof_addr,
                                  int sizeof_size) {
  if (sizeof_addr < 2 || sizeof_addr > 8 || sizeof_size < 2 || sizeof_size > 8)
    return unsupported("HDF5 addresses of " + std::to_string(sizeof_addr) + " bytes and sizes of " +
                       std::to_string(sizeof_size));
  const size_t element = 8 + static_cast<size_t>(sizeof_addr);
  if (elements.size() % element != 0)
    return corrupt_data(std::to_string(elements.size()) + " bytes of variable-length elements, not a multiple of " +
                        std::to_string(element));
  Hdf5Spans out;
  const size_t n = elements.size() / element;
  out.offsets.assign(n, 0);
  out.lengths.assign(n, 0);
  std::unordered_map<uint64_t, Collection> collections;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* e = elements.data() + i * element;
    const uint64_t length = load(e, 4), address = load(e + 4, sizeof_addr), index = load(e + 4 + sizeof_addr, 4);
    if (length == 0) {
      out.bad.emplace_back(i, "an empty element (no image was written)");
      continue;
    }
    auto it = collections.find(address);
    if (it == collections.end()) it = collections.emplace(address, read_collection(file, address, sizeof_size)).first;
    const Collection& c = it->second;
    if (!c.error.empty()) {
      out.bad.emplace_back(i, c.error);
      continue;
    }
    const auto object = c.objects.find(index);
    if (object == c.objects.end()) {
      out.bad.emplace_back(i, "object " + std::to_string(index) + " is not in the global heap collection at offset " +
                                  std::to_string(address));
      continue;
    }
    if (object->second.size != length) {
      out.bad.emplace_back(i, "an element of " + std::to_string(length) + " bytes whose heap object holds " +
                                  std::to_string(object->second.size) + " (not bytes: a variable-length type of " +
                                  "wider elements?)");
      continue;
    }
    out.offsets[i] = object->second.offset;
    out.lengths[i] = length;
  }
  return out;
}

Result<Hdf5Spans> hdf5_fixed_spans(std::span<const uint8_t> file, const std::vector<uint64_t>& offsets,
                                   uint64_t itemsize) {
  Hdf5Spans out;
  out.offsets.reserve(offsets.size());
  out.lengths.reserve(offsets.size());
  for (size_t i = 0; i < offsets.size(); ++i) {
    const uint64_t at = offsets[i];
    if (at > file.size() || itemsize > file.size() - at)
      return corrupt_data("element " + std::to_string(i) + " at offset " + std::to_string(at) + " (" +
                          std::to_string(itemsize) + " bytes) runs past the file's end (a truncated file)");
    uint64_t n = itemsize;
    while (n > 0 && file[at + n - 1] == 0) --n;
    out.offsets.push_back(n == 0 ? 0 : at);
    out.lengths.push_back(n);
    if (n == 0) out.bad.emplace_back(i, "an empty element (all NUL: no image was written)");
  }
  return out;
}

}  // namespace chute
