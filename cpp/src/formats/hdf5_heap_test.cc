#include "chute/formats/hdf5_heap.h"

#include <gtest/gtest.h>

#include <string>

namespace chute {
namespace {

void put(std::vector<uint8_t>& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(i < 8 ? static_cast<uint8_t>(v >> (8 * i)) : 0);  // zeros above 64 bits
}

// A file with a global heap collection at offset 8 holding `objects` (indexes 1, 2, ...), as HDF5 lays one
// out (8-byte addresses and sizes), and the stored vlen elements pointing at them.
struct Heap {
  std::vector<uint8_t> file, elements;
};

Heap heap(const std::vector<std::string>& objects) {
  Heap h;
  h.file.assign(8, 0);
  std::vector<uint8_t> c = {'G', 'C', 'O', 'L', 1, 0, 0, 0};
  put(c, 0, 8);  // the size, set below
  for (size_t i = 0; i < objects.size(); ++i) {
    put(c, i + 1, 2);
    put(c, 1, 2);
    put(c, 0, 4);
    put(c, objects[i].size(), 8);
    c.insert(c.end(), objects[i].begin(), objects[i].end());
    c.resize((c.size() + 7) & ~size_t{7});
    put(h.elements, objects[i].size(), 4);
    put(h.elements, 8, 8);
    put(h.elements, i + 1, 4);
  }
  put(c, 0, 16);  // the free space object: index 0
  for (int i = 0; i < 8; ++i) c[8 + i] = static_cast<uint8_t>(c.size() >> (8 * i));
  h.file.insert(h.file.end(), c.begin(), c.end());
  return h;
}

std::string at(const std::vector<uint8_t>& file, const Hdf5Spans& s, size_t i) {
  return std::string(file.begin() + static_cast<long>(s.offsets[i]),
                     file.begin() + static_cast<long>(s.offsets[i] + s.lengths[i]));
}

TEST(Hdf5HeapTest, LocatesVariableLengthElementsInTheGlobalHeap) {
  const Heap h = heap({"first image", "2nd", "the third one"});
  auto s = hdf5_vlen_spans(h.file, h.elements, 8, 8);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  ASSERT_TRUE(s->bad.empty());
  EXPECT_EQ(at(h.file, *s, 0), "first image");
  EXPECT_EQ(at(h.file, *s, 1), "2nd");
  EXPECT_EQ(at(h.file, *s, 2), "the third one");
}

TEST(Hdf5HeapTest, ElementsThatCannotBeFoundAreBadSamplesWithWhy) {
  Heap h = heap({"first image", "2nd"});
  h.elements[16 + 12] = 7;  // element 1 names object 7
  put(h.elements, 0, 16);   // element 2: empty
  auto s = hdf5_vlen_spans(h.file, h.elements, 8, 8);
  ASSERT_TRUE(s.is_ok());
  ASSERT_EQ(s->bad.size(), 2u);
  EXPECT_EQ(s->bad[0].first, 1u);
  EXPECT_NE(s->bad[0].second.find("object 7 is not in the global heap collection at offset 8"), std::string::npos);
  EXPECT_NE(s->bad[1].second.find("an empty element"), std::string::npos);
  EXPECT_EQ(at(h.file, *s, 0), "first image");
  for (size_t cut : {size_t{10}, size_t{30}, h.file.size() - 1}) {  // a truncated file: each element bad, no crash
    const std::vector<uint8_t> part(h.file.begin(), h.file.begin() + static_cast<long>(cut));
    auto t = hdf5_vlen_spans(part, std::span(h.elements).first(32), 8, 8);
    ASSERT_TRUE(t.is_ok());
    EXPECT_EQ(t->bad.size(), 2u) << cut;
  }
  EXPECT_FALSE(hdf5_vlen_spans(h.file, std::span(h.elements).first(17), 8, 8).is_ok());
}

TEST(Hdf5HeapTest, FixedLengthElementsLoseTheirPadding) {
  std::vector<uint8_t> file = {'a', 'b', 0, 0, 'c', 0, 'd', 0, 0, 0, 0, 0};
  auto s = hdf5_fixed_spans(file, {0, 4, 8}, 4);
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s->lengths, (std::vector<uint64_t>{2, 3, 0}));
  ASSERT_EQ(s->bad.size(), 1u);
  EXPECT_EQ(s->bad[0].first, 2u);
  EXPECT_FALSE(hdf5_fixed_spans(file, {10}, 4).is_ok());
}

}  // namespace
}  // namespace chute
