// LMDB files written by liblmdb itself are read in python/tests/test_formats.py (py-lmdb writes them); here
// the walker meets files built page by page: a minimal valid one, then its damaged variants.
#include "chute/formats/lmdb_file.h"

#include <gtest/gtest.h>

#include <cstring>

namespace chute {
namespace {

constexpr size_t kPage = 4096;

template <typename T>
void put(std::vector<uint8_t>& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
}

// Four pages: two metas, a leaf root (page 2) with one small value and one big one in an overflow page (3).
std::vector<uint8_t> tiny_lmdb(uint64_t txn0 = 1, uint64_t txn1 = 2) {
  std::vector<uint8_t> f(4 * kPage, 0);
  for (uint64_t m = 0; m < 2; ++m) {
    const size_t p = m * kPage;
    put<uint64_t>(f, p, m);
    put<uint16_t>(f, p + 10, 0x08);  // P_META
    put<uint32_t>(f, p + 16, 0xBEEFC0DE);
    put<uint32_t>(f, p + 20, 1);
    put<uint32_t>(f, p + 40, kPage);   // free db's md_pad: the page size
    put<uint64_t>(f, p + 88 + 32, 2);  // main db entries
    put<uint64_t>(f, p + 88 + 40, 2);  // main db root
    put<uint64_t>(f, p + 136, 3);      // last page
    put<uint64_t>(f, p + 144, m == 0 ? txn0 : txn1);
    put<uint64_t>(f, p + 40 + 40, ~uint64_t{0});  // free db: empty
  }
  const size_t leaf = 2 * kPage;
  put<uint64_t>(f, leaf, 2);
  put<uint16_t>(f, leaf + 10, 0x02);  // P_LEAF
  // node 0 at 4000: key "a", value "hello"; node 1 at 3900: key "b", big value in page 3
  put<uint16_t>(f, leaf + 12, 16 + 4);
  put<uint16_t>(f, leaf + 14, 3900);
  put<uint16_t>(f, leaf + 16, 4000);
  put<uint16_t>(f, leaf + 18, 3900);
  put<uint16_t>(f, leaf + 4000, 5);
  put<uint16_t>(f, leaf + 4006, 1);
  f[leaf + 4008] = 'a';
  std::memcpy(f.data() + leaf + 4009, "hello", 5);
  put<uint16_t>(f, leaf + 3900, 5000);  // data size lo
  put<uint16_t>(f, leaf + 3904, 0x01);  // F_BIGDATA
  put<uint16_t>(f, leaf + 3906, 1);
  f[leaf + 3908] = 'b';
  put<uint64_t>(f, leaf + 3909, 3);
  const size_t over = 3 * kPage;
  put<uint64_t>(f, over, 3);
  put<uint16_t>(f, over + 10, 0x04);  // P_OVERFLOW
  put<uint32_t>(f, over + 12, 1);
  f.resize(5 * kPage);  // the value runs into the next page: two overflow pages
  put<uint32_t>(f, over + 12, 2);
  for (size_t m = 0; m < 2; ++m) put<uint64_t>(f, m * kPage + 136, 4);
  return f;
}

TEST(LmdbFileTest, ReadsSmallAndOverflowValuesInKeyOrder) {
  const auto f = tiny_lmdb();
  auto db = read_lmdb(f, "data.mdb");
  ASSERT_TRUE(db.is_ok()) << db.status().to_string();
  ASSERT_EQ(db->records.size(), 2u);
  EXPECT_EQ(db->page_size, kPage);
  EXPECT_EQ(db->txnid, 2u);
  EXPECT_EQ(db->records[0].key[0], 'a');
  EXPECT_EQ(db->records[0].value_offset, 2 * kPage + 4009);
  EXPECT_EQ(db->records[0].value_size, 5u);
  EXPECT_EQ(db->records[1].value_offset, 3 * kPage + 16);
  EXPECT_EQ(db->records[1].value_size, 5000u);
}

TEST(LmdbFileTest, DamageIsAnErrorNamingTheFile) {
  const auto good = tiny_lmdb();
  for (size_t cut : {size_t{0}, size_t{100}, kPage + 100, 3 * kPage, 4 * kPage + 10}) {
    auto r = read_lmdb(std::span(good).first(cut), "data.mdb");
    ASSERT_FALSE(r.is_ok()) << cut;
    EXPECT_EQ(r.status().message().rfind("data.mdb", 0), 0u) << r.status().message();
  }
  auto loop = good;  // the root's only node turned into a branch to itself
  put<uint16_t>(loop, 2 * kPage + 10, 0x01);
  put<uint16_t>(loop, 2 * kPage + 12, 16 + 2);
  put<uint16_t>(loop, 2 * kPage + 4000, 2);
  put<uint16_t>(loop, 2 * kPage + 4002, 0);
  put<uint16_t>(loop, 2 * kPage + 4004, 0);
  EXPECT_NE(read_lmdb(loop, "x").status().message().find("loop"), std::string::npos);
  auto outside = good;  // a node offset inside the page header
  put<uint16_t>(outside, 2 * kPage + 16, 8);
  EXPECT_FALSE(read_lmdb(outside, "x").is_ok());
  auto big = good;  // an overflow value claiming more than its pages hold
  put<uint16_t>(big, 2 * kPage + 3902, 1);
  EXPECT_FALSE(read_lmdb(big, "x").is_ok());
  auto magic = good;
  put<uint32_t>(magic, 16, 0);
  EXPECT_NE(read_lmdb(magic, "x").status().message().find("not an LMDB data file"), std::string::npos);
  auto dupsort = good;
  for (size_t m = 0; m < 2; ++m) put<uint16_t>(dupsort, m * kPage + 88 + 4, 0x04);
  EXPECT_EQ(read_lmdb(dupsort, "x").status().code(), StatusCode::kUnsupported);
}

TEST(LmdbFileTest, TheNewerMetaPageWins) {
  auto f = tiny_lmdb(5, 4);  // meta 0 is newer: it says the database is empty
  put<uint64_t>(f, 88 + 40, ~uint64_t{0});
  put<uint64_t>(f, 88 + 32, 0);
  auto db = read_lmdb(f, "x");
  ASSERT_TRUE(db.is_ok()) << db.status().to_string();
  EXPECT_TRUE(db->records.empty());
  EXPECT_EQ(db->txnid, 5u);
}

}  // namespace
}  // namespace chute
