#include "chute/decode/png_decoder.h"

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <png.h>
#include <zlib.h>

#include "chute/base/environment.h"

namespace chute {
namespace {

constexpr uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

// Ancillary chunks that play no part in Pillow's convert("RGB"): libpng skips them unparsed (their CRC
// is still checked), so a text or ICC chunk is never inflated. tRNS is kept: read_info reports it.
constexpr png_byte kIgnoredChunks[] =
    "bKGD\0cHRM\0eXIf\0gAMA\0hIST\0iCCP\0iTXt\0oFFs\0pCAL\0pHYs\0"
    "sBIT\0sCAL\0sPLT\0sRGB\0tEXt\0tIME\0zTXt";
constexpr int kNumIgnoredChunks = 17;
static_assert(sizeof(kIgnoredChunks) == 5 * kNumIgnoredChunks);

// libpng's limits: chunks it keeps (ancillary and unknown) and the size of any one chunk it buffers.
constexpr png_uint_32 kChunkCacheMax = 128;
constexpr png_alloc_size_t kChunkMallocMax = 8u << 20;

uint32_t load_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

std::string chunk_name(const uint8_t* p) {
  std::string name;
  for (int i = 0; i < 4; ++i) {
    const char c = static_cast<char>(p[i]);
    name += (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ? c : '?';
  }
  return name;
}

// Walks the chunk list from the signature to IEND: every chunk must be complete and its CRC right. This
// makes the verdict on truncation and bit flips independent of how many rows the window needs.
Status check_chunks(std::span<const uint8_t> data) {
  size_t pos = sizeof(kSignature);
  while (true) {
    if (data.size() - pos < 8)
      return corrupt_data("truncated PNG file: it ends at byte " + std::to_string(data.size()) +
                          " without an IEND chunk");
    const uint8_t* p = data.data() + pos;
    const uint32_t length = load_be32(p);
    if (length > PNG_UINT_31_MAX) return corrupt_data(chunk_name(p + 4) + ": invalid chunk length");
    if (data.size() - pos - 8 < size_t{length} + 4)
      return corrupt_data("truncated PNG file: chunk " + chunk_name(p + 4) + " at byte " + std::to_string(pos) +
                          " takes " + std::to_string(size_t{length} + 12) + " bytes, only " +
                          std::to_string(data.size() - pos) + " left");
    const uLong crc = crc32(crc32(0L, Z_NULL, 0), p + 4, static_cast<uInt>(length) + 4);
    if (crc != load_be32(p + 8 + length)) return corrupt_data(chunk_name(p + 4) + ": CRC error");
    if (std::memcmp(p + 4, "IEND", 4) == 0) return Status::ok();
    pos += size_t{length} + 12;
  }
}

// Everything libpng's callbacks touch. Plain data: a libpng error longjmps from the callback to the
// setjmp in read_header or read_rows, over libpng's C frames, so no object with a destructor lives
// between them.
struct Context {
  const uint8_t* data;
  size_t size;
  size_t pos;
  int64_t* warnings;
  std::jmp_buf jump;
  char message[256];
  // Set around the image's last png_read_row, which also reads the zlib stream to its end. zlib errors
  // found there (a bad Adler-32: the pixels are not the ones written) are only benign errors to libpng,
  // since every row is already out; they fail the decode, as they do in Pillow.
  bool finishing;
  bool finish_error;
};

void read_callback(png_structp png, png_bytep out, size_t n) {
  auto* ctx = static_cast<Context*>(png_get_io_ptr(png));
  if (n > ctx->size - ctx->pos) png_error(png, "Read error: truncated PNG file");
  std::memcpy(out, ctx->data + ctx->pos, n);
  ctx->pos += n;
}

[[noreturn]] void error_callback(png_structp png, png_const_charp message) {
  auto* ctx = static_cast<Context*>(png_get_error_ptr(png));
  std::snprintf(ctx->message, sizeof(ctx->message), "%s", message != nullptr ? message : "libpng error");
  std::longjmp(ctx->jump, 1);
}

// Benign errors that libpng may report while finishing the zlib stream and that leave the pixels intact.
bool harmless_at_finish(const char* message) {
  return std::strstr(message, "Extra compressed data") != nullptr ||
         std::strstr(message, "Too much image data") != nullptr;
}

void warning_callback(png_structp png, png_const_charp message) {  // never print to stderr
  auto* ctx = static_cast<Context*>(png_get_error_ptr(png));
  if (message == nullptr) message = "libpng warning";
  if (ctx->finishing && !ctx->finish_error && !harmless_at_finish(message)) {
    std::snprintf(ctx->message, sizeof(ctx->message), "%s", message);
    ctx->finish_error = true;
    return;
  }
  ++*ctx->warnings;
}

// A libpng read struct for one image; libpng cannot reuse one for the next image.
struct ReadStruct {
  png_structp png = nullptr;
  png_infop info = nullptr;
  explicit ReadStruct(Context* ctx) {
    png = png_create_read_struct(PNG_LIBPNG_VER_STRING, ctx, error_callback, warning_callback);
    if (png != nullptr) info = png_create_info_struct(png);
  }
  ~ReadStruct() {
    if (png != nullptr) png_destroy_read_struct(&png, info != nullptr ? &info : nullptr, nullptr);
  }
  ReadStruct(const ReadStruct&) = delete;
  ReadStruct& operator=(const ReadStruct&) = delete;
};

// How a row, as libpng hands it over after our transforms, becomes RGB.
enum class RowKind {
  kIndexed,    // one byte per pixel (gray up to 8 bits, or palette index), through a 256-entry RGB table
  kGray16,     // big-endian 16-bit gray, clipped to 255 as Pillow's I;16 -> RGB does
  kGrayAlpha,  // gray, alpha (8-bit, or 16-bit stripped to the high byte)
  kRgb,        // RGB (8-bit, or 16-bit stripped), which libpng writes straight into the output
  kRgba,       // RGBA (8-bit, or 16-bit stripped)
};

struct Header {
  png_uint_32 width = 0, height = 0;
  int bit_depth = 0, color_type = 0, interlace = 0;
  int num_palette = 0;
  bool has_trns = false;
  uint8_t lut[256 * 3] = {};  // RGB of each one-byte pixel value, for RowKind::kIndexed
  RowKind kind = RowKind::kRgb;
  size_t rowbytes = 0;  // after the transforms
  int passes = 1;
};

struct Options {
  png_uint_32 size_limit;  // libpng's user limit on width and height
  bool crc_verified;       // check_chunks has checked every CRC; libpng need not
  bool transform;          // set up the row format for read_rows
};

// Reads the chunks before the image data. Returns false after a libpng error (ctx->message).
bool read_header(png_structp png, png_infop info, Context* ctx, const Options* opt, Header* h) {
  if (setjmp(ctx->jump)) return false;
  png_set_read_fn(png, ctx, read_callback);
  png_set_user_limits(png, opt->size_limit, opt->size_limit);
  png_set_chunk_cache_max(png, kChunkCacheMax);
  png_set_chunk_malloc_max(png, kChunkMallocMax);
  png_set_benign_errors(png, 1);  // benign errors are counted warnings
  const int crc_action = opt->crc_verified ? PNG_CRC_QUIET_USE : PNG_CRC_ERROR_QUIT;
  png_set_crc_action(png, crc_action, crc_action);
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, nullptr, 0);
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, kIgnoredChunks, kNumIgnoredChunks);
  png_read_info(png, info);
  png_get_IHDR(png, info, &h->width, &h->height, &h->bit_depth, &h->color_type, &h->interlace, nullptr, nullptr);
  h->has_trns = png_get_valid(png, info, PNG_INFO_tRNS) != 0;
  if (h->color_type == PNG_COLOR_TYPE_PALETTE) {
    png_colorp palette = nullptr;
    if (png_get_PLTE(png, info, &palette, &h->num_palette) != 0) {
      // Indices past the palette's end stay black, as in Pillow.
      for (int i = 0; i < std::min(h->num_palette, 256); ++i) {
        h->lut[3 * i] = palette[i].red;
        h->lut[3 * i + 1] = palette[i].green;
        h->lut[3 * i + 2] = palette[i].blue;
      }
    }
  }
  if (!opt->transform) return true;

  switch (h->color_type) {
    case PNG_COLOR_TYPE_GRAY:
      if (h->bit_depth == 16) {
        h->kind = RowKind::kGray16;
      } else {
        // Pillow's unpackers scale 1/2/4-bit gray by bit replication: v * 255 / (2^depth - 1).
        const int top = (1 << h->bit_depth) - 1;
        for (int v = 0; v <= top; ++v) std::memset(h->lut + 3 * v, v * 255 / top, 3);
        h->kind = RowKind::kIndexed;
      }
      break;
    case PNG_COLOR_TYPE_PALETTE:
      h->kind = RowKind::kIndexed;
      break;
    case PNG_COLOR_TYPE_GRAY_ALPHA:
      h->kind = RowKind::kGrayAlpha;
      break;
    case PNG_COLOR_TYPE_RGB:
      h->kind = RowKind::kRgb;
      break;
    default:
      h->kind = RowKind::kRgba;
      break;
  }
  // 16-bit samples keep their high byte (png_set_strip_16 truncates; png_set_scale_16 would round),
  // except gray, which Pillow clips instead.
  if (h->bit_depth == 16 && h->color_type != PNG_COLOR_TYPE_GRAY) png_set_strip_16(png);
  if (h->bit_depth < 8) png_set_packing(png);  // one byte per pixel, values unscaled
  h->passes = h->interlace != PNG_INTERLACE_NONE ? png_set_interlace_handling(png) : 1;
  png_read_update_info(png, info);
  h->rowbytes = png_get_rowbytes(png, info);
  return true;
}

void convert_row(const Header& h, const uint8_t* src, uint8_t* dst, int x0, int width) {
  switch (h.kind) {
    case RowKind::kIndexed:
      for (int i = 0; i < width; ++i) std::memcpy(dst + 3 * i, h.lut + 3 * size_t{src[x0 + i]}, 3);
      break;
    case RowKind::kGray16:
      for (int i = 0; i < width; ++i) {
        const uint8_t* s = src + 2 * (size_t{static_cast<unsigned>(x0 + i)});
        const uint8_t v = s[0] != 0 ? 255 : s[1];
        dst[3 * i] = dst[3 * i + 1] = dst[3 * i + 2] = v;
      }
      break;
    case RowKind::kGrayAlpha:
      for (int i = 0; i < width; ++i) {
        const uint8_t v = src[2 * (size_t{static_cast<unsigned>(x0 + i)})];
        dst[3 * i] = dst[3 * i + 1] = dst[3 * i + 2] = v;
      }
      break;
    case RowKind::kRgb:
      std::memcpy(dst, src + 3 * size_t{static_cast<unsigned>(x0)}, 3 * size_t{static_cast<unsigned>(width)});
      break;
    case RowKind::kRgba:
      for (int i = 0; i < width; ++i) std::memcpy(dst + 3 * i, src + 4 * size_t{static_cast<unsigned>(x0 + i)}, 3);
      break;
  }
}

struct RowPlan {
  Window win;
  bool direct;   // RGB rows go straight into `out` (full rows, `pitch` = rowbytes)
  uint8_t* out;  // window row r starts at out + r * pitch (column 0 of the image when direct)
  size_t pitch;
  uint8_t* rows;  // interlaced, not direct: the window's raw rows, then one scratch row; else one scratch row
  bool keep_raw;  // interlaced and not direct: convert after the last pass
};

// Reads rows down to the window's last one (every row of every pass but the last when interlaced).
// Returns false after a libpng error (ctx->message).
bool read_rows(png_structp png, Context* ctx, const Header* h, const RowPlan* p) {
  if (setjmp(ctx->jump)) return false;
  const png_uint_32 y0 = static_cast<png_uint_32>(p->win.y);
  const png_uint_32 y_end = y0 + static_cast<png_uint_32>(p->win.height);
  uint8_t* scratch = p->keep_raw ? p->rows + h->rowbytes * static_cast<size_t>(p->win.height) : p->rows;
  for (int pass = 0; pass < h->passes; ++pass) {
    const png_uint_32 rows = pass + 1 == h->passes ? y_end : h->height;
    for (png_uint_32 y = 0; y < rows; ++y) {
      const bool inside = y >= y0 && y < y_end;
      uint8_t* row = scratch;
      if (inside && p->direct)
        row = p->out + (y - y0) * p->pitch;
      else if (inside && p->keep_raw)
        row = p->rows + (y - y0) * h->rowbytes;
      ctx->finishing = pass + 1 == h->passes && y + 1 == h->height;
      png_read_row(png, row, nullptr);
      ctx->finishing = false;
      if (inside && !p->direct && !p->keep_raw)
        convert_row(*h, row, p->out + (y - y0) * p->pitch, p->win.x, p->win.width);
    }
  }
  if (p->keep_raw)
    for (int r = 0; r < p->win.height; ++r)
      convert_row(*h, p->rows + static_cast<size_t>(r) * h->rowbytes, p->out + static_cast<size_t>(r) * p->pitch,
                  p->win.x, p->win.width);
  return true;
}

}  // namespace

struct PngDecoder::State {
  std::vector<uint8_t> rows;  // raw rows: a scratch row, or an interlaced image's window
  int64_t warnings = 0;
};

PngDecoder::PngDecoder(int64_t max_pixels) : state_(std::make_unique<State>()), max_pixels_(max_pixels) {}

PngDecoder::~PngDecoder() = default;

bool PngDecoder::is_png(std::span<const uint8_t> data) {
  return data.size() >= sizeof(kSignature) && std::memcmp(data.data(), kSignature, sizeof(kSignature)) == 0;
}

int64_t PngDecoder::benign_warnings() const { return state_->warnings; }

void PngDecoder::release_scratch() { std::vector<uint8_t>().swap(state_->rows); }

Result<ImageInfo> PngDecoder::read_info(std::span<const uint8_t> data) {
  if (data.empty()) return corrupt_data("empty file");
  if (!is_png(data)) return unsupported("not a PNG file");
  Context ctx{};
  ctx.data = data.data();
  ctx.size = data.size();
  int64_t header_warnings = 0;  // decode() reads the header again: count warnings there, once per image
  ctx.warnings = &header_warnings;
  ReadStruct rs(&ctx);
  if (rs.info == nullptr) return environment_error("out of memory creating the PNG reader");
  auto header = std::make_unique<Header>();
  const Options opt{PNG_UINT_31_MAX, /*crc_verified=*/false, /*transform=*/false};
  if (!read_header(rs.png, rs.info, &ctx, &opt, header.get())) return corrupt_data(ctx.message);
  int components = 3;
  switch (header->color_type) {
    case PNG_COLOR_TYPE_GRAY:
      components = 1;
      break;
    case PNG_COLOR_TYPE_GRAY_ALPHA:
      components = 2;
      break;
    case PNG_COLOR_TYPE_RGB:
      components = 3;
      break;
    case PNG_COLOR_TYPE_RGB_ALPHA:
      components = 4;
      break;
    case PNG_COLOR_TYPE_PALETTE:
      components = header->has_trns ? 4 : 3;
      break;
  }
  return ImageInfo{static_cast<int>(header->width), static_cast<int>(header->height), components,
                   header->interlace != PNG_INTERLACE_NONE};
}

Result<PngDecoder::View> PngDecoder::decode(std::span<const uint8_t> data, Window win, std::vector<uint8_t>& buffer,
                                            size_t padding) {
  if (data.empty()) return corrupt_data("empty file");
  if (!is_png(data)) return unsupported("not a PNG file");
  // The size guard comes first, before any allocation: IHDR is the first chunk of a valid PNG.
  if (data.size() >= 24 && std::memcmp(data.data() + 12, "IHDR", 4) == 0) {
    const uint64_t width = load_be32(data.data() + 16), height = load_be32(data.data() + 20);
    if (width * height > static_cast<uint64_t>(std::max<int64_t>(max_pixels_, 0)))  // < 2^64: no overflow
      return Status(StatusCode::kResourceExhausted, "image has " + std::to_string(width) + "x" +
                                                        std::to_string(height) + " pixels, over the limit of " +
                                                        std::to_string(max_pixels_) +
                                                        " (max_pixels, the decompression bomb guard)");
  }
  CHUTE_RETURN_IF_ERROR(check_chunks(data));

  Context ctx{};
  ctx.data = data.data();
  ctx.size = data.size();
  ctx.warnings = &state_->warnings;
  ReadStruct rs(&ctx);
  if (rs.info == nullptr) return environment_error("out of memory creating the PNG reader");
  auto header = std::make_unique<Header>();
  const Header& h = *header;
  const Options opt{static_cast<png_uint_32>(std::clamp<int64_t>(max_pixels_, 1, PNG_UINT_31_MAX)),
                    /*crc_verified=*/true, /*transform=*/true};
  if (!read_header(rs.png, rs.info, &ctx, &opt, header.get())) return corrupt_data(ctx.message);
  const int64_t width = h.width, height = h.height;
  if (win.x < 0 || win.y < 0 || win.width <= 0 || win.height <= 0 || win.x + int64_t{win.width} > width ||
      win.y + int64_t{win.height} > height)
    return invalid_argument("decode window outside the image");

  RowPlan plan{};
  plan.win = win;
  plan.direct = h.kind == RowKind::kRgb;
  plan.keep_raw = h.passes > 1 && !plan.direct;
  plan.pitch = plan.direct ? h.rowbytes : 3 * static_cast<size_t>(win.width);
  buffer.resize(plan.pitch * static_cast<size_t>(win.height) + padding);
  plan.out = buffer.data();
  state_->rows.resize(h.rowbytes * (plan.keep_raw ? static_cast<size_t>(win.height) + 1 : 1));
  plan.rows = state_->rows.data();
  if (!read_rows(rs.png, &ctx, &h, &plan) || ctx.finish_error) return corrupt_data(ctx.message);
  // Rows below the window are never inflated.
  return View{plan.direct ? buffer.data() + 3 * static_cast<size_t>(win.x) : buffer.data(), plan.pitch};
}

}  // namespace chute
