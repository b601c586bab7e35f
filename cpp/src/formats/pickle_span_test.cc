#include "chute/formats/pickle_span.h"

#include <gtest/gtest.h>

#include <string>

namespace chute {
namespace {

using Type = PickleValue::Type;

std::span<const uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// What CPython 3.11's pickle.dumps writes (copied from `pickle.dumps(obj, protocol=N)`).
TEST(PickleSpanTest, ReadsATupleOfBytesAndIntInEveryProtocol) {
  // (b'\xff\xd8abc', 7), protocols 3, 4 and 5, and 2 from Python 2 (a str: SHORT_BINSTRING).
  const std::string p3 = std::string("\x80\x03\x43\x05\xff\xd8\x61\x62\x63\x71\x00\x4b\x07\x86\x71\x01\x2e", 17);
  const std::string p4 = std::string(
      "\x80\x04\x95\x0d\x00\x00\x00\x00\x00\x00\x00\x43\x05\xff\xd8\x61\x62\x63\x94\x4b\x07\x86\x94\x2e", 24);
  const std::string p2_py2 = std::string("\x80\x02\x55\x05\xff\xd8\x61\x62\x63\x71\x00\x4b\x07\x86\x71\x01\x2e", 17);
  for (const std::string* p : {&p3, &p4, &p2_py2}) {
    auto v = parse_pickle(as_bytes(*p));
    ASSERT_TRUE(v.is_ok()) << v.status().to_string();
    ASSERT_EQ(v->type, Type::kTuple);
    ASSERT_EQ(v->items.size(), 2u);
    EXPECT_EQ(v->items[0].type, Type::kBytes);
    EXPECT_EQ(v->items[0].text(), std::string("\xff\xd8"
                                              "abc",
                                              5));
    EXPECT_EQ(v->items[0].bytes.data(), reinterpret_cast<const uint8_t*>(p->data()) + p->find("\xff\xd8"));
    EXPECT_EQ(v->items[1].integer, 7);
  }
}

TEST(PickleSpanTest, ReadsDictsListsAndLargeIntegers) {
  // {'image': b'xy', 'label': 1000, 'neg': -5, 'big': 2**40, 'f': 1.5, 'n': None} with protocol 4
  const std::string d = std::string(
      "\x80\x04\x95\x48\x00\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x05\x69\x6d\x61\x67\x65\x94\x43\x02\x78\x79\x94\x8c"
      "\x05\x6c\x61\x62\x65\x6c\x94\x4d\xe8\x03\x8c\x03\x6e\x65\x67\x94\x4a\xfb\xff\xff\xff\x8c\x03\x62\x69\x67\x94\x8a"
      "\x06\x00\x00\x00\x00\x00\x01\x8c\x01\x66\x94\x47\x3f\xf8\x00\x00\x00\x00\x00\x00\x8c\x01\x6e\x94\x4e\x75\x2e",
      83);
  auto v = parse_pickle(as_bytes(d));
  ASSERT_TRUE(v.is_ok()) << v.status().to_string();
  ASSERT_EQ(v->type, Type::kDict);
  EXPECT_EQ(v->find("image")->text(), "xy");
  EXPECT_EQ(v->find("label")->integer, 1000);
  EXPECT_EQ(v->find("neg")->integer, -5);
  EXPECT_EQ(v->find("big")->integer, int64_t{1} << 40);
  EXPECT_EQ(v->find("f")->type, Type::kFloat);
  EXPECT_EQ(v->find("n")->type, Type::kNone);
  EXPECT_EQ(v->find("missing"), nullptr);
  // [b'0', b'1', b'2'] as folder2lmdb's __keys__, protocol 4.
  const std::string keys = std::string(
      "\x80\x04\x95\x11\x00\x00\x00\x00\x00\x00\x00\x5d\x94\x28\x43\x01\x30\x94\x43\x01\x31\x94\x43\x01\x32\x94\x65"
      "\x2e",
      28);
  auto k = parse_pickle(as_bytes(keys));
  ASSERT_TRUE(k.is_ok()) << k.status().to_string();
  ASSERT_EQ(k->type, Type::kList);
  ASSERT_EQ(k->items.size(), 3u);
  EXPECT_EQ(k->items[2].text(), "2");
}

TEST(PickleSpanTest, MemoReferencesAreFollowed) {
  // (b'ab', b'ab') where the second is the first by the memo: protocol 3 writes BINGET.
  const std::string p = std::string("\x80\x03\x43\x02\x61\x62\x71\x00\x68\x00\x86\x71\x01\x2e", 14);
  auto v = parse_pickle(as_bytes(p));
  ASSERT_TRUE(v.is_ok()) << v.status().to_string();
  EXPECT_EQ(v->items[1].text(), "ab");
}

TEST(PickleSpanTest, RefusesCodeAndNamesProtocolTwoBytes) {
  // bytes pickled by Python 3 with protocol 2: _codecs.encode('\xff', 'latin1')
  const std::string p2 = std::string(
      "\x80\x02\x63\x5f\x63\x6f\x64\x65\x63\x73\x0a\x65\x6e\x63\x6f\x64\x65\x0a\x71\x00\x58\x02\x00\x00\x00\xc3\xbf\x71"
      "\x01\x58\x06\x00\x00\x00\x6c\x61\x74\x69\x6e\x31\x71\x02\x86\x71\x03\x52\x71\x04\x2e",
      49);
  auto v = parse_pickle(as_bytes(p2));
  ASSERT_EQ(v.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(v.status().message().find("protocol 3 or later"), std::string::npos) << v.status().message();
  const std::string os_system = std::string(
      "\x80\x04\x95\x14\x00\x00\x00\x00\x00\x00\x00\x8c\x05\x70\x6f\x73\x69\x78\x94\x8c\x06\x73\x79\x73\x74\x65\x6d\x94"
      "\x93\x94\x8c\x02\x69\x64\x85\x52\x2e",
      37);
  EXPECT_EQ(parse_pickle(as_bytes(os_system)).status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(parse_pickle(as_bytes(std::string("\x80\x01K\x01.", 5))).status().code(), StatusCode::kUnsupported);
}

TEST(PickleSpanTest, TruncatedAndHostilePicklesAreErrors) {
  const std::string p4 = std::string(
      "\x80\x04\x95\x0d\x00\x00\x00\x00\x00\x00\x00\x43\x05\xff\xd8\x61\x62\x63\x94\x4b\x07\x86\x94\x2e", 24);
  for (size_t cut = 0; cut < p4.size(); ++cut) EXPECT_FALSE(parse_pickle(as_bytes(p4.substr(0, cut))).is_ok()) << cut;
  EXPECT_FALSE(parse_pickle(as_bytes(std::string("\x80\x04"
                                                 "B\xff\xff\xff\x7f"
                                                 "abc.",
                                                 10)))
                   .is_ok());                                                      // a length past the end
  EXPECT_FALSE(parse_pickle(as_bytes(std::string("\x80\x04\x86.", 4))).is_ok());   // TUPLE2 of nothing
  EXPECT_FALSE(parse_pickle(as_bytes(std::string("\x80\x04h\x05.", 5))).is_ok());  // a memo key never stored
  // Lists of four copies of the last list, memoized, 30 levels deep (4^30 values): refused as it grows.
  std::string bomb("\x80\x04]\x94", 4);
  for (int level = 0; level < 30; ++level) {
    bomb += '(';
    for (int k = 0; k < 4; ++k) bomb += std::string("h") + static_cast<char>(level);
    bomb += "l\x94";
  }
  bomb += '.';
  // A million nested tuples (one byte each): refused, not a stack overflow when the tree is freed.
  std::string deep("\x80\x04)", 3);
  deep += std::string(1000000, '\x85');
  deep += '.';
  EXPECT_EQ(parse_pickle(as_bytes(deep)).status().code(), StatusCode::kUnsupported);
  auto refused = parse_pickle(as_bytes(bomb));
  ASSERT_EQ(refused.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(refused.status().message().find("memo"), std::string::npos) << refused.status().message();
}

}  // namespace
}  // namespace chute
