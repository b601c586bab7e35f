#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "chute/io/image_folder.h"
#include "fs_path.h"

namespace chute::py {

int64_t checked_index(const Source& s, int64_t index) {
  if (index < 0 || index >= s.size())
    throw nb::index_error(("sample index " + std::to_string(index) + " out of range").c_str());
  return index;
}

void register_sources(nb::module_& m) {
  nb::list extensions;
  for (const char* ext : kImageExtensions) extensions.append(ext);
  m.attr("IMAGE_EXTENSIONS") = nb::tuple(extensions);  // what ImageFolder lists, lower-case with the dot

  // The core trusts its callers with indices; Python callers get IndexError instead.
  nb::class_<Source>(m, "Source")
      .def("__len__", &Source::size)
      .def(
          "label", [](const Source& s, int64_t i) { return s.label(checked_index(s, i)); }, nb::arg("index"))
      .def(
          "name", [](const Source& s, int64_t i) { return fs_str(s.name(checked_index(s, i))); }, nb::arg("index"))
      .def("labels",
           [](const Source& s) {
             std::vector<int64_t> out(static_cast<size_t>(s.size()));
             for (int64_t i = 0; i < s.size(); ++i) out[static_cast<size_t>(i)] = s.label(i);
             return out;
           })
      .def("shard_sizes", &Source::shard_sizes,
           "Samples per shard in index order, for a source stored as shards (packed shards, tar files); [] "
           "otherwise (chute/source.h).")
      .def("names",
           [](const Source& s) {
             // Names are file names (bytes on POSIX): str as os.fsdecode gives them, so none fails to decode.
             nb::list out;
             for (int64_t i = 0; i < s.size(); ++i) out.append(fs_str(s.name(i)));
             return out;
           })
      .def(
          "keys",
          [](const Source& s) {
            nb::list out;
            for (int64_t i = 0; i < s.size(); ++i) out.append(fs_str(s.key(i)));
            return out;
          },
          "The key `chute pack` stores for each sample (Source::key: a path relative to the root, a tar member).");

  nb::class_<ImageFolder, Source>(m, "ImageFolder")
      .def_static(
          "open",
          [](const FsPath& root) {
            return open_without_gil<ImageFolder>([&] { return ImageFolder::open(root.value); });
          },
          nb::arg("root"))
      .def_prop_ro("classes", [](const ImageFolder& f) { return fs_list(f.classes()); })
      .def_prop_ro("root", [](const ImageFolder& f) { return fs_str(f.root()); })
      .def_prop_ro("left_out", [](const ImageFolder& f) { return fs_list(f.left_out()); });
}

}  // namespace chute::py
