#include "chute/decode/exif.h"

#include <algorithm>
#include <cstring>

namespace chute {
namespace {

// The displayed pixel (x, y) of an image stored as w x h lives at this stored pixel (PIL's exif_transpose:
// 2 mirror, 3 rotate 180, 4 flip, 5 transpose, 6 rotate 270, 7 transverse, 8 rotate 90).
void to_stored(int orientation, int w, int h, int x, int y, int* sx, int* sy) {
  switch (orientation) {
    case 2:
      *sx = w - 1 - x, *sy = y;
      break;
    case 3:
      *sx = w - 1 - x, *sy = h - 1 - y;
      break;
    case 4:
      *sx = x, *sy = h - 1 - y;
      break;
    case 5:
      *sx = y, *sy = x;
      break;
    case 6:
      *sx = y, *sy = h - 1 - x;
      break;
    case 7:
      *sx = w - 1 - y, *sy = h - 1 - x;
      break;
    case 8:
      *sx = w - 1 - y, *sy = x;
      break;
    default:
      *sx = x, *sy = y;
      break;
  }
}

// Orientation from a TIFF structure (the Exif payload after "Exif\0\0"); 1 if absent or malformed.
int tiff_orientation(const uint8_t* t, size_t n) {
  if (n < 8) return 1;
  const bool little = t[0] == 'I' && t[1] == 'I';
  if (!little && !(t[0] == 'M' && t[1] == 'M')) return 1;
  auto u16 = [&](size_t at) -> uint32_t { return little ? t[at] | (t[at + 1] << 8) : (t[at] << 8) | t[at + 1]; };
  auto u32 = [&](size_t at) -> uint32_t {
    return little ? u16(at) | (u16(at + 2) << 16) : (u16(at) << 16) | u16(at + 2);
  };
  if (u16(2) != 42) return 1;
  const size_t ifd = u32(4);
  if (ifd > n || n - ifd < 2) return 1;
  const size_t count = u16(ifd);
  for (size_t i = 0; i < count; ++i) {
    const size_t e = ifd + 2 + 12 * i;
    if (e > n || n - e < 12) break;
    if (u16(e) == 0x0112 && u16(e + 2) == 3) {  // Orientation, SHORT
      const uint32_t v = u16(e + 8);
      return v >= 1 && v <= 8 ? static_cast<int>(v) : 1;
    }
  }
  return 1;
}

}  // namespace

int jpeg_exif_orientation(std::span<const uint8_t> d) {
  if (d.size() < 4 || d[0] != 0xFF || d[1] != 0xD8) return 1;
  size_t pos = 2;
  while (pos + 4 <= d.size()) {
    if (d[pos] != 0xFF) return 1;
    const uint8_t marker = d[pos + 1];
    if (marker == 0xFF) {  // fill byte
      ++pos;
      continue;
    }
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD8)) {  // markers without a length
      pos += 2;
      continue;
    }
    if (marker == 0xDA || marker == 0xD9) return 1;  // scan data or end: no Exif before it
    const size_t len = (d[pos + 2] << 8) | d[pos + 3];
    if (len < 2 || pos + 2 + len > d.size()) return 1;
    if (marker == 0xE1 && len >= 8 && std::memcmp(&d[pos + 4], "Exif\0\0", 6) == 0)
      return tiff_orientation(&d[pos + 10], len - 8);
    pos += 2 + len;
  }
  return 1;
}

Window stored_window(Window w, int orientation, int stored_width, int stored_height) {
  int x0, y0, x1, y1;
  to_stored(orientation, stored_width, stored_height, w.x, w.y, &x0, &y0);
  to_stored(orientation, stored_width, stored_height, w.x + w.width - 1, w.y + w.height - 1, &x1, &y1);
  return {std::min(x0, x1), std::min(y0, y1), std::abs(x1 - x0) + 1, std::abs(y1 - y0) + 1};
}

void reorient(const uint8_t* stored, size_t stored_pitch, Window w, int orientation, int stored_width,
              int stored_height, uint8_t* out) {
  const Window s = stored_window(w, orientation, stored_width, stored_height);
  for (int y = 0; y < w.height; ++y) {
    for (int x = 0; x < w.width; ++x) {
      int sx, sy;
      to_stored(orientation, stored_width, stored_height, w.x + x, w.y + y, &sx, &sy);
      std::memcpy(out + (static_cast<size_t>(y) * w.width + x) * 3,
                  stored + static_cast<size_t>(sy - s.y) * stored_pitch + static_cast<size_t>(sx - s.x) * 3, 3);
    }
  }
}

}  // namespace chute
