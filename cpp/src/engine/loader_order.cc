#include "chute/engine/loader_order.h"

#include <string>
#include <utility>

#include "chute/engine/loader.h"

namespace chute {

Result<LoaderOrder> LoaderOrder::create(const Source& source, const LoaderOptions& options) {
  CHUTE_RETURN_IF_ERROR(EpochOrder::check_shard(source.size(), options.shard));
  LoaderOrder order;
  order.size_ = source.size();
  order.shuffle_ = options.shuffle;
  order.seed_ = options.seed;
  order.shard_ = options.shard;
  order.by_shards_ = options.order == SampleOrder::kShards;
  order.windows_.window = options.shard_window;
  if (!order.by_shards_) return order;
  order.windows_.shard_sizes = source.shard_sizes();
  if (order.windows_.shard_sizes.empty())
    return invalid_argument("order='shards' reads a source shard by shard, and this " + source_kind(source) +
                            " is not stored in shards (chute pack's shards or tar files are): use "
                            "order='sample', or pack the source with `chute pack`");
  CHUTE_RETURN_IF_ERROR(order.windows_.check());
  int64_t total = 0;
  for (int64_t n : order.windows_.shard_sizes) total += n;
  if (total != source.size())
    return invalid_argument("the " + source_kind(source) + "'s shards hold " + std::to_string(total) +
                            " samples, the source " + std::to_string(source.size()) + " (a bug in that source)");
  return order;
}

std::unique_ptr<EpochOrder> LoaderOrder::epoch(uint64_t epoch, std::shared_ptr<const EpochRemainder> rest) const {
  // Both orders are pure functions of (seed, epoch, shard): a resumed epoch is the same order.
  if (by_shards_) return std::make_unique<EpochOrder>(windows_, shuffle_, seed_, epoch, shard_, std::move(rest));
  return std::make_unique<EpochOrder>(size_, shuffle_, seed_, epoch, shard_, std::move(rest));
}

Result<std::shared_ptr<const EpochRemainder>> LoaderOrder::remainder(const std::vector<EpochSplit>& splits) const {
  return EpochRemainder::create(size_, by_shards_, shard_.even_split, splits);
}

}  // namespace chute
