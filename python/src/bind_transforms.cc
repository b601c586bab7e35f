#include <nanobind/stl/array.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include "bindings.h"
#include "chute/transform/resample.h"
#include "chute/transform/transforms.h"

namespace chute::py {

// Plain structs; the torchvision-style argument handling lives in chute/transforms.py.
void register_transforms(nb::module_& m) {
  nb::class_<RandomResizedCrop>(m, "RandomResizedCrop")
      .def(nb::init<int, int, double, double, double, double>(), nb::arg("height"), nb::arg("width"),
           nb::arg("scale_min"), nb::arg("scale_max"), nb::arg("ratio_min"), nb::arg("ratio_max"));
  nb::class_<Resize>(m, "Resize").def(nb::init<int, int>(), nb::arg("height"), nb::arg("width") = 0);
  nb::class_<CenterCrop>(m, "CenterCrop").def(nb::init<int, int>(), nb::arg("height"), nb::arg("width"));
  nb::class_<RandomHorizontalFlip>(m, "RandomHorizontalFlip").def(nb::init<double>(), nb::arg("p"));
  nb::class_<Normalize>(m, "Normalize")
      .def(nb::init<std::array<float, 3>, std::array<float, 3>>(), nb::arg("mean"), nb::arg("std"));

  // The window RandomResizedCrop takes for source sample `index` in `epoch`: the loader's own draws,
  // exposed so tests can reproduce them with PIL.
  m.def(
      "random_resized_crop_box",
      [](int width, int height, const RandomResizedCrop& t, uint64_t seed, uint64_t epoch, uint64_t index) {
        SampleRng rng(seed, epoch, index);
        const CropBox b = random_resized_crop_box(width, height, t, rng);
        return std::make_tuple(b.x, b.y, b.width, b.height);
      },
      nb::arg("width"), nb::arg("height"), nb::arg("transform"), nb::arg("seed"), nb::arg("epoch"), nb::arg("index"));

  // The Pillow release whose pass order resample_rgb follows (chute/resampling.py sets it at import).
  m.def("resample_pass_order",
        [] { return resample_pass_order() == ResamplePassOrder::kPillow13 ? "pillow13" : "horizontal_first"; });
  m.def(
      "set_resample_pass_order",
      [](const std::string& name) {
        if (name == "pillow13") {
          set_resample_pass_order(ResamplePassOrder::kPillow13);
        } else if (name == "horizontal_first") {
          set_resample_pass_order(ResamplePassOrder::kHorizontalFirst);
        } else {
          throw nb::value_error(
              ("resample pass order must be 'pillow13' or 'horizontal_first', got '" + name + "'").c_str());
        }
      },
      nb::arg("name"));
}

}  // namespace chute::py
