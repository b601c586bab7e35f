#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <utility>

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "chute/engine/loader.h"
#include "chute/gpu/numa.h"
#include "fs_path.h"

namespace chute::py {

Pipeline make_pipeline(const nb::list& transforms) {
  std::vector<Transform> list;
  for (nb::handle t : transforms) {
    if (nb::isinstance<RandomResizedCrop>(t))
      list.emplace_back(nb::cast<RandomResizedCrop>(t));
    else if (nb::isinstance<Resize>(t))
      list.emplace_back(nb::cast<Resize>(t));
    else if (nb::isinstance<CenterCrop>(t))
      list.emplace_back(nb::cast<CenterCrop>(t));
    else if (nb::isinstance<RandomHorizontalFlip>(t))
      list.emplace_back(nb::cast<RandomHorizontalFlip>(t));
    else if (nb::isinstance<Normalize>(t))
      list.emplace_back(nb::cast<Normalize>(t));
    else
      throw nb::type_error("not a native transform");
  }
  return unwrap(Pipeline::create(std::move(list)));
}

namespace {

// A host copy of a batch's labels in its own allocation, owned by the returned capsule.
std::pair<int64_t*, nb::capsule> copied_labels(const int64_t* labels, size_t n) {
  auto copy = std::make_unique<int64_t[]>(std::max<size_t>(n, 1));
  std::memcpy(copy.get(), labels, n * sizeof(int64_t));
  int64_t* data = copy.get();
  nb::capsule owner(copy.release(),
                    [](void* p) noexcept { std::default_delete<int64_t[]>()(static_cast<int64_t*>(p)); });
  return {data, std::move(owner)};
}

}  // namespace

nb::tuple batch_tensors(void* images, int64_t* labels, int64_t size, const Loader& loader, DType out_dtype,
                        const std::function<nb::capsule()>& owner, int device_type, int device_id, bool copy_labels) {
  const LoaderOptions& o = loader.options();
  const size_t n = static_cast<size_t>(size), h = loader.out_height(), w = loader.out_width();
  const size_t shape[4] = {n, 3, h, w};
  int64_t strides[4];
  if (o.output.layout == Layout::kNCHW) {
    strides[0] = static_cast<int64_t>(3 * h * w), strides[1] = static_cast<int64_t>(h * w);
    strides[2] = static_cast<int64_t>(w), strides[3] = 1;
  } else {
    strides[0] = static_cast<int64_t>(3 * h * w), strides[1] = 1;
    strides[2] = static_cast<int64_t>(3 * w), strides[3] = 3;
  }
  nb::dlpack::dtype dtype = nb::dtype<uint8_t>();
  switch (out_dtype) {
    case DType::kUInt8:
      break;
    case DType::kFloat32:
      dtype = nb::dtype<float>();
      break;
    case DType::kFloat16:
      dtype = {static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
      break;
    case DType::kBFloat16:
      dtype = {static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1};
      break;
  }
  nb::ndarray<nb::pytorch> image_array(images, 4, shape, owner(), strides, dtype, device_type, device_id);
  const size_t label_shape[1] = {n};
  if (copy_labels) {
    auto [data, label_owner] = copied_labels(labels, n);
    nb::ndarray<nb::pytorch, int64_t> label_array(data, 1, label_shape, label_owner, nullptr, nb::dtype<int64_t>(),
                                                  device_type, device_id);
    return nb::make_tuple(image_array, label_array);
  }
  nb::ndarray<nb::pytorch, int64_t> label_array(labels, 1, label_shape, owner(), nullptr, nb::dtype<int64_t>(),
                                                device_type, device_id);
  return nb::make_tuple(image_array, label_array);
}

namespace {

// The batch's image buffer stays alive while the image tensor does (its capsule holds a reference); the
// labels are copied out (a batch of int64), so keeping them costs their own bytes only.
nb::capsule owner_of(const std::shared_ptr<Batch>& batch) {
  return nb::capsule(new std::shared_ptr<Batch>(batch),
                     [](void* p) noexcept { delete static_cast<std::shared_ptr<Batch>*>(p); });
}

nb::tuple to_tensors(const std::shared_ptr<Batch>& batch, const Loader& loader) {
  return batch_tensors(
      batch->images(), batch->labels(), batch->size(), loader, loader.options().output.dtype,
      [&] { return owner_of(batch); }, nb::device::cpu::value, 0, /*copy_labels=*/true);
}

nb::object error_tuple(const FailedSample& e) {
  return nb::make_tuple(e.index, fs_str(e.path), fs_str(e.status.to_string()), e.epoch);
}

}  // namespace

void register_loader(nb::module_& m) {
  nb::class_<PyLoader>(m, "Loader")
      .def(
          "__init__",
          [](PyLoader* self, std::shared_ptr<Source> source, const nb::list& transforms, const LoaderOptions& options,
             std::optional<BatchMix> batch_mix) {
            Pipeline pipeline = make_pipeline(transforms);
            std::optional<Result<std::unique_ptr<Loader>>> made;
            // Built on the CPUs its workers will use, so that its pinned buffers are allocated on their node.
            run_on_cpus(options.cpu_affinity.value_or(std::vector<int>{}), [&] {
              made.emplace(Loader::create(std::move(source), std::move(pipeline), options, std::move(batch_mix)));
            });
            new (self) PyLoader{unwrap(std::move(*made))};
          },
          nb::arg("source"), nb::arg("transforms"), nb::arg("options"), nb::kw_only(),
          nb::arg("batch_mix").none() = nb::none(),
          "batch_mix: a BatchMix run on each finished batch; next() then returns (images, labels, "
          "(kind, lam, label_lam, box)), the labels still the dataset's.")
      .def("__len__", [](const PyLoader& l) { return l.impl->num_batches(); })
      .def_prop_ro("num_threads", [](const PyLoader& l) { return l.impl->num_threads(); })
      .def_prop_ro("active_threads", [](const PyLoader& l) { return l.impl->active_threads(); })
      .def_prop_ro("prefetch", [](const PyLoader& l) { return l.impl->prefetch(); })
      // What create() changed from the options, in the engine's words (an explicit prefetch lowered to fit
      // max_memory): each front door shows them once, as warnings.
      .def_prop_ro("notices", [](const PyLoader& l) { return l.impl->notices(); })
      .def_prop_ro("pinned", [](const PyLoader& l) { return l.impl->options().host_allocator->pinned(); })
      .def("stats", [](const PyLoader& l) { return stats_dict(l.impl->stats()); })
      .def("reset_stats", [](PyLoader& l) { l.impl->reset_stats(); })
      .def("ring_usage",
           [](const PyLoader& l) {
             const Loader::RingUsage u = l.impl->ring_usage();
             return nb::make_tuple(u.held, u.max_slots);
           })
      .def_prop_ro("epoch_size", [](const PyLoader& l) { return l.impl->epoch_size(); })
      .def(
          "start_epoch",
          [](PyLoader& l, uint64_t epoch, int64_t start,
             std::optional<nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>> order,
             std::optional<uint64_t> seed, const PySplits& splits) {
            // order: an explicit epoch order (source indices), e.g. a torch sampler's (Loader::start_epoch);
            // seed: that epoch's seed in place of the loader's (torch draws one per epoch); splits: the rest of
            // an interrupted epoch (Loader::resume_epoch).
            if (seed && !order) throw nb::value_error("start_epoch: seed= is given with an explicit order only");
            if (order && !splits.empty()) throw nb::value_error("start_epoch: an explicit order has no splits");
            std::optional<std::vector<int64_t>> indices;
            if (order) indices.emplace(order->data(), order->data() + order->shape(0));
            const std::vector<EpochSplit> rest = to_splits(splits);
            Status st = [&] {
              nb::gil_scoped_release release;
              return indices ? l.impl->start_epoch(epoch, start, std::move(*indices), seed)
                             : l.impl->resume_epoch(epoch, rest, start);
            }();
            if (!st.is_ok()) throw_status(st);
          },
          nb::arg("epoch"), nb::arg("start") = 0, nb::arg("order") = nb::none(), nb::arg("seed") = nb::none(),
          nb::arg("splits") = PySplits{})
      .def("position", [](const PyLoader& l) { return l.impl->position(); })
      .def_prop_ro("decode_warnings", [](const PyLoader& l) { return l.impl->decode_warnings(); })
      // hand_over: the batch's block becomes the caller's (a BlockPool ring, chute/delivery.py).
      .def(
          "next",
          [](PyLoader& l, bool hand_over) -> nb::object {
            Loader& loader = *l.impl;
            Result<std::shared_ptr<Batch>> next =
                wait_interruptibly([&](std::chrono::milliseconds slice) { return loader.next(slice); });
            if (!next.is_ok()) throw_next_error(next.status(), loader);  // chute.SampleError for a bad sample
            if (!*next) return nb::none();
            if (hand_over) (*next)->hand_over();
            nb::tuple tensors = to_tensors(*next, loader);
            if (!loader.batch_mix()) return tensors;
            return nb::make_tuple(tensors[0], tensors[1], mix_tuple((*next)->mix()));
          },
          nb::arg("hand_over") = false)
      .def("host_blocks_wanted", [](const PyLoader& l) { return l.impl->host_blocks_wanted(); })
      .def_prop_ro("host_block_bytes", [](const PyLoader& l) { return l.impl->host_block_bytes(); })
      .def("host_blocks_added", [](PyLoader& l) { l.impl->host_blocks_added(); })
      .def(
          "errors",
          [](const PyLoader& l, size_t first) {
            nb::list out;
            for (const FailedSample& e : l.impl->errors(first)) out.append(error_tuple(e));
            return out;
          },
          nb::arg("first") = 0)
      .def(
          "close", [](PyLoader& l) { l.impl->close(); }, nb::call_guard<nb::gil_scoped_release>());
}

}  // namespace chute::py
