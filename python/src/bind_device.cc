// GPU delivery: devices (CUDA, and the simulated one the tests drive) and the DeviceLoader.
#include <chrono>

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "chute/base/memory_map.h"
#include "chute/gpu/cuda_device.h"
#include "chute/gpu/delivery.h"
#include "chute/gpu/numa.h"
#include "chute/gpu/simulated_device.h"

namespace chute::py {
namespace {

struct PyDeviceSlots {
  std::unique_ptr<DeviceSlots> impl;
};

// A Python object as the owner of a host batch's memory: released (under the GIL) once its copy completed.
std::shared_ptr<const void> python_owner(nb::object o) {
  auto* held = new nb::object(std::move(o));
  return std::shared_ptr<const void>(held->ptr(), [held](const void*) {
    if (!Py_IsInitialized()) return;  // interpreter exit: leave it
    nb::gil_scoped_acquire gil;
    delete held;
  });
}

struct PyDeviceLoader {
  std::unique_ptr<DeviceLoader> impl;
  std::shared_ptr<Loader> loader;  // the same loader, for its layout
};

SimulatedDevice* simulated(const PyDevice& d) {
  if (d.impl->kind() != DeviceKind::kSimulated) throw nb::type_error("not the simulated device");
  return static_cast<SimulatedDevice*>(d.impl.get());
}

// A block of the simulated consumer's caching host allocator, freed to it when its tensor goes.
struct SimBlock {
  std::shared_ptr<Device> device;
  void* p;
  ~SimBlock() { static_cast<SimulatedDevice*>(device.get())->free_block(p); }
};

}  // namespace

void register_device(nb::module_& m) {
  // Where libcudart may be found next to torch (chute/delivery.py), tried after a runtime already loaded.
  m.def("set_cudart_candidates", [](std::vector<std::string> paths) { set_cudart_candidates(std::move(paths)); });
  m.def("loaded_cudart_paths", [] { return loaded_cudart_paths(); });
  m.def("cuda_availability", [] {
    const CudaAvailability a = cuda_availability();
    return nb::make_tuple(a.available, a.device_count, a.message);
  });
  // The mapping of this process that holds an address (chute/base/memory_map.h): (start, end, shared,
  // file-backed, path), or None when unmapped.
  m.def("mapping_of", [](uintptr_t address) -> nb::object {
    Result<Mapping> m = mapping_of(reinterpret_cast<const void*>(address));
    if (!m.is_ok()) {
      if (m.status().code() == StatusCode::kNotFound) return nb::none();
      throw_status(m.status());
    }
    return nb::make_tuple(m->start, m->end, m->shared, m->file_backed(), m->path);
  });
  // The CPUs on the GPU's NUMA node that this process may use; empty when unknown.
  m.def(
      "cuda_local_cpus",
      [](int index, const std::string& sysfs_root) {
        const std::string bus = cuda_pci_bus_id(index);
        return bus.empty() ? std::vector<int>{} : pci_local_cpus(sysfs_root, bus);
      },
      nb::arg("index"), nb::arg("sysfs_root") = "/sys");

  // Pinned blocks lent by torch's host allocator (chute/delivery.py stocks it) for a hand-over ring.
  nb::class_<PyBlockPool>(m, "BlockPool")
      // power_of_two_blocks: the lender rounds its blocks up to a power of two (torch's caching host allocator).
      .def(
          "__init__",
          [](PyBlockPool* self, bool power_of_two_blocks) {
            new (self) PyBlockPool{std::make_shared<BlockPool>("torch pinned", power_of_two_blocks)};
          },
          nb::arg("power_of_two_blocks") = false)
      .def("footprint", [](const PyBlockPool& p, size_t bytes) { return p.impl->footprint(bytes); })
      .def("donate", [](PyBlockPool& p, uintptr_t address,
                        size_t bytes) { p.impl->donate(reinterpret_cast<void*>(address), bytes); })
      .def("take_returned",
           [](PyBlockPool& p) {
             std::vector<uintptr_t> out;
             for (void* q : p.impl->take_returned()) out.push_back(reinterpret_cast<uintptr_t>(q));
             return out;
           })
      .def_prop_ro("handed_over", [](const PyBlockPool& p) { return p.impl->handed_over_count(); });

  nb::class_<PyDevice>(m, "Device")
      .def_static(
          "cuda", [](int index) { return PyDevice{unwrap(open_cuda_device(index))}; }, nb::arg("index"))
      .def_static(
          "simulated",
          [](uint64_t seed, int max_delay_us) {
            return PyDevice{std::static_pointer_cast<Device>(unwrap(SimulatedDevice::create(seed, max_delay_us)))};
          },
          nb::arg("seed") = 0, nb::arg("max_delay_us") = 200)
      .def_prop_ro("name", [](const PyDevice& d) { return d.impl->name(); })
      .def_prop_ro("index", [](const PyDevice& d) { return d.impl->index(); })
      .def_prop_ro("is_cuda", [](const PyDevice& d) { return d.impl->kind() == DeviceKind::kCuda; })
      // The simulated device's protocol checks (simulated_device.h).
      .def_prop_ro("violations", [](const PyDevice& d) { return simulated(d)->violations(); })
      .def_prop_ro("first_violation", [](const PyDevice& d) { return simulated(d)->first_violation(); })
      .def_prop_ro("copies", [](const PyDevice& d) { return simulated(d)->copies(); })
      .def_prop_ro("live_host_bytes", [](const PyDevice& d) { return simulated(d)->live_host_bytes(); })
      .def_prop_ro("live_device_bytes", [](const PyDevice& d) { return simulated(d)->live_device_bytes(); })
      .def_prop_ro("outlived_registrations", [](const PyDevice& d) { return simulated(d)->outlived_registrations(); })
      // The simulated consumer (simulated_device.h): torch's caching host allocator, lagging streams, copies.
      .def(
          "pinned_block",
          [](const PyDevice& d, size_t bytes) {
            void* p = unwrap(simulated(d)->allocate_block(bytes));
            nb::capsule owner(new SimBlock{d.impl, p}, [](void* b) noexcept { delete static_cast<SimBlock*>(b); });
            const size_t shape[1] = {bytes};
            return nb::ndarray<nb::pytorch, uint8_t>(p, 1, shape, owner);
          },
          nb::arg("nbytes"))
      .def(
          "create_stream",
          [](const PyDevice& d, int min_delay_us, int max_delay_us) {
            return unwrap(simulated(d)->create_stream(min_delay_us, max_delay_us));
          },
          nb::arg("min_delay_us"), nb::arg("max_delay_us"))
      .def(
          "copy_to_device",
          [](const PyDevice& d, uintptr_t src, size_t bytes, int stream) {
            return reinterpret_cast<uintptr_t>(
                unwrap(simulated(d)->copy_to_device(reinterpret_cast<void*>(src), bytes, stream)));
          },
          nb::arg("src"), nb::arg("nbytes"), nb::arg("stream"))
      .def(
          "synchronize_stream",
          [](const PyDevice& d, int stream) {
            Status st = [&] {
              nb::gil_scoped_release release;
              return simulated(d)->synchronize_stream(stream);
            }();
            if (!st.is_ok()) throw_status(st);
          },
          nb::arg("stream"))
      // The bytes of a completed copy_to_device(), which frees its device memory.
      .def(
          "read_device",
          [](const PyDevice& d, uintptr_t p, size_t bytes) {
            nb::bytes out(reinterpret_cast<const char*>(p), bytes);
            d.impl->free_device(reinterpret_cast<void*>(p), bytes);
            return out;
          },
          nb::arg("address"), nb::arg("nbytes"));

  // Device slots fed with host batches from Python (chute.ray's object-store buffers): device_slots.h.
  nb::class_<PyDeviceSlots>(m, "DeviceSlots")
      .def(
          "__init__",
          [](PyDeviceSlots* self, const PyDevice& device, size_t sample_bytes, int64_t batch_size,
             const DeliveryOptions& options) {
            new (self) PyDeviceSlots{unwrap(DeviceSlots::create(device.impl, sample_bytes, batch_size, options))};
          },
          nb::arg("device"), nb::arg("sample_bytes"), nb::arg("batch_size"), nb::arg("options"))
      .def_prop_ro("num_slots", [](const PyDeviceSlots& d) { return d.impl->num_slots(); })
      .def_prop_ro("device_prefetch", [](const PyDeviceSlots& d) { return d.impl->device_prefetch(); })
      .def_prop_ro("can_issue", [](const PyDeviceSlots& d) { return d.impl->can_issue(); })
      .def_prop_ro("waiting", [](const PyDeviceSlots& d) { return d.impl->waiting(); })
      .def(
          "register_host",
          [](PyDeviceSlots& d, uintptr_t address, size_t nbytes) {
            Status st = d.impl->register_host(reinterpret_cast<void*>(address), nbytes);
            if (!st.is_ok()) throw_status(st);
          },
          nb::arg("address"), nb::arg("nbytes"))
      .def(
          "registered",
          [](const PyDeviceSlots& d, uintptr_t address, size_t nbytes) {
            return d.impl->registered(reinterpret_cast<const void*>(address), nbytes);
          },
          nb::arg("address"), nb::arg("nbytes"))
      // Waits for the copies in flight and unregisters the ranges that meet [address, address + nbytes).
      .def(
          "unregister_host",
          [](PyDeviceSlots& d, uintptr_t address, size_t nbytes) {
            d.impl->unregister_host(reinterpret_cast<const void*>(address), nbytes);
          },
          nb::arg("address"), nb::arg("nbytes"), nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("stale_ranges", [](const PyDeviceSlots& d) { return d.impl->stale_ranges(); })
      // Copies (images, labels) to a free slot; `owner` (what keeps their memory) is held until the copy
      // completed. images: the batch's bytes, labels: int64, one per sample.
      .def(
          "issue",
          [](PyDeviceSlots& d, nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> images,
             nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> labels, nb::object owner) {
            const int64_t count = static_cast<int64_t>(labels.shape(0));
            if (images.shape(0) != static_cast<size_t>(count) * d.impl->sample_bytes())
              throw nb::value_error("issue(): images must hold sample_bytes for each label");
            HostBatch b{.images = images.data(),
                        .labels = labels.data(),
                        .count = count,
                        .keep = python_owner(std::move(owner))};
            Status st = [&] {
              nb::gil_scoped_release release;
              return d.impl->issue(std::move(b));
            }();
            if (!st.is_ok()) throw_status(st);
          },
          nb::arg("images"), nb::arg("labels"), nb::arg("owner"))
      // The oldest issued batch as (images: flat uint8, labels: int64) on the device, ready for work issued
      // to `stream` (a cudaStream_t as an int) from now on.
      .def(
          "next",
          [](PyDeviceSlots& d, uintptr_t stream) {
            Result<std::pair<std::shared_ptr<DeviceBatch>, int64_t>> taken = [&] {
              nb::gil_scoped_release release;
              d.impl->reap();
              return d.impl->take(stream);
            }();
            if (!taken.is_ok()) throw_status(taken.status());
            const std::shared_ptr<DeviceBatch> b = taken->first;
            auto owner = [&] {
              return nb::capsule(new std::shared_ptr<DeviceBatch>(b),
                                 [](void* p) noexcept { delete static_cast<std::shared_ptr<DeviceBatch>*>(p); });
            };
            const bool cuda = d.impl->device().kind() == DeviceKind::kCuda;
            const int type = cuda ? nb::device::cuda::value : nb::device::cpu::value;
            const int id = cuda ? d.impl->device().index() : 0;
            const size_t image_shape[1] = {static_cast<size_t>(b->size()) * d.impl->sample_bytes()};
            const size_t label_shape[1] = {static_cast<size_t>(b->size())};
            nb::ndarray<nb::pytorch, uint8_t> images(b->images(), 1, image_shape, owner(), nullptr,
                                                     nb::dtype<uint8_t>(), type, id);
            nb::ndarray<nb::pytorch, int64_t> labels(b->labels(), 1, label_shape, owner(), nullptr,
                                                     nb::dtype<int64_t>(), type, id);
            return nb::make_tuple(images, labels);
          },
          nb::arg("stream"))
      // Waits for the copies in flight and frees the slots of batches issued and never taken.
      .def(
          "drain", [](PyDeviceSlots& d) { d.impl->drain(); }, nb::call_guard<nb::gil_scoped_release>())
      .def(
          "close", [](PyDeviceSlots& d) { d.impl->close(); }, nb::call_guard<nb::gil_scoped_release>());

  nb::class_<PyDeviceLoader>(m, "DeviceLoader")
      .def(
          "__init__",
          [](PyDeviceLoader* self, const PyLoader& loader, const PyDevice& device, const DeliveryOptions& options) {
            new (self) PyDeviceLoader{unwrap(DeviceLoader::create(device.impl, loader.impl, options)), loader.impl};
          },
          nb::arg("loader"), nb::arg("device"), nb::arg("options"))
      .def_prop_ro("num_slots", [](const PyDeviceLoader& l) { return l.impl->num_slots(); })
      .def(
          "start_epoch",
          [](PyDeviceLoader& l, uint64_t epoch, int64_t start, const PySplits& splits) {
            const std::vector<EpochSplit> rest = to_splits(splits);
            Status st = [&] {
              nb::gil_scoped_release release;
              return l.impl->start_epoch(epoch, start, rest);
            }();
            if (!st.is_ok()) throw_status(st);
          },
          nb::arg("epoch"), nb::arg("start") = 0, nb::arg("splits") = PySplits{})
      .def("position", [](const PyDeviceLoader& l) { return l.impl->position(); })
      // (images, labels) on the device, ready for work issued to `stream` (a cudaStream_t as an int), or
      // None at the end of the epoch. Images are uint8 (normalised by the caller, on the device).
      .def(
          "next",
          [](PyDeviceLoader& l, uintptr_t stream) -> nb::object {
            DeviceLoader& d = *l.impl;
            Result<std::shared_ptr<DeviceBatch>> next =
                wait_interruptibly([&](std::chrono::milliseconds slice) { return d.next(stream, slice); });
            if (!next.is_ok()) throw_next_error(next.status(), *l.loader);  // chute.SampleError for a bad sample
            const std::shared_ptr<DeviceBatch>& b = *next;
            if (!b) return nb::none();
            const bool cuda = d.device().kind() == DeviceKind::kCuda;
            auto owner = [&] {
              return nb::capsule(new std::shared_ptr<DeviceBatch>(b),
                                 [](void* p) noexcept { delete static_cast<std::shared_ptr<DeviceBatch>*>(p); });
            };
            return batch_tensors(b->images(), b->labels(), b->size(), *l.loader, l.loader->options().output.dtype,
                                 owner, cuda ? nb::device::cuda::value : nb::device::cpu::value,
                                 cuda ? d.device().index() : 0);
          },
          nb::arg("stream"))
      .def(
          "close", [](PyDeviceLoader& l) { l.impl->close(); }, nb::call_guard<nb::gil_scoped_release>());
}

}  // namespace chute::py
