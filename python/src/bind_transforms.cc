#include <nanobind/stl/array.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <type_traits>

#include "bindings.h"
#include "chute/transform/resample.h"
#include "chute/transform/transforms.h"

namespace chute::py {

namespace {

// The first alternative of the Transform variant whose bound class `t` is an instance of.
template <size_t I = 0>
Transform first_transform(nb::handle t) {
  if constexpr (I == std::variant_size_v<Transform>) {
    throw nb::type_error("not a native transform");
  } else {
    using T = std::variant_alternative_t<I, Transform>;
    if (nb::isinstance<T>(t)) return nb::cast<T>(t);
    return first_transform<I + 1>(t);
  }
}

PixelBackend parse_backend(const std::string& name) {
  if (name == "pil") return PixelBackend::kPil;
  if (name == "tensor") return PixelBackend::kTensor;
  throw nb::value_error(("backend must be 'pil' or 'tensor', got '" + name + "'").c_str());
}

TorchvisionApi parse_api(const std::string& name) {
  if (name == "v1") return TorchvisionApi::kV1;
  if (name == "v2") return TorchvisionApi::kV2;
  throw nb::value_error(("api must be 'v1' or 'v2', got '" + name + "'").c_str());
}

// Augmentation structs: their arguments by name, already checked and normalised by chute/augment.py and
// chute/random_transforms.py (backend 'pil' | 'tensor', api 'v1' | 'v2').
void register_augment_structs(nb::module_& m) {
  using S = const std::string&;
  using Center = std::optional<std::array<double, 2>>;
  nb::class_<AutoAugment>(m, "AutoAugment")
      .def(
          "__init__",
          [](AutoAugment* self, S policy, S interpolation, const Fill& fill, S backend, S api) {
            new (self) AutoAugment{unwrap(parse_auto_augment_policy(policy)),
                                   policy_options(interpolation, fill, backend, api)};
          },
          nb::arg("policy"), nb::arg("interpolation"), nb::arg("fill").none(), nb::arg("backend"), nb::arg("api"));
  nb::class_<RandAugment>(m, "RandAugment")
      .def(
          "__init__",
          [](RandAugment* self, int num_ops, int magnitude, int num_magnitude_bins, S interpolation, const Fill& fill,
             S backend, S api) {
            new (self)
                RandAugment{num_ops, magnitude, num_magnitude_bins, policy_options(interpolation, fill, backend, api)};
          },
          nb::arg("num_ops"), nb::arg("magnitude"), nb::arg("num_magnitude_bins"), nb::arg("interpolation"),
          nb::arg("fill").none(), nb::arg("backend"), nb::arg("api"));
  nb::class_<TrivialAugmentWide>(m, "TrivialAugmentWide")
      .def(
          "__init__",
          [](TrivialAugmentWide* self, int num_magnitude_bins, S interpolation, const Fill& fill, S backend, S api) {
            new (self) TrivialAugmentWide{num_magnitude_bins, policy_options(interpolation, fill, backend, api)};
          },
          nb::arg("num_magnitude_bins"), nb::arg("interpolation"), nb::arg("fill").none(), nb::arg("backend"),
          nb::arg("api"));
  nb::class_<AugMix>(m, "AugMix")
      .def(
          "__init__",
          [](AugMix* self, int severity, int mixture_width, int chain_depth, double alpha, bool all_ops,
             S interpolation, const Fill& fill, S api) {
            new (self) AugMix{severity, mixture_width, chain_depth,
                              alpha,    all_ops,       policy_options(interpolation, fill, "tensor", api)};
          },
          nb::arg("severity"), nb::arg("mixture_width"), nb::arg("chain_depth"), nb::arg("alpha"), nb::arg("all_ops"),
          nb::arg("interpolation"), nb::arg("fill").none(), nb::arg("api"));
  nb::class_<ColorJitter>(m, "ColorJitter")
      .def(
          "__init__",
          [](ColorJitter* self, std::optional<Range> brightness, std::optional<Range> contrast,
             std::optional<Range> saturation, std::optional<Range> hue, S backend, S api) {
            new (self) ColorJitter{brightness, contrast, saturation, hue, parse_backend(backend), parse_api(api)};
          },
          nb::arg("brightness").none(), nb::arg("contrast").none(), nb::arg("saturation").none(), nb::arg("hue").none(),
          nb::arg("backend"), nb::arg("api"));
  nb::class_<RandomGrayscale>(m, "RandomGrayscale")
      .def(
          "__init__",
          [](RandomGrayscale* self, double p, S backend, S api) {
            new (self) RandomGrayscale{p, parse_backend(backend), parse_api(api)};
          },
          nb::arg("p"), nb::arg("backend"), nb::arg("api"));
  nb::class_<GaussianBlur>(m, "GaussianBlur")
      .def(
          "__init__",
          [](GaussianBlur* self, int kernel_width, int kernel_height, double sigma_min, double sigma_max, S api) {
            new (self) GaussianBlur{kernel_width, kernel_height, sigma_min, sigma_max, parse_api(api)};
          },
          nb::arg("kernel_width"), nb::arg("kernel_height"), nb::arg("sigma_min"), nb::arg("sigma_max"),
          nb::arg("api"));
  nb::class_<RandomRotation>(m, "RandomRotation")
      .def(
          "__init__",
          [](RandomRotation* self, Range degrees, S interpolation, Center center, const Fill& fill, S backend, S api) {
            new (self) RandomRotation{
                degrees,       unwrap(parse_interpolation(interpolation)), center, fill, parse_backend(backend),
                parse_api(api)};
          },
          nb::arg("degrees"), nb::arg("interpolation"), nb::arg("center").none(), nb::arg("fill").none(),
          nb::arg("backend"), nb::arg("api"));
  nb::class_<RandomAffine>(m, "RandomAffine")
      .def(
          "__init__",
          [](RandomAffine* self, Range degrees, std::optional<Range> translate, std::optional<Range> scale,
             std::optional<Range> shear_x, std::optional<Range> shear_y, S interpolation, Center center,
             const Fill& fill, S backend, S api) {
            RandomAffine t{degrees, translate, scale, shear_x, shear_y};
            t.interpolation = unwrap(parse_interpolation(interpolation));
            t.center = center;
            t.fill = fill;
            t.backend = parse_backend(backend);
            t.api = parse_api(api);
            new (self) RandomAffine(t);
          },
          nb::arg("degrees"), nb::arg("translate").none(), nb::arg("scale").none(), nb::arg("shear_x").none(),
          nb::arg("shear_y").none(), nb::arg("interpolation"), nb::arg("center").none(), nb::arg("fill").none(),
          nb::arg("backend"), nb::arg("api"));
  nb::class_<RandomErasing>(m, "RandomErasing")
      .def(
          "__init__",
          [](RandomErasing* self, double p, Range scale, Range ratio, bool random, std::array<float, 3> value) {
            new (self) RandomErasing{p, scale[0], scale[1], ratio[0], ratio[1], random, value};
          },
          nb::arg("p"), nb::arg("scale"), nb::arg("ratio"), nb::arg("random"), nb::arg("value"));
}

}  // namespace

PolicyOptions policy_options(const std::string& interpolation, const Fill& fill, const std::string& backend,
                             const std::string& api) {
  return PolicyOptions{unwrap(parse_interpolation(interpolation)), fill, parse_backend(backend), parse_api(api)};
}

Transform native_transform(nb::handle t) { return first_transform(t); }

Pipeline make_pipeline(const nb::list& transforms) {
  std::vector<Transform> list;
  for (nb::handle t : transforms) list.push_back(native_transform(t));
  return unwrap(Pipeline::create(std::move(list)));
}

// Plain structs; the torchvision-style argument handling lives in chute/transforms.py and chute/augment.py.
void register_transforms(nb::module_& m) {
  register_augment_structs(m);
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
