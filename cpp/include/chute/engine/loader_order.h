// LoaderOrder: the epoch orders a Loader's options describe over its source (shuffle, seed, shard, order,
// shard_window; chute/sampler.h), made in one place for the Loader (start_epoch(epoch)) and for a driver
// that hands out batches itself (chute.ray.RemoteLoader, through chute._native.epoch_order(source,
// options, epoch)), so that both visit the same samples in the same order.
//
// Thread-safety: immutable once made; epoch() may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "chute/base/status.h"
#include "chute/io/source.h"
#include "chute/order/remainder.h"
#include "chute/order/sampler.h"

namespace chute {

struct LoaderOptions;

class LoaderOrder {
 public:
  // Checks the shard (rank, world_size, even_split) against the source and, for order kShards, the
  // source's shards (kInvalidArgument: a source not stored in shards, or shards that do not add up).
  static Result<LoaderOrder> create(const Source& source, const LoaderOptions& options);

  // The source indices this rank visits in `epoch`, in order; with `rest`, this rank's share of what is left
  // of an interrupted epoch (order/remainder.h), split as a whole epoch is.
  std::unique_ptr<EpochOrder> epoch(uint64_t epoch, std::shared_ptr<const EpochRemainder> rest = nullptr) const;

  // What ranks that received `splits` left of an epoch of this order (kInvalidArgument naming a split that
  // cannot be).
  Result<std::shared_ptr<const EpochRemainder>> remainder(const std::vector<EpochSplit>& splits) const;

 private:
  LoaderOrder() = default;

  int64_t size_ = 0;
  bool shuffle_ = false;
  uint64_t seed_ = 0;
  Shard shard_;
  bool by_shards_ = false;
  ShardWindows windows_;  // by_shards_: the source's shard sizes and the window
};

}  // namespace chute
