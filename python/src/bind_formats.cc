// The formats read in place (cpp/include/chute/formats/): TFRecord files and LMDB environments, as
// SpanSources (io/span_source.h). Opening scans (or finds the cached index) without the GIL.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "chute/formats/lmdb_source.h"
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
      "is_tfrecord_header",
      [](nb::bytes head) {
        return is_tfrecord_header({static_cast<const uint8_t*>(head.data()), head.size()});
      },
      nb::arg("head"), "Whether a file's first 12 bytes are a TFRecord record header (chute/formats/tfrecord.h).");
}

}  // namespace chute::py
