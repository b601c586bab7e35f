#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <utility>

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "chute/loader.h"
#include "chute/numa.h"
#include "fs_path.h"

namespace chute::py {

Pipeline make_pipeline(const nb::list& transforms) {
  std::vector<Transform> list;
  for (nb::handle t : transforms) {
    if (nb::isinstance<RandomResizedCrop>(t)) list.emplace_back(nb::cast<RandomResizedCrop>(t));
    else if (nb::isinstance<Resize>(t)) list.emplace_back(nb::cast<Resize>(t));
    else if (nb::isinstance<CenterCrop>(t)) list.emplace_back(nb::cast<CenterCrop>(t));
    else if (nb::isinstance<RandomHorizontalFlip>(t)) list.emplace_back(nb::cast<RandomHorizontalFlip>(t));
    else if (nb::isinstance<Normalize>(t)) list.emplace_back(nb::cast<Normalize>(t));
    else throw nb::type_error("not a native transform");
  }
  return unwrap(Pipeline::create(std::move(list)));
}

namespace {

// A host copy of a batch's labels in its own allocation, owned by the returned capsule.
std::pair<int64_t*, nb::capsule> copied_labels(const int64_t* labels, size_t n) {
  auto copy = std::make_unique<int64_t[]>(std::max<size_t>(n, 1));
  std::memcpy(copy.get(), labels, n * sizeof(int64_t));
  int64_t* data = copy.get();
  nb::capsule owner(copy.release(), [](void* p) noexcept { std::default_delete<int64_t[]>()(static_cast<int64_t*>(p)); });
  return {data, std::move(owner)};
}

}  // namespace

nb::tuple batch_tensors(void* images, int64_t* labels, int64_t size, const Loader& loader, DType out_dtype,
                        const std::function<nb::capsule()>& owner, int device_type, int device_id,
                        bool copy_labels) {
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
    case DType::kUInt8: break;
    case DType::kFloat32: dtype = nb::dtype<float>(); break;
    case DType::kFloat16: dtype = {static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1}; break;
    case DType::kBFloat16: dtype = {static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1}; break;
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
  return batch_tensors(batch->images(), batch->labels(), batch->size(), loader, loader.options().output.dtype,
                       [&] { return owner_of(batch); }, nb::device::cpu::value, 0, /*copy_labels=*/true);
}

nb::object error_tuple(const SampleError& e) {
  return nb::make_tuple(e.index, fs_str(e.path), fs_str(e.status.to_string()), e.epoch);
}

}  // namespace

void register_loader(nb::module_& m) {
  static nb::exception<std::invalid_argument> sample_error(m, "SampleError", PyExc_RuntimeError);

  nb::class_<PyLoader>(m, "Loader")
      .def(
          "__init__",
          [](PyLoader* self, std::shared_ptr<Source> source, const nb::list& transforms, int64_t batch_size,
             bool shuffle, uint64_t seed, bool drop_last, int num_threads, int max_threads, int prefetch,
             size_t max_memory, const std::string& dtype,
             bool channels_last, const std::string& on_error, int64_t max_pixels, bool apply_exif_orientation, bool scaled_decode, int64_t rank, int64_t world_size,
             bool even_split, nb::handle pinned_by, int extra_buffers, std::optional<std::vector<int>> cpu_affinity,
             bool validate_full, uint64_t max_file_bytes,
             std::optional<size_t> max_ring_bytes, bool accept_truncated) {
            LoaderOptions o;
            o.batch_size = batch_size;
            o.shuffle = shuffle;
            o.seed = seed;
            o.drop_last = drop_last;
            o.num_threads = num_threads;
            o.max_threads = max_threads;
            o.prefetch = prefetch;
            o.max_memory = max_memory;
            if (dtype == "uint8") o.output.dtype = DType::kUInt8;
            else if (dtype == "float32") o.output.dtype = DType::kFloat32;
            else if (dtype == "float16") o.output.dtype = DType::kFloat16;
            else if (dtype == "bfloat16") o.output.dtype = DType::kBFloat16;
            else throw nb::value_error(("unsupported dtype " + dtype).c_str());
            o.output.layout = channels_last ? Layout::kNHWC : Layout::kNCHW;
            o.decode.max_pixels = max_pixels;
            o.decode.apply_exif_orientation = apply_exif_orientation;
            o.decode.scaled_decode = scaled_decode;
            o.decode.validate_full = validate_full;
            o.decode.max_file_bytes = max_file_bytes;
            o.shard = {rank, world_size, even_split};
            if (on_error == "raise") o.on_error = ErrorPolicy::kRaise;
            else if (on_error == "skip") o.on_error = ErrorPolicy::kSkip;
            else throw nb::value_error("on_error must be 'raise' or 'skip'");
            // GPU delivery (bind_device.cc): pinned ring buffers from that device, room for copies in flight;
            // or blocks lent by torch's caching host allocator, handed over with each batch (pin_memory).
            if (nb::isinstance<PyDevice>(pinned_by)) o.host_allocator = nb::cast<PyDevice&>(pinned_by).impl->host_allocator();
            else if (nb::isinstance<PyBlockPool>(pinned_by)) o.host_allocator = nb::cast<PyBlockPool&>(pinned_by).impl;
            else if (!pinned_by.is_none()) throw nb::type_error("pinned_by: a Device or a BlockPool");
            o.extra_buffers = extra_buffers;
            o.cpu_affinity = std::move(cpu_affinity);
            if (max_ring_bytes) o.max_ring_bytes = *max_ring_bytes;
            o.decode.accept_truncated = accept_truncated;
            Pipeline pipeline = make_pipeline(transforms);
            std::optional<Result<std::unique_ptr<Loader>>> made;
            // Built on the CPUs its workers will use, so that its pinned buffers are allocated on their node.
            run_on_cpus(o.cpu_affinity.value_or(std::vector<int>{}),
                        [&] { made.emplace(Loader::create(std::move(source), std::move(pipeline), o)); });
            new (self) PyLoader{unwrap(std::move(*made))};
          },
          nb::arg("source"), nb::arg("transforms"), nb::arg("batch_size"), nb::arg("shuffle"), nb::arg("seed"),
          nb::arg("drop_last"), nb::arg("num_threads"), nb::arg("max_threads"), nb::arg("prefetch"),
          nb::arg("max_memory"), nb::arg("dtype"),
          nb::arg("channels_last"), nb::arg("on_error"), nb::arg("max_pixels"), nb::arg("apply_exif_orientation"), nb::arg("scaled_decode"),
          nb::arg("rank"), nb::arg("world_size"), nb::arg("even_split"), nb::arg("pinned_by").none() = nb::none(),
          nb::arg("extra_buffers") = 0, nb::arg("cpu_affinity").none() = nb::none(),
          nb::arg("validate_full") = false, nb::arg("max_file_bytes") = kDefaultMaxFileBytes,
          nb::arg("max_ring_bytes").none() = nb::none(), nb::arg("accept_truncated") = false)
      .def("__len__", [](const PyLoader& l) { return l.impl->num_batches(); })
      .def_prop_ro("num_threads", [](const PyLoader& l) { return l.impl->num_threads(); })
      .def_prop_ro("active_threads", [](const PyLoader& l) { return l.impl->active_threads(); })
      .def_prop_ro("prefetch", [](const PyLoader& l) { return l.impl->prefetch(); })
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
             std::optional<uint64_t> seed) {
            // order: an explicit epoch order (source indices), e.g. a torch sampler's (Loader::start_epoch);
            // seed: that epoch's seed in place of the loader's (torch draws one per epoch).
            if (seed && !order) throw nb::value_error("start_epoch: seed= is given with an explicit order only");
            std::optional<std::vector<int64_t>> indices;
            if (order) indices.emplace(order->data(), order->data() + order->shape(0));
            Status st = [&] {
              nb::gil_scoped_release release;
              return indices ? l.impl->start_epoch(epoch, start, std::move(*indices), seed)
                             : l.impl->start_epoch(epoch, start);
            }();
            if (!st.is_ok()) throw_status(st);
          },
          nb::arg("epoch"), nb::arg("start") = 0, nb::arg("order") = nb::none(), nb::arg("seed") = nb::none())
      .def("position", [](const PyLoader& l) { return l.impl->position(); })
      .def_prop_ro("decode_warnings", [](const PyLoader& l) { return l.impl->decode_warnings(); })
      // hand_over: the batch's block becomes the caller's (a BlockPool ring, chute/delivery.py).
      .def("next",
           [](PyLoader& l, bool hand_over) -> nb::object {
             Loader& loader = *l.impl;
             auto finish = [&](Result<std::shared_ptr<Batch>>& next) -> nb::object {
               if (!next.is_ok()) {
                 // A bad sample is a SampleError; the machine failing (kEnvironment) is chute.ResourceError.
                 // The message may name a file that is not UTF-8.
                 if (loader.failed_sample() && next.status().code() != StatusCode::kEnvironment) {
                   PyErr_SetObject(sample_error.ptr(), fs_str(next.status().message()).ptr());
                   throw nb::python_error();
                 }
                 throw_status(next.status());
               }
               if (!*next) return nb::none();
               if (hand_over) (*next)->hand_over();
               return to_tensors(*next, loader);
             };
             // Wait in slices without the GIL; between slices, let Python handle signals (Ctrl-C).
             for (;;) {
               Result<std::shared_ptr<Batch>> next = [&] {
                 nb::gil_scoped_release release;
                 return loader.next(std::chrono::milliseconds(50));
               }();
               if (next.is_ok() || next.status().code() != StatusCode::kDeadlineExceeded) return finish(next);
               if (PyErr_CheckSignals() != 0) throw nb::python_error();
             }
           }, nb::arg("hand_over") = false)
      .def("host_blocks_wanted", [](const PyLoader& l) { return l.impl->host_blocks_wanted(); })
      .def_prop_ro("host_block_bytes", [](const PyLoader& l) { return l.impl->host_block_bytes(); })
      .def("host_blocks_added", [](PyLoader& l) { l.impl->host_blocks_added(); })
      .def("failed_sample",
           [](const PyLoader& l) -> nb::object {
             auto e = l.impl->failed_sample();
             return e ? error_tuple(*e) : nb::none();
           })
      .def(
          "errors",
          [](const PyLoader& l, size_t first) {
            nb::list out;
            for (const SampleError& e : l.impl->errors(first)) out.append(error_tuple(e));
            return out;
          },
          nb::arg("first") = 0)
      .def(
          "close", [](PyLoader& l) { l.impl->close(); }, nb::call_guard<nb::gil_scoped_release>());
}

}  // namespace chute::py
