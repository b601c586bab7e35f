// Edge cases of the pixel ops: identities, 1x1 images, fills, extreme arguments. Pixel parity with Pillow
// and torchvision is python/tests/test_augment_parity.py's (and test_torchvision_augment_real.py's).
#include "chute/transform/pixel_ops.h"

#include <gtest/gtest.h>

#include <cmath>

#include "test_util.h"

namespace chute {
namespace {

constexpr PixelBackend kBackends[] = {PixelBackend::kPil, PixelBackend::kTensor};

std::vector<uint8_t> run(PixelOp op, std::vector<uint8_t> pixels, int width, int height) {
  EXPECT_TRUE(check_pixel_op(op, width, height).is_ok()) << pixel_op_name(op.kind);
  PixelScratch scratch;
  apply_pixel_op(op, pixels, width, height, scratch);
  EXPECT_EQ(pixels.size(), static_cast<size_t>(width) * height * 3);
  return pixels;
}

PixelOp make(PixelOpKind kind, PixelBackend backend = PixelBackend::kPil) {
  PixelOp op;
  op.kind = kind;
  op.backend = backend;
  return op;
}

const uint8_t* at(const std::vector<uint8_t>& img, int width, int x, int y) { return &img[(y * width + x) * 3]; }

TEST(PixelOpsTest, NeutralArgumentsLeaveTheImage) {
  const int w = 23, h = 17;
  const std::vector<uint8_t> img = testing::synthetic_rgb(w, h, 3);
  for (PixelBackend backend : kBackends) {
    for (Interpolation interpolation : {Interpolation::kNearest, Interpolation::kBilinear}) {
      PixelOp affine = make(PixelOpKind::kAffine, backend);
      affine.interpolation = interpolation;
      EXPECT_EQ(run(affine, img, w, h), img) << "affine " << interpolation_name(interpolation);
      PixelOp rotate = make(PixelOpKind::kRotate, backend);
      rotate.interpolation = interpolation;
      EXPECT_EQ(run(rotate, img, w, h), img) << "rotate " << interpolation_name(interpolation);
    }
    for (PixelOpKind kind :
         {PixelOpKind::kBrightness, PixelOpKind::kContrast, PixelOpKind::kSaturation, PixelOpKind::kSharpness}) {
      EXPECT_EQ(run(make(kind, backend), img, w, h), img) << pixel_op_name(kind) << " factor 1";
    }
    PixelOp posterize = make(PixelOpKind::kPosterize, backend);
    posterize.bits = 8;
    EXPECT_EQ(run(posterize, img, w, h), img);
    PixelOp solarize = make(PixelOpKind::kSolarize, backend);
    solarize.factor = 256.0;  // nothing reaches it
    EXPECT_EQ(run(solarize, img, w, h), img);
  }
  PixelOp blur = make(PixelOpKind::kGaussianBlur, PixelBackend::kTensor);  // a 1x1 kernel is the identity
  EXPECT_EQ(run(blur, img, w, h), img);
}

TEST(PixelOpsTest, OnePixelImages) {
  const std::vector<uint8_t> px = {200, 100, 7};
  for (PixelBackend backend : kBackends) {
    for (PixelOpKind kind : {PixelOpKind::kAffine, PixelOpKind::kRotate, PixelOpKind::kBrightness,
                             PixelOpKind::kContrast, PixelOpKind::kSaturation, PixelOpKind::kSharpness,
                             PixelOpKind::kAutoContrast, PixelOpKind::kEqualize, PixelOpKind::kHorizontalFlip}) {
      PixelOp op = make(kind, backend);
      if (kind == PixelOpKind::kSharpness) op.factor = 2.0;  // an image under 3x3 is its own degenerate
      EXPECT_EQ(run(op, px, 1, 1), px) << pixel_op_name(kind);
    }
    EXPECT_EQ(run(make(PixelOpKind::kInvert, backend), px, 1, 1), (std::vector<uint8_t>{55, 155, 248}));
  }
  // A quarter turn of a 1x1 image about its centre is the pixel itself (PIL transposes).
  PixelOp quarter = make(PixelOpKind::kRotate);
  quarter.angle = 90;
  EXPECT_EQ(run(quarter, px, 1, 1), px);
  // Moved out entirely: the fill.
  PixelOp away = make(PixelOpKind::kAffine);
  away.translate_x = 5;
  away.fill = std::array<double, 3>{1.9, 300, -4};  // int()ed, then clipped as Pillow's ink
  EXPECT_EQ(run(away, px, 1, 1), (std::vector<uint8_t>{1, 255, 0}));
}

TEST(PixelOpsTest, TranslationUncoversTheFill) {
  const int w = 12, h = 9;
  const std::vector<uint8_t> img = testing::synthetic_rgb(w, h, 5);
  for (PixelBackend backend : kBackends) {
    PixelOp op = make(PixelOpKind::kAffine, backend);
    op.translate_x = 4;
    op.translate_y = -2;
    op.fill = std::array<double, 3>{10, 20, 30};
    const auto out = run(op, img, w, h);
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        const bool uncovered = x < 4 || y >= h - 2;
        const uint8_t* expect = uncovered ? nullptr : at(img, w, x - 4, y + 2);
        for (int c = 0; c < 3; ++c)
          ASSERT_EQ(at(out, w, x, y)[c], uncovered ? 10 * (c + 1) : expect[c]) << x << "," << y;
      }
    // Without a fill: black.
    op.fill.reset();
    EXPECT_EQ(at(run(op, img, w, h), w, 0, 0)[0], 0);
  }
}

TEST(PixelOpsTest, QuarterTurnsAreTransposes) {
  const int n = 7;
  const std::vector<uint8_t> img = testing::synthetic_rgb(n, n, 9);
  for (double angle : {90.0, -270.0, 180.0, 270.0, -90.0, 450.0}) {
    PixelOp op = make(PixelOpKind::kRotate);
    op.angle = angle;
    const auto out = run(op, img, n, n);
    const int turns = static_cast<int>(std::lround((std::fmod(angle, 360.0) + 360.0) / 90.0)) % 4;
    for (int y = 0; y < n; ++y)
      for (int x = 0; x < n; ++x) {
        // counter-clockwise: input (x, y) lands on (y, n - 1 - x) per quarter turn
        int sx = x, sy = y;
        for (int t = 0; t < turns; ++t) {
          const int px = n - 1 - sy, py = sx;  // the source of output (sx, sy) after one more turn
          sx = px, sy = py;
        }
        ASSERT_EQ(at(out, n, x, y)[0], at(img, n, sx, sy)[0]) << angle << " at " << x << "," << y;
      }
  }
}

TEST(PixelOpsTest, ExtremeArgumentsStayInTheImage) {
  const int w = 9, h = 6;
  const std::vector<uint8_t> img = testing::synthetic_rgb(w, h, 11);
  for (PixelBackend backend : kBackends) {
    for (Interpolation interpolation : {Interpolation::kNearest, Interpolation::kBilinear}) {
      PixelOp shear = make(PixelOpKind::kAffine, backend);
      shear.interpolation = interpolation;
      shear.shear_x = 89.9;  // tan near infinity
      shear.center = std::array<double, 2>{0, 0};
      run(shear, img, w, h);
      PixelOp far = make(PixelOpKind::kAffine, backend);
      far.interpolation = interpolation;
      far.translate_x = 1e6;  // beyond Pillow's fixed-point range: its float loop
      far.angle = 33;
      far.fill = std::array<double, 3>{7, 7, 7};
      const auto out = run(far, img, w, h);
      for (uint8_t v : out) ASSERT_EQ(v, 7);
      PixelOp tiny = make(PixelOpKind::kAffine, backend);
      tiny.interpolation = interpolation;
      tiny.scale = 1e-6;
      run(tiny, img, w, h);
    }
    PixelOp bright = make(PixelOpKind::kBrightness, backend);
    bright.factor = 0.0;
    for (uint8_t v : run(bright, img, w, h)) ASSERT_EQ(v, 0);
    bright.factor = 1e9;
    for (uint8_t v : run(bright, img, w, h)) ASSERT_TRUE(v == 0 || v == 255);
    PixelOp contrast = make(PixelOpKind::kContrast, backend);
    contrast.factor = 0.0;  // the mean grey everywhere
    const auto grey = run(contrast, img, w, h);
    for (uint8_t v : grey) ASSERT_EQ(v, grey[0]);
  }
  PixelOp posterize = make(PixelOpKind::kPosterize, PixelBackend::kTensor);
  posterize.bits = 0;  // the tensor path clears every bit; Pillow refuses 0 bits
  for (uint8_t v : run(posterize, img, w, h)) ASSERT_EQ(v, 0);
  posterize.backend = PixelBackend::kPil;
  EXPECT_FALSE(check_pixel_op(posterize, w, h).is_ok());
}

TEST(PixelOpsTest, LookupTableOps) {
  const std::vector<uint8_t> img = {0, 50, 100, 150, 200, 255};  // two pixels
  PixelOp posterize = make(PixelOpKind::kPosterize);
  posterize.bits = 2;
  EXPECT_EQ(run(posterize, img, 2, 1), (std::vector<uint8_t>{0, 0, 64, 128, 192, 192}));
  PixelOp solarize = make(PixelOpKind::kSolarize);
  solarize.factor = 150;  // >= threshold inverted
  EXPECT_EQ(run(solarize, img, 2, 1), (std::vector<uint8_t>{0, 50, 100, 105, 55, 0}));
  solarize.factor = 0.0;
  EXPECT_EQ(run(solarize, img, 2, 1), run(make(PixelOpKind::kInvert), img, 2, 1));
  // Autocontrast stretches each channel's own range: here every channel has two levels.
  for (PixelBackend backend : kBackends) {
    EXPECT_EQ(run(make(PixelOpKind::kAutoContrast, backend), img, 2, 1),
              (std::vector<uint8_t>{0, 0, 0, 255, 255, 255}));
  }
}

TEST(PixelOpsTest, EqualizeFlattensTheHistogram) {
  // 256 pixels with levels 0..255 in every channel: already flat, unchanged; then 999 pixels at 10 and
  // one darker: the bins but the last hold 1 pixel, step = 1 // 255 = 0 -> unchanged.
  std::vector<uint8_t> ramp(256 * 3);
  for (int i = 0; i < 256 * 3; ++i) ramp[i] = static_cast<uint8_t>(i / 3);
  EXPECT_EQ(run(make(PixelOpKind::kEqualize), ramp, 16, 16), ramp);
  std::vector<uint8_t> dark(1000 * 3, 10);
  for (int i = 0; i < 3; ++i) dark[i] = 5;
  EXPECT_EQ(run(make(PixelOpKind::kEqualize), dark, 1000, 1), dark);
  // 600 pixels at 10, 400 at 20: step = 600 // 255 = 2; lut[10] = (1 + 0) // 2 = 0, lut[20] = (1 + 600) // 2.
  std::vector<uint8_t> two(1000 * 3, 10);
  for (int i = 600 * 3; i < 1000 * 3; ++i) two[i] = 20;
  const auto out = run(make(PixelOpKind::kEqualize), two, 1000, 1);
  EXPECT_EQ(out[0], 0);
  EXPECT_EQ(out[999 * 3], 255);  // 300, clipped as Image.point clips
}

TEST(PixelOpsTest, GrayscaleAndBlur) {
  const std::vector<uint8_t> px = {255, 0, 0};
  EXPECT_EQ(run(make(PixelOpKind::kGrayscale), px, 1, 1), (std::vector<uint8_t>{76, 76, 76}));  // Pillow's luma
  EXPECT_EQ(run(make(PixelOpKind::kGrayscale, PixelBackend::kTensor), px, 1, 1),
            (std::vector<uint8_t>{76, 76, 76}));  // 0.2989 * 255 = 76.2
  // A constant image blurs to itself; a kernel wider than the image is refused (torch's reflect padding).
  const std::vector<uint8_t> flat(10 * 10 * 3, 77);
  PixelOp blur = make(PixelOpKind::kGaussianBlur, PixelBackend::kTensor);
  blur.kernel_width = blur.kernel_height = 9;
  blur.sigma_x = blur.sigma_y = 3.0;
  EXPECT_EQ(run(blur, flat, 10, 10), flat);
  blur.kernel_width = 21;
  EXPECT_FALSE(check_pixel_op(blur, 10, 10).is_ok());
  blur.kernel_width = 4;
  EXPECT_FALSE(check_pixel_op(blur, 10, 10).is_ok());
}

TEST(PixelOpsTest, InverseAffineMatrixOfTheIdentity) {
  const auto m = inverse_affine_matrix(TorchvisionApi::kV1, {3.0, 4.0}, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0);
  EXPECT_EQ(m[0], 1.0);
  EXPECT_EQ(m[1], 0.0);
  EXPECT_EQ(m[2], 0.0);
  EXPECT_EQ(m[3], 0.0);
  EXPECT_EQ(m[4], 1.0);
  EXPECT_EQ(m[5], 0.0);
  // A translation by (2, -1) reads the input at (x - 2, y + 1).
  const auto t = inverse_affine_matrix(TorchvisionApi::kV1, {3.0, 4.0}, 0.0, 2.0, -1.0, 1.0, 0.0, 0.0);
  EXPECT_EQ(inverse_affine_matrix(TorchvisionApi::kV2, {3.0, 4.0}, 0.0, 2.0, -1.0, 1.0, 0.0, 0.0), t);
  EXPECT_EQ(t[2], -2.0);
  EXPECT_EQ(t[5], 1.0);
}

TEST(PixelOpsTest, ArgumentChecks) {
  PixelOp op = make(PixelOpKind::kBrightness);
  op.factor = -0.1;
  EXPECT_FALSE(check_pixel_op(op, 4, 4).is_ok());
  op = make(PixelOpKind::kHue);
  op.factor = 0.6;
  EXPECT_FALSE(check_pixel_op(op, 4, 4).is_ok());
  op.factor = 0.2;
  op.backend = PixelBackend::kTensor;
  EXPECT_EQ(check_pixel_op(op, 4, 4).code(), StatusCode::kUnsupported);
  op = make(PixelOpKind::kAffine);
  op.scale = 0.0;
  EXPECT_FALSE(check_pixel_op(op, 4, 4).is_ok());
  EXPECT_TRUE(parse_pixel_op("adjust_sharpness").is_ok());
  EXPECT_FALSE(parse_pixel_op("sharpen").is_ok());
  EXPECT_FALSE(parse_interpolation("bicubic").is_ok());
}

}  // namespace
}  // namespace chute
