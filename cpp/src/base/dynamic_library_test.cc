#include "base/detail/dynamic_library.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace chute::detail {
namespace {

// A stand-in table, resolved from libm (always there on Linux, never linked by name here).
struct MathApi {
  double (*cos)(double);
  double (*sqrt)(double);
};

LoadedApi<MathApi> load_libm() {
  LoadedApi<MathApi> out;
  SymbolResolver sym(open_library("libm.so.6", &out.why));
  sym(out.api.cos, "cos");
  sym(out.api.sqrt, "sqrt");
  out.ok = sym.missing() == nullptr;
  return out;
}

TEST(DynamicLibraryTest, ALibraryThatCannotBeLoadedSaysWhy) {
  std::string why;
  EXPECT_EQ(open_library("libchute-no-such-library.so", &why), nullptr);
  EXPECT_NE(why.find("libchute-no-such-library.so"), std::string::npos) << why;
  EXPECT_EQ(open_library("libchute-no-such-library.so", nullptr), nullptr);  // no reason asked for
}

TEST(DynamicLibraryTest, OnlyIfLoadedOpensWhatTheProcessHasMappedAndNothingElse) {
  std::string why;
  EXPECT_NE(open_library("libm.so.6", &why), nullptr) << why;
  EXPECT_NE(open_library("libm.so.6", &why, /*only_if_loaded=*/true), nullptr) << why;
  EXPECT_EQ(open_library("libchute-no-such-library.so", &why, /*only_if_loaded=*/true), nullptr);
}

TEST(DynamicLibraryTest, TheResolverFillsTheTableAndNamesTheFirstSymbolMissing) {
  void* libm = open_library("libm.so.6", nullptr);
  ASSERT_NE(libm, nullptr);
  MathApi api{};
  SymbolResolver sym(libm);
  sym(api.cos, "cos");
  sym(api.sqrt, "sqrt");
  EXPECT_EQ(sym.missing(), nullptr);
  EXPECT_DOUBLE_EQ(api.sqrt(16.0), 4.0);
  EXPECT_DOUBLE_EQ(api.cos(0.0), 1.0);

  SymbolResolver partial(libm);
  partial(api.cos, "chute_no_such_symbol");
  partial(api.sqrt, "chute_no_such_symbol_either");
  EXPECT_EQ(api.cos, nullptr);
  ASSERT_NE(partial.missing(), nullptr);
  EXPECT_STREQ(partial.missing(), "chute_no_such_symbol");
}

TEST(DynamicLibraryTest, AFailedLoadIsTriedAgainAndTheFirstTableThatLoadsIsKept) {
  ProcessApi<MathApi> table;
  int attempts = 0;
  auto fails = [&] {
    ++attempts;
    LoadedApi<MathApi> out;
    out.why = "attempt " + std::to_string(attempts) + " failed";
    return out;
  };
  std::string why;
  EXPECT_EQ(table.get(fails, &why), nullptr);
  EXPECT_EQ(why, "attempt 1 failed");
  EXPECT_EQ(table.get(fails, nullptr), nullptr);
  EXPECT_EQ(attempts, 2);  // not kept: tried again

  auto loads = [&] {
    ++attempts;
    return load_libm();
  };
  const MathApi* first = table.get(loads, &why);
  ASSERT_NE(first, nullptr) << why;
  EXPECT_EQ(attempts, 3);
  EXPECT_EQ(table.get(fails, &why), first);  // kept: no further attempt
  EXPECT_EQ(attempts, 3);
  EXPECT_DOUBLE_EQ(first->sqrt(9.0), 3.0);
}

TEST(DynamicLibraryTest, ThreadsRacingForTheTableLoadItOnce) {
  ProcessApi<MathApi> table;
  std::atomic<int> attempts{0};
  auto loads = [&] {
    attempts.fetch_add(1);
    return load_libm();
  };
  std::vector<const MathApi*> got(8, nullptr);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i) threads.emplace_back([&, i] { got[i] = table.get(loads, nullptr); });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(attempts.load(), 1);
  for (const MathApi* api : got) EXPECT_EQ(api, got[0]);
  EXPECT_NE(got[0], nullptr);
}

}  // namespace
}  // namespace chute::detail
