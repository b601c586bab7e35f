// chute._native.Gatherer: the tensor-dataset fast path's native gather (chute/gather.h).
#include <chrono>

#include <nanobind/ndarray.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "chute/engine/gather.h"

namespace chute::py {
namespace {

// The Python object owns the engine through a pointer: its threads hold the address.
struct PyGatherer {
  std::unique_ptr<Gatherer> impl;
};

// A 1-D uint8 torch tensor over the buffer (DLPack, no copy); the capsule holds the buffer's reference,
// so the memory returns to the pool when torch frees the tensor, on whatever thread that happens.
nb::object to_tensor(const std::shared_ptr<uint8_t>& buffer, size_t bytes) {
  nb::capsule owner(new std::shared_ptr<uint8_t>(buffer),
                    [](void* p) noexcept { delete static_cast<std::shared_ptr<uint8_t>*>(p); });
  const size_t shape[1] = {bytes};
  return nb::cast(nb::ndarray<nb::pytorch, uint8_t, nb::ndim<1>>(buffer.get(), 1, shape, owner));
}

}  // namespace

void register_gather(nb::module_& m) {
  nb::class_<PyGatherer>(m, "Gatherer")
      .def(
          "__init__",
          [](PyGatherer* self, const std::vector<std::tuple<uintptr_t, int64_t, int64_t>>& columns, int num_threads,
             size_t min_chunk_bytes, size_t max_free_bytes) {
            std::vector<GatherColumn> cols;
            for (const auto& [ptr, row_bytes, rows] : columns)
              cols.push_back({reinterpret_cast<const void*>(ptr), row_bytes, rows});
            GatherOptions o{
                .num_threads = num_threads, .min_chunk_bytes = min_chunk_bytes, .max_free_bytes = max_free_bytes};
            new (self) PyGatherer{unwrap(Gatherer::create(std::move(cols), o))};
          },
          nb::arg("columns"), nb::arg("num_threads") = 0, nb::arg("min_chunk_bytes") = size_t{1} << 20,
          nb::arg("max_free_bytes") = size_t{1} << 30,
          "columns: (data pointer, row bytes, rows) per column. The caller keeps that memory alive and "
          "unchanged until every submitted batch has been waited for, or close() has returned.")
      .def_prop_ro("num_threads", [](const PyGatherer& g) { return g.impl->num_threads(); })
      .def_prop_ro("rows", [](const PyGatherer& g) { return g.impl->rows(); })
      .def_prop_ro("allocations", [](const PyGatherer& g) { return g.impl->pool().allocations(); })
      .def(
          "submit",
          [](PyGatherer& g, nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> indices) {
            std::span<const int64_t> span(indices.data(), indices.shape(0));
            Result<int64_t> ticket = [&] {
              nb::gil_scoped_release release;  // allocation of a fresh buffer may fault in many pages
              return g.impl->submit(span);
            }();
            return unwrap(std::move(ticket));
          },
          nb::arg("indices"), "Queues a batch of int64 indices; returns its ticket.")
      .def(
          "wait",
          [](PyGatherer& g, int64_t ticket) {
            Result<GatherBatch> r =
                wait_interruptibly([&](std::chrono::milliseconds slice) { return g.impl->wait(ticket, slice); });
            if (!r.is_ok()) throw_status(r.status());
            GatherBatch& b = r.value();
            if (b.bad_index) {
              PyErr_SetString(PyExc_IndexError, b.status.message().c_str());
              throw nb::python_error();
            }
            if (!b.status.is_ok()) throw_status(b.status);
            nb::list out;
            for (size_t c = 0; c < b.columns.size(); ++c)
              out.append(to_tensor(b.columns[c], static_cast<size_t>(b.rows) * g.impl->row_bytes(c)));
            return out;
          },
          nb::arg("ticket"),
          "The batch's columns as 1-D uint8 tensors (view them as the dataset's dtype and row shape); "
          "IndexError when an index was out of range.")
      .def(
          "park", [](PyGatherer& g) { g.impl->park(); }, nb::call_guard<nb::gil_scoped_release>(),
          "Stops the copy threads once queued batches are copied; the next submit() starts them again.")
      .def(
          "close", [](PyGatherer& g) { g.impl->close(); }, nb::call_guard<nb::gil_scoped_release>());
}

}  // namespace chute::py
