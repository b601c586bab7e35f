// chute._native.BatchMix: MixUp / CutMix on finished batches (chute/transform/batch_mix.h), given to a
// Loader; its draws and its arithmetic exposed for the tests (torchvision's formula, chute's distribution).
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "chute/transform/batch_mix.h"

namespace chute::py {

nb::tuple mix_tuple(const MixParams& p) {
  return nb::make_tuple(mix_kind_name(p.kind), p.lam, p.label_lam, nb::make_tuple(p.x1, p.y1, p.x2, p.y2));
}

namespace {

MixParams from_tuple(const std::string& kind, double lam, std::tuple<int, int, int, int> box) {
  MixParams p;
  if (kind == "mixup")
    p.kind = MixParams::Kind::kMixUp;
  else if (kind == "cutmix")
    p.kind = MixParams::Kind::kCutMix;
  else
    throw nb::value_error("kind must be 'mixup' or 'cutmix'");
  p.lam = p.label_lam = lam;
  std::tie(p.x1, p.y1, p.x2, p.y2) = box;
  return p;
}

}  // namespace

void register_batch_mix(nb::module_& m) {
  nb::class_<BatchMix>(m, "BatchMix")
      .def(
          "__init__",
          [](BatchMix* self, const std::vector<std::pair<std::string, double>>& ops, std::vector<double> p) {
            std::vector<BatchOp> list;
            for (const auto& [kind, alpha] : ops) {
              if (kind == "mixup")
                list.emplace_back(MixUp{alpha});
              else if (kind == "cutmix")
                list.emplace_back(CutMix{alpha});
              else
                throw nb::value_error(("unknown batch transform '" + kind + "' (mixup, cutmix)").c_str());
            }
            new (self) BatchMix(unwrap(BatchMix::create(std::move(list), std::move(p))));
          },
          nb::arg("ops"), nb::arg("p") = std::vector<double>{},
          "A batch transform: ops [(\"mixup\" | \"cutmix\", alpha), ...], one drawn per batch with probabilities p.")
      .def_prop_ro("p", [](const BatchMix& b) { return b.p(); });

  // (kind, lam, label_lam, (x1, y1, x2, y2)): what the loader draws for the batch that ends at epoch position
  // `batch_key` of epoch `epoch` under `seed`, for images of height x width.
  m.def(
      "draw_batch_mix",
      [](const BatchMix& b, uint64_t seed, uint64_t epoch, uint64_t batch_key, int height, int width) {
        return mix_tuple(b.draw({.seed = seed, .epoch = epoch}, batch_key, height, width));
      },
      nb::arg("mix"), nb::arg("seed"), nb::arg("epoch"), nb::arg("batch_key"), nb::arg("height"), nb::arg("width"));

  // The loader's arithmetic on a batch (float32 or uint8, C-contiguous, NCHW or NHWC per `layout`), in place.
  m.def(
      "apply_batch_mix",
      [](nb::ndarray<nb::ndim<4>, nb::c_contig, nb::device::cpu> images, const std::string& kind, double lam,
         std::tuple<int, int, int, int> box, const std::string& layout) {
        const bool nhwc = layout == "NHWC";
        if (!nhwc && layout != "NCHW") throw nb::value_error("layout must be 'NCHW' or 'NHWC'");
        DType dtype;
        if (images.dtype() == nb::dtype<float>())
          dtype = DType::kFloat32;
        else if (images.dtype() == nb::dtype<uint8_t>())
          dtype = DType::kUInt8;
        else
          throw nb::type_error("images must be float32 or uint8");
        const size_t c = nhwc ? images.shape(3) : images.shape(1);
        if (c != 3) throw nb::value_error("images must have 3 channels");
        const BatchShape shape{.batch = static_cast<int64_t>(images.shape(0)),
                               .height = static_cast<int>(nhwc ? images.shape(1) : images.shape(2)),
                               .width = static_cast<int>(nhwc ? images.shape(2) : images.shape(3)),
                               .format = {.dtype = dtype, .layout = nhwc ? Layout::kNHWC : Layout::kNCHW}};
        const MixParams p = from_tuple(kind, lam, box);
        if (p.kind == MixParams::Kind::kMixUp && dtype != DType::kFloat32)
          throw nb::value_error("MixUp mixes float32 batches only");
        nb::gil_scoped_release release;
        apply_batch_mix(p, shape, images.data());
      },
      nb::arg("images"), nb::arg("kind"), nb::arg("lam"), nb::arg("box"), nb::arg("layout") = "NCHW");
}

}  // namespace chute::py
