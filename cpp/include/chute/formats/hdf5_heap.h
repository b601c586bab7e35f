// The images of an HDF5 dataset located in the file, for reading by offset: what h5py writes for a dataset
// of encoded images.
//
// Variable-length bytes (`h5py.vlen_dtype(np.uint8)`, the common layout): each element, as stored, is a
// sequence length (uint32), the address of a global heap collection (sizeof_addr bytes) and an object's
// index in it (uint32). A collection ("GCOL", version 1, its size in sizeof_size bytes) holds objects, each
// a header (index uint16, reference count uint16, 4 reserved bytes, size in sizeof_size bytes) and its bytes
// padded to 8; index 0 is the free space that ends it. The elements' stored bytes come from the caller
// (h5py: the dataset's contiguous data, or its chunks); the collections are read from the file.
// Fixed-length bytes (`S<n>`, opaque `V<n>`): element i is `itemsize` bytes at a known offset, padded with
// NULs after the image (which ends in a marker: JPEG's EOI, PNG's IEND chunk), so the padding is trimmed.
//
// Every address, size and index is checked against the file; each collection is read once. An element that
// cannot be found (empty, a damaged collection, a length that disagrees with its object) is a bad sample with
// why, not a failed scan. Thread-safety: pure functions over bytes the caller keeps.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "chute/base/status.h"

namespace chute {

struct Hdf5Spans {
  std::vector<uint64_t> offsets, lengths;             // per element; 0, 0 for a bad one
  std::vector<std::pair<uint64_t, std::string>> bad;  // (element, why)
};

// `elements`: the dataset's stored elements, each 4 + sizeof_addr + 4 bytes.
Result<Hdf5Spans> hdf5_vlen_spans(std::span<const uint8_t> file, std::span<const uint8_t> elements, int sizeof_addr,
                                  int sizeof_size);

// Elements of `itemsize` bytes at `offsets` in the file, each trimmed of its trailing NULs.
Result<Hdf5Spans> hdf5_fixed_spans(std::span<const uint8_t> file, const std::vector<uint64_t>& offsets,
                                   uint64_t itemsize);

}  // namespace chute
