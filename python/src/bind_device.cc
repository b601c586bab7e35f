// GPU delivery: devices (CUDA, and the simulated one the tests drive) and the DeviceLoader.
#include <chrono>

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "chute/cuda_device.h"
#include "chute/delivery.h"
#include "chute/numa.h"
#include "chute/simulated_device.h"

namespace chute::py {
namespace {

struct PyDeviceLoader {
  std::unique_ptr<DeviceLoader> impl;
  std::shared_ptr<Loader> loader;  // the same loader, for its layout
};

SimulatedDevice* simulated(const PyDevice& d) {
  if (d.impl->kind() != DeviceKind::kSimulated) throw nb::type_error("not the simulated device");
  return static_cast<SimulatedDevice*>(d.impl.get());
}

}  // namespace

void register_device(nb::module_& m) {
  m.def("cuda_availability", [] {
    const CudaAvailability a = cuda_availability();
    return nb::make_tuple(a.available, a.device_count, a.message);
  });
  // The CPUs on the GPU's NUMA node that this process may use; empty when unknown.
  m.def(
      "cuda_local_cpus", [](int index, const std::string& sysfs_root) {
        const std::string bus = cuda_pci_bus_id(index);
        return bus.empty() ? std::vector<int>{} : pci_local_cpus(sysfs_root, bus);
      },
      nb::arg("index"), nb::arg("sysfs_root") = "/sys");

  nb::class_<PyDevice>(m, "Device")
      .def_static("cuda", [](int index) { return PyDevice{unwrap(open_cuda_device(index))}; }, nb::arg("index"))
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
      .def_prop_ro("live_device_bytes", [](const PyDevice& d) { return simulated(d)->live_device_bytes(); });

  nb::class_<PyDeviceLoader>(m, "DeviceLoader")
      .def(
          "__init__",
          [](PyDeviceLoader* self, const PyLoader& loader, const PyDevice& device, int device_prefetch,
             size_t max_device_memory) {
            DeliveryOptions o{.device_prefetch = device_prefetch, .max_device_memory = max_device_memory};
            new (self) PyDeviceLoader{unwrap(DeviceLoader::create(device.impl, loader.impl, o)), loader.impl};
          },
          nb::arg("loader"), nb::arg("device"), nb::arg("device_prefetch"), nb::arg("max_device_memory"))
      .def_prop_ro("num_slots", [](const PyDeviceLoader& l) { return l.impl->num_slots(); })
      .def(
          "start_epoch",
          [](PyDeviceLoader& l, uint64_t epoch, int64_t start) {
            Status st = [&] {
              nb::gil_scoped_release release;
              return l.impl->start_epoch(epoch, start);
            }();
            if (!st.is_ok()) throw_status(st);
          },
          nb::arg("epoch"), nb::arg("start") = 0)
      .def("position", [](const PyDeviceLoader& l) { return l.impl->position(); })
      // (images, labels) on the device, ready for work issued to `stream` (a cudaStream_t as an int), or
      // None at the end of the epoch. Images are uint8 (normalised by the caller, on the device).
      .def(
          "next",
          [](PyDeviceLoader& l, uintptr_t stream) -> nb::object {
            DeviceLoader& d = *l.impl;
            for (;;) {
              Result<std::shared_ptr<DeviceBatch>> next = [&] {
                nb::gil_scoped_release release;
                return d.next(stream, std::chrono::milliseconds(50));
              }();
              if (!next.is_ok() && next.status().code() == StatusCode::kDeadlineExceeded) {
                if (PyErr_CheckSignals() != 0) throw nb::python_error();
                continue;
              }
              if (!next.is_ok()) {
                if (l.loader->failed_sample()) throw std::invalid_argument(next.status().message());
                throw_status(next.status());
              }
              const std::shared_ptr<DeviceBatch>& b = *next;
              if (!b) return nb::none();
              const bool cuda = d.device().kind() == DeviceKind::kCuda;
              auto owner = [&] {
                return nb::capsule(new std::shared_ptr<DeviceBatch>(b), [](void* p) noexcept {
                  delete static_cast<std::shared_ptr<DeviceBatch>*>(p);
                });
              };
              return batch_tensors(b->images(), b->labels(), b->size(), *l.loader, l.loader->options().output.dtype,
                                   owner, cuda ? nb::device::cuda::value : nb::device::cpu::value,
                                   cuda ? d.device().index() : 0);
            }
          },
          nb::arg("stream"))
      .def(
          "close", [](PyDeviceLoader& l) { l.impl->close(); }, nb::call_guard<nb::gil_scoped_release>());
}

}  // namespace chute::py
