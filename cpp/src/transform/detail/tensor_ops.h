// torchvision's functional_tensor ops on a uint8 RGB image (what AugMix runs, and GaussianBlur on any
// input), in float32 like torch: the blends of _blend, autocontrast's scale, grid_sample for affine and
// rotate, conv2d for the sharpness degenerate and the blur. The element-wise steps are torch's exactly;
// where torch reduces or convolves (conv2d, bmm), it picks its own summation order, so a pixel can differ
// by one level there (docs/AUGMENT.md). Internal to the pixel stage (pixel_ops.cc).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "chute/transform/pixel_ops.h"

namespace chute::detail {

// torch.linspace(start, end, steps)[i] in float32, as torch's CPU kernel computes it (the first half
// from start, the second from end, each one fused multiply-add).
float torch_linspace(double start, double end, int64_t steps, int64_t i);

// F_t.affine / F_t.rotate with expand=False: `matrix` is torchvision's inverse matrix about the image
// centre (center_f), the grid through grid_sample(align_corners=False, zeros padding); with a fill, the
// mask channel blends (bilinear) or replaces (nearest) what lies outside.
// `api`: torchvision.transforms (v1, functional_tensor) or v2 (v2/functional: fused blends and grey, its
// sharpness and autocontrast arithmetic, mask * (img - fill) + fill, the softmax blur kernel).
void tensor_affine(const uint8_t* src, int width, int height, const std::array<double, 6>& matrix,
                   Interpolation interpolation, const Fill& fill, TorchvisionApi api, uint8_t* dst,
                   std::vector<float>& grid);

void tensor_brightness(uint8_t* rgb, size_t pixels, double factor);  // the same in v1 and v2
void tensor_saturation(uint8_t* rgb, size_t pixels, double factor, TorchvisionApi api, std::vector<uint8_t>& spare);
void tensor_contrast(uint8_t* rgb, size_t pixels, double factor, TorchvisionApi api);
void tensor_sharpness(uint8_t* rgb, int width, int height, double factor, TorchvisionApi api,
                      std::vector<uint8_t>& spare);
void tensor_autocontrast(uint8_t* rgb, size_t pixels, TorchvisionApi api);
void tensor_grayscale(uint8_t* rgb, size_t pixels, TorchvisionApi api);  // 0.2989 r + 0.587 g + 0.114 b, truncated
void tensor_gaussian_blur(uint8_t* rgb, int width, int height, int kernel_width, int kernel_height, double sigma_x,
                          double sigma_y, TorchvisionApi api, std::vector<float>& rows, std::vector<float>& kernels);

}  // namespace chute::detail
