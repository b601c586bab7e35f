#include "chute/base/rng.h"

#include <gtest/gtest.h>

#include <set>

namespace chute {
namespace {

// Known-answer vectors from Random123's kat_vectors for philox4x32_10.
TEST(PhiloxTest, MatchesRandom123KnownAnswers) {
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(SampleRngTest, SameKeyGivesSameStreamAndKeysDiffer) {
  SampleRng a(7, 3, 42), b(7, 3, 42), other_epoch(7, 4, 42), other_index(7, 3, 43), other_seed(8, 3, 42);
  for (int i = 0; i < 20; ++i) {
    const uint32_t v = a.next_u32();
    EXPECT_EQ(v, b.next_u32());
    EXPECT_NE(v, other_epoch.next_u32());
    EXPECT_NE(v, other_index.next_u32());
    EXPECT_NE(v, other_seed.next_u32());
  }
}

TEST(SampleRngTest, UniformAndIntegerStayInRange) {
  SampleRng rng(1, 0, 0);
  std::set<int64_t> seen;
  double sum = 0;
  for (int i = 0; i < 20000; ++i) {
    const double u = rng.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    const int64_t k = rng.integer(-3, 3);
    ASSERT_GE(k, -3);
    ASSERT_LE(k, 3);
    seen.insert(k);
  }
  EXPECT_EQ(seen.size(), 7u);
  EXPECT_NEAR(sum / 20000, 0.5, 0.02);
  EXPECT_EQ(rng.integer(5, 5), 5);
}

}  // namespace
}  // namespace chute
