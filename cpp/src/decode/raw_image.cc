#include "chute/decode/raw_image.h"

#include <zstd.h>
#include <zstd_errors.h>

#include <cstring>
#include <new>
#include <string>

#include "base/detail/little_endian.h"

namespace chute {

using detail::load_le;
using detail::store_le;

namespace {

struct Header {
  int width = 0, height = 0;
  RawCompression compression = RawCompression::kNone;
  int orientation = 1;
  uint64_t pixel_bytes = 0;
};

Result<Header> parse_header(std::span<const uint8_t> d) {
  if (d.size() < kRawHeaderSize)
    return corrupt_data("raw image: " + std::to_string(d.size()) + " bytes, shorter than its 32-byte header");
  if (std::memcmp(d.data(), kRawMagic, 8) != 0) return corrupt_data("raw image: bad magic");
  Header h;
  const uint32_t w = load_le<uint32_t>(d.data() + 8), ht = load_le<uint32_t>(d.data() + 12);
  if (w == 0 || ht == 0 || w > INT32_MAX || ht > INT32_MAX)
    return corrupt_data("raw image: bad size " + std::to_string(w) + "x" + std::to_string(ht));
  h.width = static_cast<int>(w);
  h.height = static_cast<int>(ht);
  if (d[16] != 3) return unsupported("raw image: " + std::to_string(d[16]) + " channels (chute stores RGB, 3)");
  if (d[17] > static_cast<uint8_t>(RawCompression::kZstd))
    return unsupported("raw image: unknown compression " + std::to_string(d[17]));
  h.compression = static_cast<RawCompression>(d[17]);
  h.orientation = d[18] >= 1 && d[18] <= 8 ? d[18] : 1;
  h.pixel_bytes = load_le<uint64_t>(d.data() + 24);
  const uint64_t expected = uint64_t{w} * ht * 3;  // < 2^64: both factors < 2^31
  if (h.pixel_bytes != expected)
    return corrupt_data("raw image: header says " + std::to_string(h.pixel_bytes) + " pixel bytes for " +
                        std::to_string(w) + "x" + std::to_string(ht) + " RGB, which is " + std::to_string(expected));
  const std::span<const uint8_t> body = d.subspan(kRawHeaderSize);
  if (h.compression == RawCompression::kNone) {
    if (body.size() != expected)
      return corrupt_data("raw image: " + std::to_string(body.size()) + " bytes of pixels, expected " +
                          std::to_string(expected) + " (" + std::to_string(w) + "x" + std::to_string(ht) + " RGB)");
  } else {
    const unsigned long long content = ZSTD_getFrameContentSize(body.data(), body.size());
    if (content == ZSTD_CONTENTSIZE_ERROR) return corrupt_data("raw image: the pixels are not a zstd frame");
    if (content == ZSTD_CONTENTSIZE_UNKNOWN) return corrupt_data("raw image: the zstd frame does not record its size");
    if (content != expected)
      return corrupt_data("raw image: the zstd frame holds " + std::to_string(content) + " bytes, expected " +
                          std::to_string(expected) + " (" + std::to_string(w) + "x" + std::to_string(ht) + " RGB)");
  }
  return h;
}

}  // namespace

struct RawDecoder::State {
  struct FreeDctx {
    void operator()(ZSTD_DCtx* c) const { ZSTD_freeDCtx(c); }
  };
  std::unique_ptr<ZSTD_DCtx, FreeDctx> dctx;
};

Status encode_raw_image(const uint8_t* pixels, size_t pitch, int width, int height, RawCompression compression,
                        int orientation, std::vector<uint8_t>& out) {
  if (width <= 0 || height <= 0) return invalid_argument("raw image: no pixels");
  const size_t row = static_cast<size_t>(width) * 3, bytes = row * static_cast<size_t>(height);
  std::vector<uint8_t> packed;  // the rows without their pitch, when they have one
  const uint8_t* src = pixels;
  if (pitch != row) {
    packed.resize(bytes);
    for (int y = 0; y < height; ++y) std::memcpy(packed.data() + y * row, pixels + y * pitch, row);
    src = packed.data();
  }
  out.assign(kRawHeaderSize, 0);
  std::memcpy(out.data(), kRawMagic, 8);
  store_le<uint32_t>(out.data() + 8, static_cast<uint32_t>(width));
  store_le<uint32_t>(out.data() + 12, static_cast<uint32_t>(height));
  out[16] = 3;
  out[17] = static_cast<uint8_t>(compression);
  out[18] = static_cast<uint8_t>(orientation >= 1 && orientation <= 8 ? orientation : 1);
  store_le<uint64_t>(out.data() + 24, bytes);
  if (compression == RawCompression::kNone) {
    out.insert(out.end(), src, src + bytes);
    return Status::ok();
  }
  out.resize(kRawHeaderSize + ZSTD_compressBound(bytes));
  const size_t n = ZSTD_compress(out.data() + kRawHeaderSize, out.size() - kRawHeaderSize, src, bytes, kRawZstdLevel);
  // Into a buffer of ZSTD_compressBound bytes, compression fails only when zstd cannot allocate.
  if (ZSTD_isError(n)) throw std::bad_alloc();
  out.resize(kRawHeaderSize + n);
  return Status::ok();
}

RawDecoder::RawDecoder(int64_t max_pixels) : state_(std::make_unique<State>()), max_pixels_(max_pixels) {}
RawDecoder::~RawDecoder() = default;

bool RawDecoder::is_raw(std::span<const uint8_t> data) {
  return data.size() >= 8 && std::memcmp(data.data(), kRawMagic, 8) == 0;
}

Result<ImageInfo> RawDecoder::read_info(std::span<const uint8_t> data) {
  CHUTE_ASSIGN_OR_RETURN(const Header h, parse_header(data));
  if (int64_t{h.width} * h.height > max_pixels_)
    return Status(StatusCode::kResourceExhausted, "image has " + std::to_string(h.width) + "x" +
                                                      std::to_string(h.height) + " pixels, over the limit of " +
                                                      std::to_string(max_pixels_) +
                                                      " (max_pixels, the decompression bomb guard)");
  return ImageInfo{.width = h.width, .height = h.height, .components = 3, .progressive = false};
}

int RawDecoder::orientation(std::span<const uint8_t> data) {
  Result<Header> h = parse_header(data);
  return h.is_ok() ? h.value().orientation : 1;
}

Result<ImageView> RawDecoder::decode(std::span<const uint8_t> data, Window win, std::vector<uint8_t>& buffer,
                                     size_t padding) {
  CHUTE_ASSIGN_OR_RETURN(const ImageInfo info, read_info(data));  // the header, checked, and the pixel cap
  const Header h = parse_header(data).value();
  CHUTE_CHECK(win.x >= 0 && win.y >= 0 && win.width > 0 && win.height > 0 && win.x + win.width <= info.width &&
              win.y + win.height <= info.height);
  const size_t pitch = static_cast<size_t>(info.width) * 3;
  const size_t offset = static_cast<size_t>(win.y) * pitch + static_cast<size_t>(win.x) * 3;
  const size_t needed = static_cast<size_t>(win.y + win.height) * pitch;  // rows [0, window bottom)
  const std::span<const uint8_t> body = data.subspan(kRawHeaderSize);
  buffer.resize(needed + padding);
  if (h.compression == RawCompression::kNone) {
    std::memcpy(buffer.data(), body.data(), needed);
    return ImageView{buffer.data() + offset, pitch};
  }
  if (!state_->dctx) {
    state_->dctx.reset(ZSTD_createDCtx());
    if (!state_->dctx) throw std::bad_alloc();
  }
  ZSTD_DCtx* dctx = state_->dctx.get();
  ZSTD_DCtx_reset(dctx, ZSTD_reset_session_only);
  ZSTD_inBuffer in{body.data(), body.size(), 0};
  ZSTD_outBuffer out{buffer.data(), needed, 0};
  // Stops once the window's last row is out: rows below it are never decompressed.
  while (out.pos < out.size) {
    const size_t before_in = in.pos, before_out = out.pos;
    const size_t rc = ZSTD_decompressStream(dctx, &out, &in);
    if (ZSTD_isError(rc)) {
      if (ZSTD_getErrorCode(rc) == ZSTD_error_memory_allocation) throw std::bad_alloc();
      return corrupt_data(std::string("raw image: zstd: ") + ZSTD_getErrorName(rc));
    }
    if (rc == 0 && out.pos < out.size) break;                 // the frame ended
    if (in.pos == before_in && out.pos == before_out) break;  // no progress: the input ran out
  }
  if (out.pos < needed)
    return corrupt_data("raw image: the zstd frame ends after " + std::to_string(out.pos) + " of " +
                        std::to_string(h.pixel_bytes) + " pixel bytes (truncated)");
  return ImageView{buffer.data() + offset, pitch};
}

}  // namespace chute
