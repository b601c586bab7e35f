#include "chute/decode/image_decoder.h"

#include <cstring>
#include <string>

#include "chute/decode/exif.h"

namespace chute {
namespace {

bool starts_with(std::span<const uint8_t> d, const char* magic, size_t n, size_t at = 0) {
  return d.size() >= at + n && std::memcmp(d.data() + at, magic, n) == 0;
}

// What an undecodable file is, for the error message.
Status unsupported_format(std::span<const uint8_t> d) {
  if (d.empty()) return corrupt_data("empty file");
  const char* kind = nullptr;
  if (starts_with(d, "GIF8", 4))
    kind = "GIF";
  else if (starts_with(d, "BM", 2))
    kind = "BMP";
  else if (starts_with(d, "II*\0", 4) || starts_with(d, "MM\0*", 4))
    kind = "TIFF";
  if (kind != nullptr)
    return unsupported(std::string(kind) + " images are not supported (chute decodes JPEG, PNG and WebP)");
  return unsupported("not a JPEG, PNG or WebP file (unrecognised leading bytes)");
}

}  // namespace

ImageFormat detect_format(std::span<const uint8_t> data) {
  if (JpegDecoder::is_jpeg(data)) return ImageFormat::kJpeg;
  if (PngDecoder::is_png(data)) return ImageFormat::kPng;
  if (WebpDecoder::is_webp(data)) return ImageFormat::kWebp;
  if (RawDecoder::is_raw(data)) return ImageFormat::kRaw;
  return ImageFormat::kUnknown;
}

Result<ImageInfo> ImageDecoder::read_info(std::span<const uint8_t> data) {
  switch (detect_format(data)) {
    case ImageFormat::kJpeg:
      return jpeg_.read_info(data);
    case ImageFormat::kPng:
      return png_.read_info(data);
    case ImageFormat::kWebp:
      return webp_.read_info(data);
    case ImageFormat::kRaw:
      return raw_.read_info(data);
    case ImageFormat::kUnknown:
      break;
  }
  return unsupported_format(data);
}

Result<ImageView> ImageDecoder::decode(std::span<const uint8_t> data, Window window, std::vector<uint8_t>& buffer,
                                       size_t padding, int reduction) {
  switch (detect_format(data)) {
    case ImageFormat::kJpeg:
      return jpeg_.decode(data, window, buffer, padding, reduction);
    case ImageFormat::kPng:
      CHUTE_CHECK(reduction == 1);
      return png_.decode(data, window, buffer, padding);
    case ImageFormat::kWebp:
      CHUTE_CHECK(reduction == 1);
      return webp_.decode(data, window, buffer, padding);
    case ImageFormat::kRaw:
      CHUTE_CHECK(reduction == 1);
      return raw_.decode(data, window, buffer, padding);
    case ImageFormat::kUnknown:
      break;
  }
  return unsupported_format(data);
}

Status ImageDecoder::check(std::span<const uint8_t> data, ImageCheck level, std::vector<uint8_t>& scratch) {
  if (level == ImageCheck::kNone) return Status::ok();
  CHUTE_ASSIGN_OR_RETURN(const ImageInfo info, read_info(data));
  if (info.width <= 0 || info.height <= 0) return corrupt_data("image has no pixels");
  if (int64_t{info.width} * info.height > max_pixels_)
    return Status(StatusCode::kResourceExhausted, "image has " + std::to_string(info.width) + "x" +
                                                      std::to_string(info.height) + " pixels, over the limit of " +
                                                      std::to_string(max_pixels_) +
                                                      " (max_pixels, the decompression bomb guard)");
  if (level == ImageCheck::kHeader) return Status::ok();
  return decode(data, Window{0, 0, info.width, info.height}, scratch).status();
}

int ImageDecoder::max_reduction(std::span<const uint8_t> data) {
  return detect_format(data) == ImageFormat::kJpeg ? 8 : 1;
}

int ImageDecoder::orientation(std::span<const uint8_t> data) {
  switch (detect_format(data)) {
    case ImageFormat::kJpeg:
      return jpeg_exif_orientation(data);
    case ImageFormat::kRaw:
      return RawDecoder::orientation(data);
    default:
      return 1;
  }
}

}  // namespace chute
