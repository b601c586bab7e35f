#include "chute/pack/pack_transform.h"

#include <algorithm>
#include <string>

namespace chute {

Status StoreOptions::validate() const {
  if (max_side < 0 || max_shorter_side < 0) return invalid_argument("max_side and max_shorter_side must be positive");
  if (max_side > 0 && max_shorter_side > 0) return invalid_argument("give max_side or max_shorter_side, not both");
  if (quality < 1 || quality > 100)
    return invalid_argument("quality must be in [1, 100], got " + std::to_string(quality));
  if (raw_below < 0) return invalid_argument("raw_below must be a pixel count >= 0");
  return Status::ok();
}

void capped_size(int w, int h, const StoreOptions& o, int* out_w, int* out_h) {
  *out_w = w;
  *out_h = h;
  const bool wide = w >= h;
  const int64_t lng = wide ? w : h, shrt = wide ? h : w;
  int64_t new_long = lng, new_short = shrt;
  if (o.max_side > 0 && lng > o.max_side) {
    new_long = o.max_side;
    new_short = std::max<int64_t>(1, int64_t{o.max_side} * shrt / lng);
  } else if (o.max_shorter_side > 0 && shrt > o.max_shorter_side) {
    new_short = o.max_shorter_side;
    new_long = int64_t{o.max_shorter_side} * lng / shrt;
  }
  *out_w = static_cast<int>(wide ? new_long : new_short);
  *out_h = static_cast<int>(wide ? new_short : new_long);
}

RecordKind original_kind(std::span<const uint8_t> data) {
  switch (detect_format(data)) {
    case ImageFormat::kJpeg:
      return RecordKind::kJpeg;
    case ImageFormat::kPng:
      return RecordKind::kPng;
    case ImageFormat::kWebp:
      return RecordKind::kWebp;
    case ImageFormat::kRaw:  // byte 17: the compression (raw_image.h)
      return data.size() > 17 && data[17] == static_cast<uint8_t>(RawCompression::kNone) ? RecordKind::kRaw
                                                                                         : RecordKind::kRawZstd;
    case ImageFormat::kUnknown:
      break;
  }
  return RecordKind::kUnknown;
}

Result<bool> RecordTransformer::transform(std::span<const uint8_t> source, const StoreOptions& o,
                                          std::vector<uint8_t>& out, IndexEntry* entry) {
  CHUTE_ASSIGN_OR_RETURN(const ImageInfo info, decoder_.read_info(source));
  int w = info.width, h = info.height;
  capped_size(info.width, info.height, o, &w, &h);
  const bool resize = w != info.width || h != info.height;
  const bool raw = o.raw || (o.raw_below > 0 && int64_t{w} * h < o.raw_below);
  entry->width = static_cast<uint32_t>(w);
  entry->height = static_cast<uint32_t>(h);
  if (!raw && !resize && o.keep_original) {
    entry->kind = original_kind(source);
    return false;
  }
  const int orientation = ImageDecoder::orientation(source);  // kept, so the record displays as its source
  CHUTE_ASSIGN_OR_RETURN(const ImageView full, decoder_.decode(source, Window{0, 0, info.width, info.height}, decoded_,
                                                               kResampleInputPadding));
  const uint8_t* pixels = full.pixels;
  size_t pitch = full.pitch;
  if (resize) {
    const AxisCoeffs xs = AxisCoeffs::bilinear(info.width, w, 0, w);
    const AxisCoeffs ys = AxisCoeffs::bilinear(info.height, h, 0, h);
    resized_.resize(static_cast<size_t>(w) * h * 3);
    resample_rgb(pixels, pitch, xs, ys, resized_.data(), scratch_);
    pixels = resized_.data();
    pitch = static_cast<size_t>(w) * 3;
  }
  if (raw) {
    CHUTE_RETURN_IF_ERROR(encode_raw_image(pixels, pitch, w, h, o.raw_compression, orientation, out));
    entry->kind = o.raw_compression == RawCompression::kZstd ? RecordKind::kRawZstd : RecordKind::kRaw;
  } else {
    CHUTE_RETURN_IF_ERROR(encoder_.encode(pixels, pitch, w, h, o.quality, o.subsampling, orientation, out));
    entry->kind = RecordKind::kReencodedJpeg;
  }
  return true;
}

}  // namespace chute
