#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "chute/image_folder.h"

namespace chute::py {

int64_t checked_index(const Source& s, int64_t index) {
  if (index < 0 || index >= s.size())
    throw nb::index_error(("sample index " + std::to_string(index) + " out of range").c_str());
  return index;
}

void register_sources(nb::module_& m) {
  // The core trusts its callers with indices; Python callers get IndexError instead.
  nb::class_<Source>(m, "Source")
      .def("__len__", &Source::size)
      .def("label", [](const Source& s, int64_t i) { return s.label(checked_index(s, i)); }, nb::arg("index"))
      .def("name", [](const Source& s, int64_t i) { return s.name(checked_index(s, i)); }, nb::arg("index"));

  nb::class_<ImageFolder, Source>(m, "ImageFolder")
      .def_static(
          "open",
          [](const std::string& root) {
            std::shared_ptr<ImageFolder> folder;
            {
              nb::gil_scoped_release release;
              auto result = ImageFolder::open(root);
              if (!result.is_ok()) {
                nb::gil_scoped_acquire acquire;
                throw_status(result.status());
              }
              folder = std::move(result).value();
            }
            return folder;
          },
          nb::arg("root"))
      .def_prop_ro("classes", &ImageFolder::classes)
      .def_prop_ro("root", &ImageFolder::root)
      .def("labels", [](const ImageFolder& f) {
        std::vector<int64_t> out(f.size());
        for (int64_t i = 0; i < f.size(); ++i) out[i] = f.label(i);
        return out;
      })
      .def("paths", [](const ImageFolder& f) {
        std::vector<std::string> out(f.size());
        for (int64_t i = 0; i < f.size(); ++i) out[i] = f.name(i);
        return out;
      });
}

}  // namespace chute::py
