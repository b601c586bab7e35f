#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "chute/engine/reference.h"
#include "chute/io/image_folder.h"
#include "chute/io/source.h"
#include "fs_path.h"

namespace chute::py {

void register_reference(nb::module_& m) {
  m.def(
      "decode_rate",
      [](const std::vector<FsPath>& fs_paths, std::optional<RandomResizedCrop> crop, double min_seconds,
         std::optional<nb::list> transforms) {
        const std::vector<std::string> paths = fs_values(fs_paths);
        ReferenceWindow keep{crop, std::nullopt};
        if (transforms) keep.pipeline = make_pipeline(*transforms);
        nb::gil_scoped_release release;
        std::vector<std::vector<uint8_t>> files(paths.size());
        for (size_t i = 0; i < paths.size(); ++i) {
          const Status st = read_file(paths[i], files[i]);
          if (!st.is_ok()) {
            nb::gil_scoped_acquire acquire;
            throw_status(Status(st.code(), paths[i] + ": " + st.message()));
          }
        }
        const DecodeRate r = decode_rate(files, keep, min_seconds);
        return std::make_tuple(r.images_per_second, r.images, r.failures);
      },
      nb::arg("paths"), nb::arg("crop").none() = nb::none(), nb::arg("min_seconds") = 1.0,
      nb::arg("transforms").none() = nb::none(),
      "Single-thread libjpeg-turbo decode of the files (read into memory first): whole, only each one's "
      "RandomResizedCrop window (crop), or only the window the native `transforms` plan: (images per "
      "second, images, failures).");

  m.def(
      "read_all",
      [](const std::shared_ptr<Source>& source, int num_threads, bool shuffle) {
        Result<ReadRate> r = [&] {
          nb::gil_scoped_release release;
          return read_rate(*source, num_threads, shuffle);
        }();
        const ReadRate rate = unwrap(std::move(r));
        return std::make_tuple(rate.seconds, rate.bytes, rate.failures);
      },
      nb::arg("source"), nb::arg("num_threads"), nb::arg("shuffle") = false,
      "Every sample's bytes read once, no decode (read_rate): (seconds, bytes, failed reads).");
}

}  // namespace chute::py
