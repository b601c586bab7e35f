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
      .def("name", [](const Source& s, int64_t i) { return s.name(checked_index(s, i)); }, nb::arg("index"))
      .def("labels",
           [](const Source& s) {
             std::vector<int64_t> out(static_cast<size_t>(s.size()));
             for (int64_t i = 0; i < s.size(); ++i) out[static_cast<size_t>(i)] = s.label(i);
             return out;
           })
      .def("names", [](const Source& s) {
        std::vector<std::string> out(static_cast<size_t>(s.size()));
        for (int64_t i = 0; i < s.size(); ++i) out[static_cast<size_t>(i)] = s.name(i);
        return out;
      });

  nb::class_<ImageFolder, Source>(m, "ImageFolder")
      .def_static(
          "open",
          [](const std::string& root) { return open_without_gil<ImageFolder>([&] { return ImageFolder::open(root); }); },
          nb::arg("root"))
      .def_prop_ro("classes", &ImageFolder::classes)
      .def_prop_ro("root", &ImageFolder::root)
      .def_prop_ro("left_out", &ImageFolder::left_out);
}

}  // namespace chute::py
