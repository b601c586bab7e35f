#include "chute/decode/webp_decoder.h"

#include <cstring>
#include <string>

#include <webp/decode.h>

namespace chute {
namespace {

// libwebp's verdict as a Status; `what` says which step failed.
Status webp_error(VP8StatusCode code, const char* what) {
  const std::string where = std::string("WebP ") + what + ": ";
  switch (code) {
    case VP8_STATUS_OUT_OF_MEMORY:
      return Status(StatusCode::kResourceExhausted, where + "out of memory");
    case VP8_STATUS_UNSUPPORTED_FEATURE:
      return unsupported(where + "a feature libwebp does not support");
    case VP8_STATUS_NOT_ENOUGH_DATA:
      return corrupt_data(where + "truncated file (not enough data)");
    case VP8_STATUS_BITSTREAM_ERROR:
      return corrupt_data(where + "corrupt bitstream");
    case VP8_STATUS_INVALID_PARAM:
      return corrupt_data(where + "invalid parameter in the file");
    default:
      return corrupt_data(where + "error " + std::to_string(static_cast<int>(code)));
  }
}

Result<WebPBitstreamFeatures> features(std::span<const uint8_t> data) {
  if (data.empty()) return corrupt_data("empty file");
  if (!WebpDecoder::is_webp(data)) return unsupported("not a WebP file");
  WebPBitstreamFeatures f;
  const VP8StatusCode code = WebPGetFeatures(data.data(), data.size(), &f);
  if (code != VP8_STATUS_OK) return webp_error(code, "header");
  if (f.has_animation) return unsupported("animated WebP images are not supported (chute decodes still WebP)");
  if (f.width <= 0 || f.height <= 0) return corrupt_data("WebP header: image has no pixels");
  return f;
}

}  // namespace

bool WebpDecoder::is_webp(std::span<const uint8_t> data) {
  return data.size() >= 12 && std::memcmp(data.data(), "RIFF", 4) == 0 && std::memcmp(data.data() + 8, "WEBP", 4) == 0;
}

Result<ImageInfo> WebpDecoder::read_info(std::span<const uint8_t> data) {
  CHUTE_ASSIGN_OR_RETURN(const WebPBitstreamFeatures f, features(data));
  return ImageInfo{f.width, f.height, f.has_alpha ? 4 : 3, false};
}

Result<ImageView> WebpDecoder::decode(std::span<const uint8_t> data, Window win, std::vector<uint8_t>& buffer,
                                      size_t padding) {
  CHUTE_ASSIGN_OR_RETURN(const WebPBitstreamFeatures f, features(data));
  const int64_t width = f.width, height = f.height;
  if (width * height > max_pixels_)
    return Status(StatusCode::kResourceExhausted, "image has " + std::to_string(width) + "x" + std::to_string(height) +
                                                      " pixels, over the limit of " + std::to_string(max_pixels_) +
                                                      " (max_pixels, the decompression bomb guard)");
  if (win.x < 0 || win.y < 0 || win.width <= 0 || win.height <= 0 || win.x + int64_t{win.width} > width ||
      win.y + int64_t{win.height} > height)
    return invalid_argument("decode window outside the image");
  const size_t pitch = 3 * static_cast<size_t>(width);
  const size_t size = pitch * static_cast<size_t>(height);
  buffer.resize(size + padding);

  WebPDecoderConfig config;
  CHUTE_CHECK(WebPInitDecoderConfig(&config));  // fails only when the headers and the library disagree
  config.output.colorspace = MODE_RGB;          // alpha dropped, as Pillow's convert("RGB") does
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = buffer.data();
  config.output.u.RGBA.stride = static_cast<int>(pitch);
  config.output.u.RGBA.size = size;
  const VP8StatusCode code = WebPDecode(data.data(), data.size(), &config);
  WebPFreeDecBuffer(&config.output);  // external memory: frees nothing of ours
  if (code != VP8_STATUS_OK) return webp_error(code, "decode");
  return ImageView{buffer.data() + static_cast<size_t>(win.y) * pitch + 3 * static_cast<size_t>(win.x), pitch};
}

}  // namespace chute
