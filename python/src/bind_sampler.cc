// The epoch order (chute/order/sampler.h), either kind, as a numpy array: what chute.Loader visits, for layers that
// hand out batches themselves (chute.ray.RemoteLoader gives each actor its batches' source indices); and the shares of
// an interrupted epoch's rest (chute/order/remainder.h), which chute's resume states are checked and merged with.
#include <algorithm>
#include <functional>
#include <memory>
#include <string>

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "chute/engine/loader.h"
#include "chute/engine/loader_order.h"
#include "chute/order/remainder.h"
#include "chute/order/sampler.h"

namespace chute::py {
namespace {

// The rank's source indices of `order` as a numpy array (made without the GIL).
nb::ndarray<nb::numpy, int64_t, nb::ndim<1>> to_array(const std::function<std::unique_ptr<EpochOrder>()>& make) {
  std::unique_ptr<int64_t[]> indices;
  size_t n = 0;
  {
    nb::gil_scoped_release release;
    const std::unique_ptr<EpochOrder> order = make();
    n = static_cast<size_t>(order->size());
    indices = std::make_unique<int64_t[]>(std::max<size_t>(1, n));
    for (size_t k = 0; k < n; ++k) indices[k] = (*order)[static_cast<int64_t>(k)];
  }
  int64_t* data = indices.get();
  nb::capsule owner(indices.release(), [](void* p) noexcept { delete[] static_cast<int64_t*>(p); });
  const size_t shape[1] = {n};
  return nb::ndarray<nb::numpy, int64_t, nb::ndim<1>>(data, 1, shape, owner);
}

}  // namespace

std::vector<EpochSplit> to_splits(const PySplits& splits) {
  std::vector<EpochSplit> out;
  out.reserve(splits.size());
  for (const auto& [world_size, received] : splits) out.push_back({world_size, received});
  return out;
}

void register_sampler(nb::module_& m) {
  m.def(
      "epoch_order",
      [](int64_t dataset_size, bool shuffle, uint64_t seed, uint64_t epoch, int64_t rank, int64_t world_size,
         bool even_split, std::optional<std::vector<int64_t>> shard_sizes, int64_t shard_window,
         const PySplits& splits) {
        if (dataset_size < 0) throw nb::value_error("dataset_size must be >= 0");
        const Shard shard{rank, world_size, even_split};
        const Status st = EpochOrder::check_shard(dataset_size, shard);
        if (!st.is_ok()) throw_status(st);
        std::optional<ShardWindows> windows;
        if (shard_sizes) {
          windows = ShardWindows{std::move(*shard_sizes), shard_window};
          if (const Status bad = windows->check(); !bad.is_ok()) throw_status(bad);
          int64_t total = 0;
          for (int64_t n : windows->shard_sizes) total += n;
          if (total != dataset_size)
            throw nb::value_error(("shard_sizes add up to " + std::to_string(total) + " samples, dataset_size is " +
                                   std::to_string(dataset_size))
                                      .c_str());
        }
        std::shared_ptr<const EpochRemainder> rest;
        if (!splits.empty())
          rest = unwrap(EpochRemainder::create(dataset_size, windows.has_value(), even_split, to_splits(splits)));
        return to_array([&] {
          return windows ? std::make_unique<EpochOrder>(*windows, shuffle, seed, epoch, shard, rest)
                         : std::make_unique<EpochOrder>(dataset_size, shuffle, seed, epoch, shard, rest);
        });
      },
      nb::arg("dataset_size"), nb::arg("shuffle"), nb::arg("seed"), nb::arg("epoch"), nb::arg("rank") = 0,
      nb::arg("world_size") = 1, nb::arg("even_split") = true, nb::arg("shard_sizes") = nb::none(),
      nb::arg("shard_window") = ShardWindows{}.window, nb::arg("splits") = PySplits{},
      "The source indices this rank visits in `epoch`, in order: exactly chute.Loader's (chute/order/sampler.h). "
      "With shard_sizes (Source.shard_sizes()), chute.Loader's order='shards' with that shard_window. With splits "
      "([(world_size, [received per rank]), ...]), this rank's share of what those ranks left of the epoch.");
  m.def(
      "epoch_order",
      [](const std::shared_ptr<Source>& source, const LoaderOptions& options, uint64_t epoch, const PySplits& splits) {
        const LoaderOrder order = unwrap(LoaderOrder::create(*source, options));
        std::shared_ptr<const EpochRemainder> rest;
        if (!splits.empty()) rest = unwrap(order.remainder(to_splits(splits)));
        return to_array([&] { return order.epoch(epoch, rest); });
      },
      nb::arg("source"), nb::arg("options"), nb::arg("epoch"), nb::arg("splits") = PySplits{},
      "The source indices a chute.Loader built with these LoaderOptions over this source visits in `epoch` "
      "(its shuffle, seed, rank, world_size, even_split, order and shard_window; engine/loader_order.h); with "
      "splits, its share of what those ranks left of the epoch (Loader::resume_epoch).");
  m.def(
      "epoch_shares",
      [](int64_t dataset_size, int64_t world_size, bool even_split, const PySplits& splits) {
        if (world_size < 1) throw nb::value_error("world_size must be >= 1");
        // The shares do not depend on how ranks split (contiguous or interleaved), only on how many places.
        const auto rest = unwrap(EpochRemainder::create(dataset_size, false, even_split, to_splits(splits)));
        std::vector<int64_t> shares;
        for (int64_t r = 0; r < world_size; ++r)
          shares.push_back(EpochOrder::rank_size(rest->size(), {r, world_size, even_split}));
        return shares;
      },
      nb::arg("dataset_size"), nb::arg("world_size"), nb::arg("even_split"), nb::arg("splits") = PySplits{},
      "Each rank's samples in the rest of an epoch of dataset_size samples after splits (the whole epoch without), "
      "for world_size ranks; a ValueError naming a split that cannot be.");
}

}  // namespace chute::py
