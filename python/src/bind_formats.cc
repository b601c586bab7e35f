// The formats read in place (cpp/include/chute/formats/): TFRecord files and LMDB environments, as
// SpanSources (io/span_source.h); and the spans that pyarrow's and h5py's metadata locate (Arrow IPC,
// Parquet, HDF5: chute/formats/*.py), located further by chute's own page and heap readers and opened as
// span tables. Opening scans (or finds the cached index) without the GIL.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "chute/formats/hdf5_heap.h"
#include "chute/formats/lmdb_source.h"
#include "chute/formats/parquet_pages.h"
#include "chute/formats/span_table.h"
#include "chute/formats/tfrecord.h"
#include "chute/formats/tfrecord_source.h"
#include "fs_path.h"

namespace chute::py {
namespace {

std::vector<std::string> per_part(const SpanSource& s, const std::string& (SpanSource::*field)(size_t) const) {
  std::vector<std::string> out;
  for (size_t p = 0; p < s.num_parts(); ++p) out.push_back((s.*field)(p));
  return out;
}

template <typename T>
using Column = nb::ndarray<const T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

template <typename T>
std::vector<T> values_of(const Column<T>& a) {
  return std::vector<T>(a.data(), a.data() + a.shape(0));
}

// A vector as a numpy array that owns it.
template <typename T>
nb::ndarray<nb::numpy, T, nb::ndim<1>> numpy_of(std::vector<T> v) {
  auto* held = new std::vector<T>(std::move(v));
  nb::capsule owner(held, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  const size_t shape[1] = {held->size()};
  return nb::ndarray<nb::numpy, T, nb::ndim<1>>(held->data(), 1, shape, owner);
}

// A read-only view of a Python buffer (a pyarrow.Buffer, bytes), kept alive by the owner it comes with; the
// owner's last reference may go on any thread, so the view is released under the GIL.
std::pair<std::shared_ptr<const void>, std::span<const uint8_t>> buffer_view(nb::handle object) {
  auto view = std::make_unique<Py_buffer>();
  if (PyObject_GetBuffer(object.ptr(), view.get(), PyBUF_SIMPLE) != 0) throw nb::python_error();
  const std::span<const uint8_t> bytes(static_cast<const uint8_t*>(view->buf), static_cast<size_t>(view->len));
  Py_buffer* held = view.release();
  std::shared_ptr<const void> owner(held->buf, [held](const void*) {
    if (!Py_IsInitialized()) return;  // interpreter exit: leave it
    nb::gil_scoped_acquire gil;
    PyBuffer_Release(held);
    delete held;
  });
  return {std::move(owner), bytes};
}

nb::tuple spans_tuple(Hdf5Spans spans) {
  nb::list bad;
  for (const auto& [i, why] : spans.bad) bad.append(nb::make_tuple(i, fs_str(why)));
  return nb::make_tuple(numpy_of(std::move(spans.offsets)), numpy_of(std::move(spans.lengths)), bad);
}

std::shared_ptr<const MappedFile> mapped(const FsPath& path) {
  Result<std::shared_ptr<const MappedFile>> file = [&] {
    nb::gil_scoped_release release;
    return MappedFile::open(path.value);
  }();
  return unwrap(std::move(file));
}

// A table from Python: {"path" or "buffer", "name", "offsets", "lengths", "labels", "first_key", "bad"}.
SpanTable table_of(const nb::dict& d) {
  SpanTable t;
  if (d.contains("path")) {
    t.file = mapped(nb::cast<FsPath>(d["path"]));
  } else {
    std::tie(t.owner, t.memory) = buffer_view(d["buffer"]);
  }
  t.name = nb::cast<FsPath>(d["name"]).value;
  t.offsets = values_of(nb::cast<Column<uint64_t>>(d["offsets"]));
  t.lengths = values_of(nb::cast<Column<uint64_t>>(d["lengths"]));
  t.labels = values_of(nb::cast<Column<int64_t>>(d["labels"]));
  t.first_key = nb::cast<uint64_t>(d["first_key"]);
  for (nb::handle b : nb::cast<nb::list>(d["bad"]))
    t.bad.emplace_back(nb::cast<uint64_t>(b[0]), nb::cast<FsPath>(b[1]).value);
  return t;
}

}  // namespace

void register_formats(nb::module_& m) {
  nb::class_<SpanSource, Source>(m, "SpanSource")
      .def(
          "key",
          [](const SpanSource& s, int64_t i) {
            const std::string key = s.key(checked_index(s, i));
            return nb::bytes(key.data(), key.size());
          },
          nb::arg("index"), "The stored key (bytes), prefixed with its file's name when there are several files.")
      .def("payload_sizes",
           [](const SpanSource& s) {
             std::vector<uint64_t> out(static_cast<size_t>(s.size()));
             for (int64_t i = 0; i < s.size(); ++i) out[static_cast<size_t>(i)] = s.span_size(i);
             return out;
           })
      .def("part_names", [](const SpanSource& s) { return fs_list(per_part(s, &SpanSource::part_name)); })
      .def("index_paths", [](const SpanSource& s) { return fs_list(per_part(s, &SpanSource::index_path)); })
      .def("bad_samples",
           [](const SpanSource& s) {
             nb::list out;
             for (const auto& [i, why] : s.bad_samples()) out.append(nb::make_tuple(i, fs_str(why)));
             return out;
           })
      .def(
          "with_labels",
          [](const SpanSource& s, std::vector<int64_t> labels) {
            return open_without_gil<SpanSource>([&] { return s.with_labels(std::move(labels)); });
          },
          nb::arg("labels"));

  m.def(
      "open_tfrecord",
      [](const std::vector<FsPath>& paths, const std::string& image_key, const std::string& label_key,
         const FsPath& cache_dir, bool verify) {
        Result<std::pair<std::shared_ptr<SpanSource>, TfRecordLayout>> opened = [&] {
          nb::gil_scoped_release release;
          return open_tfrecord(
              fs_values(paths),
              {.image_key = image_key, .label_key = label_key, .cache_dir = cache_dir.value, .verify = verify});
        }();
        auto [source, layout] = unwrap(std::move(opened));
        nb::list features;
        for (const auto& [name, kind] : layout.features) features.append(nb::make_tuple(name, kind));
        return nb::make_tuple(source, layout.image_key, layout.label_key, features);
      },
      nb::arg("paths"), nb::arg("image_key"), nb::arg("label_key"), nb::arg("cache_dir"), nb::arg("verify") = true,
      "(source, image_key, label_key, the first record's [(feature, kind)]) (chute/formats/tfrecord_source.h).");

  m.def(
      "open_lmdb",
      [](const FsPath& path, const std::string& image_key, const std::string& label_key, const FsPath& cache_dir) {
        Result<std::pair<std::shared_ptr<SpanSource>, LmdbInfo>> opened = [&] {
          nb::gil_scoped_release release;
          return open_lmdb(path.value, {.image_key = image_key, .label_key = label_key, .cache_dir = cache_dir.value});
        }();
        auto [source, info] = unwrap(std::move(opened));
        return nb::make_tuple(source, lmdb_layout_name(info.layout), info.keys_record, fs_str(info.data_file));
      },
      nb::arg("path"), nb::arg("image_key"), nb::arg("label_key"), nb::arg("cache_dir"),
      "(source, layout name, whether the order came from __keys__, the data file) (chute/formats/lmdb_source.h).");

  m.def(
      "open_span_table",
      [](const nb::list& tables, std::vector<int64_t> shard_sizes, std::optional<Column<int64_t>> order) {
        std::vector<SpanTable> parts;
        for (nb::handle t : tables) parts.push_back(table_of(nb::cast<nb::dict>(t)));
        SpanOptions options{.unwrap = {},
                            .shard_sizes = std::move(shard_sizes),
                            .no_shards = false,
                            .labels = {},
                            .order = order ? values_of(*order) : std::vector<int64_t>{}};
        return open_without_gil<SpanSource>([&] { return open_span_table(std::move(parts), std::move(options)); });
      },
      nb::arg("tables"), nb::arg("shard_sizes"), nb::arg("order") = nb::none(),
      "A SpanSource from located spans: each table a dict of path (or buffer), name, offsets, lengths, labels, "
      "first_key and bad [(place, why)]; `order`: the samples as places in the tables "
      "(chute/formats/span_table.h).");

  m.def(
      "scan_parquet_column",
      [](const FsPath& path, const std::vector<std::tuple<uint64_t, uint64_t, uint64_t>>& chunks,
         int max_definition_level, const std::string& what) {
        const auto file = mapped(path);
        ParquetValues values;
        Status st = [&] {
          nb::gil_scoped_release release;
          for (const auto& [offset, size, num_values] : chunks) {
            const ParquetChunk chunk{
                .offset = offset, .size = size, .num_values = num_values, .max_definition_level = max_definition_level};
            CHUTE_RETURN_IF_ERROR(scan_parquet_chunk(file->bytes(), chunk, what, values));
          }
          return Status::ok();
        }();
        if (!st.is_ok()) throw_status(st);
        return nb::make_tuple(numpy_of(std::move(values.offsets)), numpy_of(std::move(values.lengths)),
                              numpy_of(std::move(values.null)));
      },
      nb::arg("path"), nb::arg("chunks"), nb::arg("max_definition_level"), nb::arg("what"),
      "(offsets, lengths, null) of each row of an uncompressed PLAIN column, chunk by chunk (offset, size, "
      "values) (chute/formats/parquet_pages.h).");

  m.def(
      "hdf5_vlen_spans",
      [](const FsPath& path, nb::bytes elements, int sizeof_addr, int sizeof_size) {
        const auto file = mapped(path);
        const std::span<const uint8_t> stored(static_cast<const uint8_t*>(elements.data()), elements.size());
        Result<Hdf5Spans> spans = [&] {
          nb::gil_scoped_release release;
          return hdf5_vlen_spans(file->bytes(), stored, sizeof_addr, sizeof_size);
        }();
        return spans_tuple(unwrap(std::move(spans)));
      },
      nb::arg("path"), nb::arg("elements"), nb::arg("sizeof_addr"), nb::arg("sizeof_size"),
      "(offsets, lengths, bad) of a variable-length bytes dataset's elements (chute/formats/hdf5_heap.h).");

  m.def(
      "hdf5_fixed_spans",
      [](const FsPath& path, const Column<uint64_t>& offsets, uint64_t itemsize) {
        const auto file = mapped(path);
        const std::vector<uint64_t> at = values_of(offsets);
        Result<Hdf5Spans> spans = [&] {
          nb::gil_scoped_release release;
          return hdf5_fixed_spans(file->bytes(), at, itemsize);
        }();
        return spans_tuple(unwrap(std::move(spans)));
      },
      nb::arg("path"), nb::arg("offsets"), nb::arg("itemsize"),
      "(offsets, lengths, bad) of fixed-length elements, trimmed of trailing NULs (chute/formats/hdf5_heap.h).");

  m.def(
      "is_tfrecord_header",
      [](nb::bytes head) {
        return is_tfrecord_header({static_cast<const uint8_t*>(head.data()), head.size()});
      },
      nb::arg("head"), "Whether a file's first 12 bytes are a TFRecord record header (chute/formats/tfrecord.h).");
}

}  // namespace chute::py
