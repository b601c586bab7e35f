#include "chute/formats/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string_view>
#include <vector>

#include "formats/detail/crc32c_impl.h"

namespace chute {
namespace {

std::span<const uint8_t> as_bytes(std::string_view s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

// RFC 3720, appendix B.4, and the classic check value of "123456789".
TEST(Crc32cTest, MatchesTheKnownVectors) {
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xff), up(32), down(32);
  for (int i = 0; i < 32; ++i) up[i] = static_cast<uint8_t>(i), down[i] = static_cast<uint8_t>(31 - i);
  for (auto* f : {&detail::crc32c_table, &crc32c}) {
    EXPECT_EQ(f(as_bytes("123456789"), 0), 0xE3069283u);
    EXPECT_EQ(f(zeros, 0), 0x8A9136AAu);
    EXPECT_EQ(f(ones, 0), 0x62A8AB43u);
    EXPECT_EQ(f(up, 0), 0x46DD794Eu);
    EXPECT_EQ(f(down, 0), 0x113FDB5Cu);
    EXPECT_EQ(f({}, 0), 0u);
  }
}

TEST(Crc32cTest, HardwareAndTableAgreeAtEveryLengthAndSplit) {
  if (!detail::crc32c_hardware_available()) GTEST_SKIP() << "no SSE4.2 crc32 instruction here";
  std::mt19937 rng(7);
  std::vector<uint8_t> data(1000);
  for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
  for (size_t n = 0; 3 + n <= data.size(); n += 37) {
    const std::span<const uint8_t> s(data.data() + 3, n);  // unaligned on purpose
    EXPECT_EQ(detail::crc32c_hardware(s, 0), detail::crc32c_table(s, 0)) << n;
    // Continuing from a prefix's CRC gives the whole span's.
    EXPECT_EQ(crc32c(s.subspan(n / 3), crc32c(s.first(n / 3))), crc32c(s)) << n;
  }
}

// TFRecord's mask (tensorflow/core/lib/hash/crc32c.h); the values were computed by a bit-at-a-time CRC in
// Python, independent of both implementations here.
TEST(Crc32cTest, MaskIsTensorFlows) {
  EXPECT_EQ(mask_crc32c(0), 0xa282ead8u);
  const std::vector<uint8_t> length0(8, 0), length5 = {5, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(mask_crc32c(crc32c(length0)), 0x07980329u);  // the header of an empty record
  EXPECT_EQ(mask_crc32c(crc32c(length5)), 0x3e04b2eau);
  EXPECT_EQ(mask_crc32c(crc32c(as_bytes("hello"))), 0x191c1fbbu);
}

}  // namespace
}  // namespace chute
