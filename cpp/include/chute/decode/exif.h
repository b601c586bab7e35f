// EXIF orientation: the one EXIF field that changes pixels. torchvision ignores it by default (PIL does
// not rotate on open); chute follows, and applies it only when asked (DecodeOptions::apply_exif_orientation),
// matching PIL.ImageOps.exif_transpose.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>

#include "chute/decode/jpeg_decoder.h"

namespace chute {

// The orientation tag (1..8) of a JPEG's APP1 Exif segment; 1 when absent or unreadable. Bounds-checked
// against hostile input: it never reads outside `jpeg`.
int jpeg_exif_orientation(std::span<const uint8_t> jpeg);

// For orientations 5..8 the displayed image is the stored one transposed: width and height swap.
inline bool orientation_swaps_axes(int orientation) { return orientation >= 5 && orientation <= 8; }

// The rectangle of the stored image that holds `displayed`, a window of the displayed (oriented) image,
// where the stored image is stored_width x stored_height.
Window stored_window(Window displayed, int orientation, int stored_width, int stored_height);

// Copies `displayed` out of the decoded stored window `stored` (pixels as the decoder returned them,
// covering stored_window(displayed, ...)) into `out`, tightly packed RGB rows, in display orientation.
void reorient(const uint8_t* stored, size_t stored_pitch, Window displayed, int orientation, int stored_width,
              int stored_height, uint8_t* out);

}  // namespace chute
