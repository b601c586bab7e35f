// The epoch order (chute/sampler.h), either kind, as a numpy array: what chute.Loader visits, for layers that hand out
// batches themselves (chute.ray.RemoteLoader gives each actor its batches' source indices).
#include <algorithm>
#include <functional>
#include <memory>
#include <string>

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "chute/engine/loader.h"
#include "chute/engine/loader_order.h"
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

void register_sampler(nb::module_& m) {
  m.def(
      "epoch_order",
      [](int64_t dataset_size, bool shuffle, uint64_t seed, uint64_t epoch, int64_t rank, int64_t world_size,
         bool even_split, std::optional<std::vector<int64_t>> shard_sizes, int64_t shard_window) {
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
        return to_array([&] {
          return windows ? std::make_unique<EpochOrder>(*windows, shuffle, seed, epoch, shard)
                         : std::make_unique<EpochOrder>(dataset_size, shuffle, seed, epoch, shard);
        });
      },
      nb::arg("dataset_size"), nb::arg("shuffle"), nb::arg("seed"), nb::arg("epoch"), nb::arg("rank") = 0,
      nb::arg("world_size") = 1, nb::arg("even_split") = true, nb::arg("shard_sizes") = nb::none(),
      nb::arg("shard_window") = ShardWindows{}.window,
      "The source indices this rank visits in `epoch`, in order: exactly chute.Loader's (chute/sampler.h). "
      "With shard_sizes (Source.shard_sizes()), chute.Loader's order='shards' with that shard_window.");
  m.def(
      "epoch_order",
      [](const std::shared_ptr<Source>& source, const LoaderOptions& options, uint64_t epoch) {
        const LoaderOrder order = unwrap(LoaderOrder::create(*source, options));
        return to_array([&] { return order.epoch(epoch); });
      },
      nb::arg("source"), nb::arg("options"), nb::arg("epoch"),
      "The source indices a chute.Loader built with these LoaderOptions over this source visits in `epoch` "
      "(its shuffle, seed, rank, world_size, even_split, order and shard_window; engine/loader_order.h).");
}

}  // namespace chute::py
