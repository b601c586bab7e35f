#include <gtest/gtest.h>

#include "chute/base/option_range.h"
#include "chute/engine/loader.h"
#include "chute/engine/processor.h"
#include "chute/gpu/delivery.h"

namespace chute {
namespace {

TEST(OptionRangeTest, MessagesNameTheOptionTheRangeAndTheValue) {
  EXPECT_EQ(LoaderOptions::kBatchSize.message("0"), "batch_size must be an int in [1, 2**63 - 1], got 0");
  EXPECT_EQ(LoaderOptions::kNumThreads.accepts(), "an int in [1, 2**31 - 1] or 'auto'");
  EXPECT_EQ(LoaderOptions::kMaxThreads.accepts(), "an int in [1, 2**31 - 1] or None");
  EXPECT_EQ(LoaderOptions::kMaxMemory.accepts(), "an int in [1, 2**64 - 1]");
  EXPECT_EQ(DeliveryOptions::kDevicePrefetch.accepts(), "an int in [1, 2147483646]");
  EXPECT_TRUE(LoaderOptions::kNumThreads.check(0).is_ok());  // 0 is 'auto'
  EXPECT_FALSE(LoaderOptions::kBatchSize.check(int64_t{0}).is_ok());
  EXPECT_FALSE(DeliveryOptions::kDevicePrefetch.check(int{0x7fffffff}).is_ok());
  EXPECT_TRUE(LoaderOptions::kSeed.check(~uint64_t{0}).is_ok());
}

TEST(LoaderOptionsTest, DefaultsAreValid) {
  EXPECT_TRUE(LoaderOptions{}.validate().is_ok());
  EXPECT_TRUE(DecodeOptions{}.validate().is_ok());
  EXPECT_TRUE(DeliveryOptions{}.validate().is_ok());
}

TEST(LoaderOptionsTest, ValidateNamesTheFirstBadOption) {
  auto message = [](const LoaderOptions& o) { return o.validate().message(); };
  EXPECT_EQ(message({.batch_size = 0}), "batch_size must be an int in [1, 2**63 - 1], got 0");
  EXPECT_EQ(message({.num_threads = -1}), "num_threads must be an int in [1, 2**31 - 1] or 'auto', got -1");
  EXPECT_EQ(message({.num_threads = 4, .max_threads = 2}), "num_threads=4 exceeds max_threads=2");
  EXPECT_EQ(message({.prefetch = -3}), "prefetch must be an int in [1, 2**31 - 1] or 'auto', got -3");
  EXPECT_EQ(message({.max_memory = 0}), "max_memory must be an int in [1, 2**64 - 1], got 0");
  EXPECT_EQ(message({.shard_window = 0}), "shard_window must be an int in [1, 2**63 - 1], got 0");
  LoaderOptions o;
  o.decode.max_pixels = 0;
  EXPECT_EQ(message(o), "max_pixels must be an int in [1, 2**63 - 1], got 0");
  o = {};
  o.cpu_affinity = std::vector<int>{-1};
  EXPECT_EQ(message(o), "cpu_affinity: no CPU -1");
  o = {};
  o.collect_stats = false;  // auto mode tunes from the statistics
  EXPECT_EQ(o.validate().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DeliveryOptions{.device_prefetch = 0}.validate().message(),
            "device_prefetch must be an int in [1, 2147483646], got 0");
}

TEST(LoaderOptionsTest, ChoicesParseAndName) {
  EXPECT_EQ(parse_error_policy("skip").value(), ErrorPolicy::kSkip);
  EXPECT_EQ(parse_error_policy("x").status().message(), "on_error must be 'raise' or 'skip', got 'x'");
  EXPECT_STREQ(error_policy_name(ErrorPolicy::kRaise), "raise");
  EXPECT_EQ(parse_dtype("bfloat16").value(), DType::kBFloat16);
  EXPECT_STREQ(dtype_name(DType::kFloat16), "float16");
  EXPECT_FALSE(parse_dtype("int8").is_ok());
}

}  // namespace
}  // namespace chute
