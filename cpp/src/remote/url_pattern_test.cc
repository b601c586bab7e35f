#include "chute/remote/url_pattern.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace chute {
namespace {

using Names = std::vector<std::string>;

Names expand(const std::string& pattern) {
  auto r = expand_braces(pattern);
  EXPECT_TRUE(r.is_ok()) << pattern << ": " << r.status().to_string();
  return r.is_ok() ? r.value() : Names{};
}

std::string expand_error(const std::string& pattern, size_t max = kMaxBraceExpansions) {
  auto r = expand_braces(pattern, max);
  EXPECT_FALSE(r.is_ok()) << pattern;
  if (r.is_ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("'" + pattern + "'"), std::string::npos) << r.status().message();
  return r.status().message();
}

TEST(BraceTest, ListsAndNesting) {
  EXPECT_EQ(expand("a{b,c}d"), (Names{"abd", "acd"}));
  EXPECT_EQ(expand("{a,b}{1,2}"), (Names{"a1", "a2", "b1", "b2"}));
  EXPECT_EQ(expand("x{a,{b,c}d,}y"), (Names{"xay", "xbdy", "xcdy", "xy"}));
  EXPECT_EQ(expand("plain"), (Names{"plain"}));
  EXPECT_EQ(expand("s3://b/{train,val}/part-{0..1}.tar"), (Names{"s3://b/train/part-0.tar", "s3://b/train/part-1.tar",
                                                                 "s3://b/val/part-0.tar", "s3://b/val/part-1.tar"}));
}

TEST(BraceTest, RangesLikeBash) {
  auto padded = expand("train-{0000..0127}.tar");
  ASSERT_EQ(padded.size(), 128u);
  EXPECT_EQ(padded.front(), "train-0000.tar");
  EXPECT_EQ(padded[9], "train-0009.tar");
  EXPECT_EQ(padded.back(), "train-0127.tar");
  EXPECT_EQ(expand("{8..11}"), (Names{"8", "9", "10", "11"}));  // no leading zero: no padding
  EXPECT_EQ(expand("{08..10}"), (Names{"08", "09", "10"}));     // padded to the wider end
  EXPECT_EQ(expand("{3..1}"), (Names{"3", "2", "1"}));          // descending
  EXPECT_EQ(expand("{0..10..5}"), (Names{"0", "5", "10"}));     // a step
  EXPECT_EQ(expand("{10..0..-5}"), (Names{"10", "5", "0"}));    // bash takes the step's magnitude
  EXPECT_EQ(expand("{-1..1}"), (Names{"-1", "0", "1"}));
  EXPECT_EQ(expand("{a..c}"), (Names{"a", "b", "c"}));
  EXPECT_EQ(expand("{7..7}"), (Names{"7"}));
}

TEST(BraceTest, EscapesAreKeptForTheGlobStage) {
  EXPECT_EQ(expand("a\\{b\\}"), (Names{"a\\{b\\}"}));
  EXPECT_EQ(unescape_pattern("a\\{b\\}"), "a{b}");
  EXPECT_EQ(expand("{a\\,b,c}"), (Names{"a\\,b", "c"}));
}

TEST(BraceTest, ErrorsNameThePattern) {
  EXPECT_NE(expand_error("a{b,c").find("never closed"), std::string::npos);
  EXPECT_NE(expand_error("a}b").find("no '{'"), std::string::npos);
  EXPECT_NE(expand_error("a{}b").find("empty"), std::string::npos);
  EXPECT_NE(expand_error("{abc}").find("no ',' or '..'"), std::string::npos);
  EXPECT_NE(expand_error("{1..b}").find("bad range"), std::string::npos);
  EXPECT_NE(expand_error("{1..2..0}").find("step of 0"), std::string::npos);
  EXPECT_NE(expand_error("{1..2..3..4}").find("bad range"), std::string::npos);
  EXPECT_NE(expand_error("{1..99999999999999999999}").find("bad range"), std::string::npos);
  EXPECT_NE(expand_error("x\\").find("lone backslash"), std::string::npos);
  EXPECT_NE(expand_error("{a,{b}").find("never closed"), std::string::npos);
}

TEST(BraceTest, HugeExpansionsAreRefused) {
  EXPECT_NE(expand_error("{0..99999999}").find("more than 1000000"), std::string::npos);
  // Each group is small; their product is not.
  EXPECT_NE(expand_error("{0..999}{0..999}{0..9}").find("more than 1000000"), std::string::npos);
  EXPECT_NE(expand_error("{0..4611686018427387904}").find("1000000"), std::string::npos);
  EXPECT_NE(expand_error("{a,b,c}", 2).find("more than 2"), std::string::npos);
  EXPECT_EQ(expand_braces("{0..999}{0..999}").value().size(), 1'000'000u);  // exactly the limit
}

TEST(GlobTest, StarDoesNotCrossSlash) {
  EXPECT_TRUE(match_glob("train-*.tar", "train-0001.tar"));
  EXPECT_TRUE(match_glob("*", ""));
  EXPECT_TRUE(match_glob("a*b*c", "axxbyyc"));
  EXPECT_FALSE(match_glob("a*b*c", "axxbyy"));
  EXPECT_FALSE(match_glob("data/*.tar", "data/sub/x.tar"));
  EXPECT_TRUE(match_glob("data/*/x.tar", "data/sub/x.tar"));
  EXPECT_FALSE(match_glob("*", "a/b"));
  EXPECT_TRUE(match_glob("*/*", "a/b"));
  EXPECT_TRUE(match_glob("**", "ab"));
}

TEST(GlobTest, QuestionClassesAndEscapes) {
  EXPECT_TRUE(match_glob("part-?.tar", "part-7.tar"));
  EXPECT_FALSE(match_glob("part-?.tar", "part-17.tar"));
  EXPECT_FALSE(match_glob("a?b", "a/b"));
  EXPECT_TRUE(match_glob("part-[0-3].tar", "part-2.tar"));
  EXPECT_FALSE(match_glob("part-[0-3].tar", "part-5.tar"));
  EXPECT_TRUE(match_glob("part-[!0-3].tar", "part-5.tar"));
  EXPECT_TRUE(match_glob("part-[^0-3].tar", "part-5.tar"));
  EXPECT_FALSE(match_glob("part-[!0-3].tar", "part-1.tar"));
  EXPECT_TRUE(match_glob("[]x]", "]"));
  EXPECT_TRUE(match_glob("[ab]c", "bc"));
  EXPECT_FALSE(match_glob("a[/]b", "a/b"));
  EXPECT_TRUE(match_glob("a\\*b", "a*b"));
  EXPECT_FALSE(match_glob("a\\*b", "axb"));
  EXPECT_TRUE(match_glob("a\\[1]", "a[1]"));
}

TEST(GlobTest, HasGlobPrefixAndErrors) {
  EXPECT_TRUE(has_glob("a/*.tar"));
  EXPECT_TRUE(has_glob("a?"));
  EXPECT_TRUE(has_glob("a[1]"));
  EXPECT_FALSE(has_glob("a\\*b"));
  EXPECT_FALSE(has_glob("plain/key"));
  EXPECT_EQ(glob_prefix("data/train-*.tar"), "data/train-");
  EXPECT_EQ(glob_prefix("data/a\\*b/[0-9]"), "data/a*b/");
  EXPECT_EQ(glob_prefix("nothing"), "nothing");
  EXPECT_TRUE(check_glob("a/[0-9]*").is_ok());
  const Status open = check_glob("a/[0-9");
  ASSERT_FALSE(open.is_ok());
  EXPECT_NE(open.message().find("'a/[0-9'"), std::string::npos);
  EXPECT_NE(open.message().find("never closed"), std::string::npos);
  EXPECT_FALSE(check_glob("a\\").is_ok());
  EXPECT_FALSE(match_glob("a/[0-9", "a/[0-9"));  // malformed: matches nothing
}

}  // namespace
}  // namespace chute

namespace chute {
namespace {

// Mutated patterns (a fixed seed): expansion, glob checks and matching return or fail cleanly, and the cap
// holds. cpp/fuzz/url_pattern_fuzz.cc explores further under sanitizers.
TEST(BraceTest, MutatedPatternsNeverCrash) {
  const std::string seeds[] = {"s3://b/x-{000..120}.tar", "a{b,{c,d}e,}{1..9..2}", "d/[!a-c]*/?\\[1]"};
  uint64_t state = 987;
  const auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(state >> 33);
  };
  static constexpr char kAlphabet[] = "{},.[]!^-*?\\/09az";
  for (int i = 0; i < 20000; ++i) {
    std::string p = seeds[next() % 3];
    for (int m = next() % 4; m >= 0 && !p.empty(); --m) {
      const size_t at = next() % p.size();
      if (next() % 2) {
        p.erase(at, 1 + next() % 3);
      } else {
        p.insert(at, 1, kAlphabet[next() % (sizeof(kAlphabet) - 1)]);
      }
    }
    auto names = expand_braces(p, 5000);
    if (names.is_ok()) EXPECT_LE(names->size(), 5000u) << p;
    if (check_glob(p).is_ok()) {
      (void)match_glob(p, "d/x/y[1]");
      (void)glob_prefix(p);
    }
  }
}

}  // namespace
}  // namespace chute
