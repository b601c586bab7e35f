// What the per-format decoder fuzz targets share: the first input byte picks a window (the whole image, or a
// part of it anchored away from the corner), the rest is the file; `Decoder` has read_info() and
// decode(file, window, buffer, padding), as PngDecoder and WebpDecoder do. One decoder is reused across
// inputs, like a worker's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

template <class Decoder>
int fuzz_window_decode(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t control = data[0];
  const std::span<const uint8_t> file(data + 1, size - 1);
  static Decoder decoder(/*max_pixels=*/1 << 22);
  static std::vector<uint8_t> buffer;
  auto info = decoder.read_info(file);
  if (!info.is_ok()) return 0;
  const int w = info->width, h = info->height;
  if (w <= 0 || h <= 0) return 0;
  const int x = (control & 1) ? w / 3 : 0, y = (control >> 1 & 1) ? h / 3 : 0;
  const int ww = (control >> 2 & 1) ? (w - x + 1) / 2 : w - x, wh = (control >> 3 & 1) ? (h - y + 1) / 2 : h - y;
  auto view = decoder.decode(file, {x, y, ww, wh}, buffer, /*padding=*/4);
  if (view.is_ok()) {
    // Touch every decoded byte so ASan sees any read past the buffer.
    volatile uint8_t sink = 0;
    for (int r = 0; r < wh; ++r)
      for (int c = 0; c < ww * 3; ++c) sink = sink ^ view->pixels[r * view->pitch + c];
  }
  return 0;
}
