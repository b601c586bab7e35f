// The pixel stage's functional ops and draws, for tests and tools: one op on a numpy image (torchvision's
// functional API by name), a policy's drawn ops over many samples, one sample's draws in a pipeline.
#include <nanobind/ndarray.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <memory>
#include <type_traits>
#include <variant>

#include "bindings.h"
#include "chute/transform/transforms.h"

namespace chute::py {
namespace {

using InImage = nb::ndarray<const uint8_t, nb::ndim<3>, nb::c_contig, nb::device::cpu>;
using OutImage = nb::ndarray<nb::numpy, uint8_t, nb::ndim<3>>;

OutImage to_numpy(const std::vector<uint8_t>& pixels, int height, int width) {
  auto data = std::make_unique<uint8_t[]>(std::max<size_t>(pixels.size(), 1));
  std::memcpy(data.get(), pixels.data(), pixels.size());
  uint8_t* p = data.get();
  nb::capsule owner(data.release(), [](void* q) noexcept { delete[] static_cast<uint8_t*>(q); });
  const size_t shape[3] = {static_cast<size_t>(height), static_cast<size_t>(width), 3};
  return OutImage(p, 3, shape, owner);
}

std::vector<uint8_t> from_numpy(const InImage& image, int& height, int& width) {
  if (image.shape(2) != 3) throw nb::value_error("image must be an HxWx3 uint8 array");
  height = static_cast<int>(image.shape(0));
  width = static_cast<int>(image.shape(1));
  return std::vector<uint8_t>(image.data(), image.data() + image.size());
}

// `op` on a copy of `image`, checked first (ValueError naming the op), without the GIL.
OutImage applied(const PixelOp& op, const InImage& image) {
  int height = 0, width = 0;
  std::vector<uint8_t> pixels = from_numpy(image, height, width);
  if (const Status st = check_pixel_op(op, width, height); !st.is_ok()) throw_status(st);
  {
    nb::gil_scoped_release release;
    PixelScratch scratch;
    apply_pixel_op(op, pixels, width, height, scratch);
  }
  return to_numpy(pixels, height, width);
}

nb::dict op_dict(const PixelOp& op) {
  nb::dict d;
  d["op"] = pixel_op_name(op.kind);
  d["backend"] = op.backend == PixelBackend::kPil ? "pil" : "tensor";
  d["api"] = op.api == TorchvisionApi::kV1 ? "v1" : "v2";
  switch (op.kind) {
    case PixelOpKind::kAffine:
      d["translate"] = std::make_tuple(op.translate_x, op.translate_y);
      d["scale"] = op.scale;
      d["shear"] = std::make_tuple(op.shear_x, op.shear_y);
      [[fallthrough]];
    case PixelOpKind::kRotate:
      d["angle"] = op.angle;
      d["interpolation"] = interpolation_name(op.interpolation);
      d["fill"] = op.fill;
      d["center"] = op.center;
      break;
    case PixelOpKind::kBrightness:
    case PixelOpKind::kContrast:
    case PixelOpKind::kSaturation:
    case PixelOpKind::kSharpness:
    case PixelOpKind::kHue:
      d["factor"] = op.factor;
      break;
    case PixelOpKind::kSolarize:
      d["threshold"] = op.factor;
      break;
    case PixelOpKind::kPosterize:
      d["bits"] = op.bits;
      break;
    case PixelOpKind::kGaussianBlur:
      d["kernel_size"] = std::make_tuple(op.kernel_width, op.kernel_height);
      d["sigma"] = std::make_tuple(op.sigma_x, op.sigma_y);
      break;
    default:
      break;
  }
  return d;
}

nb::list op_draws_list(const std::vector<OpDraw>& ops) {
  nb::list out;
  for (const OpDraw& d : ops) out.append(nb::make_tuple(augment_op_name(d.op), d.magnitude));
  return out;
}

nb::dict augmix_dict(const AugMixDraw& d) {
  nb::dict out;
  out["original_weight"] = d.original_weight;
  out["chain_weights"] = d.chain_weights;
  out["chain_depths"] = d.chain_depths;
  out["ops"] = op_draws_list(d.ops);
  return out;
}

}  // namespace

void register_augment(nb::module_& m) {
  m.def(
      "pixel_op",
      [](const InImage& image, const std::string& op, const std::string& backend, const std::string& api,
         const std::string& interpolation, const Fill& fill, double angle, std::array<double, 2> translate,
         double scale, std::array<double, 2> shear, std::optional<std::array<double, 2>> center, double factor,
         double threshold, int bits, std::array<int, 2> kernel_size, std::array<double, 2> sigma) {
        PixelOp p;
        p.kind = unwrap(parse_pixel_op(op));
        const PolicyOptions options = policy_options(interpolation, fill, backend, api);
        p.backend = options.backend;
        p.api = options.api;
        p.interpolation = options.interpolation;
        p.fill = fill;
        p.angle = angle, p.translate_x = translate[0], p.translate_y = translate[1], p.scale = scale;
        p.shear_x = shear[0], p.shear_y = shear[1], p.center = center;
        p.factor = p.kind == PixelOpKind::kSolarize ? threshold : factor;
        p.bits = bits;
        p.kernel_width = kernel_size[0], p.kernel_height = kernel_size[1];
        p.sigma_x = sigma[0], p.sigma_y = sigma[1];
        return applied(p, image);
      },
      nb::arg("image"), nb::arg("op"), nb::arg("backend") = "pil", nb::arg("api") = "v1",
      nb::arg("interpolation") = "nearest", nb::arg("fill").none() = nb::none(), nb::arg("angle") = 0.0,
      nb::arg("translate") = std::array<double, 2>{0, 0}, nb::arg("scale") = 1.0,
      nb::arg("shear") = std::array<double, 2>{0, 0}, nb::arg("center").none() = nb::none(), nb::arg("factor") = 1.0,
      nb::arg("threshold") = 128.0, nb::arg("bits") = 8, nb::arg("kernel_size") = std::array<int, 2>{1, 1},
      nb::arg("sigma") = std::array<double, 2>{1.0, 1.0},
      "torchvision's functional op `op` ('affine', 'rotate', 'adjust_brightness', ..., 'gaussian_blur') on an "
      "HxWx3 uint8 array, with the arithmetic of torchvision's PIL or tensor implementation, v1 or v2: a new "
      "array.");

  m.def(
      "augment_op",
      [](const InImage& image, const std::string& op, double magnitude, const std::string& interpolation,
         const Fill& fill, const std::string& backend, const std::string& api) {
        const OpDraw draw{unwrap(parse_augment_op(op)), magnitude};
        const PixelOp p = augment_pixel_op(draw, policy_options(interpolation, fill, backend, api));
        return applied(p, image);
      },
      nb::arg("image"), nb::arg("op"), nb::arg("magnitude"), nb::arg("interpolation") = "nearest",
      nb::arg("fill").none() = nb::none(), nb::arg("backend") = "pil", nb::arg("api") = "v1",
      "torchvision's autoaugment._apply_op(img, op, magnitude, interpolation, fill) on an HxWx3 uint8 array (v2: "
      "_apply_image_or_video_transform, Solarize's magnitude being the threshold).");

  m.def(
      "augment_magnitude",
      [](const std::string& space, const std::string& op, int bin, int num_bins, int width, int height,
         const std::string& api) {
        const MagnitudeSpace s = space == "AutoAugment"          ? MagnitudeSpace::kAutoAugment
                                 : space == "RandAugment"        ? MagnitudeSpace::kRandAugment
                                 : space == "TrivialAugmentWide" ? MagnitudeSpace::kTrivialAugmentWide
                                 : space == "AugMix"             ? MagnitudeSpace::kAugMix
                                                                 : throw nb::value_error("unknown policy");
        return op_magnitude(s, unwrap(parse_augment_op(op)), bin, num_bins, width, height,
                            policy_options("nearest", std::nullopt, "pil", api).api);
      },
      nb::arg("policy"), nb::arg("op"), nb::arg("bin"), nb::arg("num_bins"), nb::arg("width"), nb::arg("height"),
      nb::arg("api") = "v1",
      "The magnitude of bin `bin` of `op` in the policy's _augmentation_space (float32 values, as torch's).");

  m.def(
      "transform_draws",
      [](nb::handle transform, int width, int height, uint64_t seed, uint64_t epoch, uint64_t first, int64_t count) {
        const Transform t = native_transform(transform);
        nb::list out;
        std::vector<OpDraw> ops;
        std::vector<PixelOp> pixel_ops;
        AugMixDraw mix;
        for (int64_t i = 0; i < count; ++i) {
          SampleRng rng(seed, epoch, first + static_cast<uint64_t>(i));
          ops.clear();
          pixel_ops.clear();
          std::visit(
              [&](const auto& x) {
                using T = std::decay_t<decltype(x)>;
                if constexpr (std::is_same_v<T, AutoAugment> || std::is_same_v<T, RandAugment> ||
                              std::is_same_v<T, TrivialAugmentWide>) {
                  draw_ops(x, rng, width, height, ops);
                  out.append(op_draws_list(ops));
                } else if constexpr (std::is_same_v<T, AugMix>) {
                  draw_augmix(x, rng, width, height, mix);
                  out.append(augmix_dict(mix));
                } else if constexpr (std::is_same_v<T, ColorJitter> || std::is_same_v<T, RandomGrayscale> ||
                                     std::is_same_v<T, GaussianBlur> || std::is_same_v<T, RandomRotation> ||
                                     std::is_same_v<T, RandomAffine>) {
                  draw_ops(x, rng, width, height, pixel_ops);
                  nb::list dicts;
                  for (const PixelOp& op : pixel_ops) dicts.append(op_dict(op));
                  out.append(dicts);
                } else if constexpr (std::is_same_v<T, RandomErasing>) {
                  const ErasingDraw e = draw_erasing(x, rng, width, height);
                  out.append(e.erase ? nb::object(nb::make_tuple(e.top, e.left, e.height, e.width)) : nb::none());
                } else {
                  throw nb::type_error(
                      "transform_draws takes an augmentation (a policy, AugMix, a random transform "
                      "or RandomErasing)");
                }
              },
              t);
        }
        return out;
      },
      nb::arg("transform"), nb::arg("width"), nb::arg("height"), nb::arg("seed"), nb::arg("epoch"), nb::arg("first"),
      nb::arg("count"),
      "What an augmentation draws for samples first .. first + count - 1 of a width x height image, each keyed "
      "(seed, epoch, index) as in chute.Loader: a policy's (op, magnitude) list, AugMix's dict (weights, chain "
      "depths, ops), a random transform's functional ops (dicts pixel_op accepts), RandomErasing's rectangle "
      "(top, left, height, width) or None.");

  m.def(
      "sample_draws",
      [](const nb::list& transforms, int image_width, int image_height, uint64_t seed, uint64_t epoch, uint64_t index) {
        const Pipeline pipeline = make_pipeline(transforms);
        SampleRng rng(seed, epoch, index);
        const SamplePlan plan = unwrap(pipeline.plan(image_width, image_height, rng));
        AugmentDraws draws;
        pipeline.draw_augment(rng, draws);
        nb::list steps;
        for (const AugmentDraws::Step& s : draws.steps) {
          nb::dict step;
          if (s.flip) {
            step["flip"] = true;
          } else if (s.augmix >= 0) {
            step["augmix"] = augmix_dict(draws.augmix[s.augmix]);
          } else {
            nb::list ops;
            for (uint32_t k = s.begin; k < s.end; ++k) ops.append(op_dict(draws.ops[k]));
            step["ops"] = ops;
          }
          steps.append(step);
        }
        nb::list erasing;
        for (const ErasingDraw& e : draws.erasing)
          erasing.append(e.erase ? nb::object(nb::make_tuple(e.top, e.left, e.height, e.width)) : nb::none());
        nb::dict out;
        out["flip"] = plan.flip;
        out["writer_flips"] = plan.flip && pipeline.writer_flips();
        out["steps"] = steps;
        out["erasing"] = erasing;
        return out;
      },
      nb::arg("transforms"), nb::arg("image_width"), nb::arg("image_height"), nb::arg("seed"), nb::arg("epoch"),
      nb::arg("index"),
      "What chute.Loader draws for source sample `index` of an image_width x image_height image: the flip, "
      "each pixel-stage step's functional ops (dicts pixel_op accepts), each RandomErasing's rectangle "
      "(top, left, height, width) or None.");

  m.def(
      "sample_dirichlet",
      [](double alpha, int n, uint64_t seed, int64_t count) {
        std::vector<float> values(static_cast<size_t>(n * count));
        for (int64_t i = 0; i < count; ++i) {
          SampleRng rng(seed, 0, static_cast<uint64_t>(i));
          sample_dirichlet(alpha, n, rng, values.data() + i * n);
        }
        return values;
      },
      nb::arg("alpha"), nb::arg("n"), nb::arg("seed"), nb::arg("count"),
      "`count` draws of Dirichlet(alpha, ..., alpha) of size n, flat (AugMix's weights).");
}

}  // namespace chute::py
