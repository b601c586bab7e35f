#include "chute/decode/jpeg_decoder.h"

#include <algorithm>
#include <csetjmp>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "chute/base/environment.h"
#include "decode/detail/jpeg_errors.h"

namespace chute {
namespace {

// libjpeg's errors (detail/jpeg_errors.h), and what the decoder keeps beside them: its benign warnings, and
// whether a file that ends early is taken as PIL takes it.
struct ErrorManager {
  detail::JpegErrors jpeg;  // first: libjpeg's cinfo->err points at it
  int64_t benign_warnings = 0;
  // PIL's ImageFile.LOAD_TRUNCATED_IMAGES: a file that ends early decodes, the rest gray (libjpeg's fill).
  bool accept_truncation = false;
};

// Warnings after which the decoded pixels are not the file's: libjpeg fills the gap with gray and goes on.
bool warning_loses_data(int code) {
  switch (code) {
    case JWRN_JPEG_EOF:           // Premature end of JPEG file
    case JWRN_HIT_MARKER:         // Corrupt JPEG data: premature end of data segment
    case JWRN_HUFF_BAD_CODE:      // Corrupt JPEG data: bad Huffman code
    case JWRN_MUST_RESYNC:        // Corrupt JPEG data: found marker instead of RST
    case JWRN_NOT_SEQUENTIAL:     // Invalid SOS parameters for sequential JPEG
    case JWRN_BOGUS_PROGRESSION:  // Inconsistent progression sequence
      return true;
    default:
      return false;
  }
}

void on_emit_message(j_common_ptr cinfo, int msg_level) {
  if (msg_level != -1) return;  // trace messages
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  const int code = cinfo->err->msg_code;
  if (warning_loses_data(code)) {
    if (err->accept_truncation) return;  // PIL goes on after a libjpeg warning, and keeps what it decoded
    detail::JpegErrors::exit_to_caller(cinfo);
  }
  ++err->benign_warnings;
}

// A complete JPEG ends with EOI (FF D9), possibly followed by trailing bytes. Decoding only a window
// stops before the end of the file, so a truncated file is caught here instead, whatever the window.
bool has_end_marker(std::span<const uint8_t> data) {
  for (size_t i = data.size(); i >= 2; --i)
    if (data[i - 2] == 0xFF && data[i - 1] == 0xD9) return true;
  return false;
}

// The data source for PIL's ImageFile.LOAD_TRUNCATED_IMAGES. Pillow's JpegImageFile.load_read hands the
// decoder one end-of-image marker after a file that ends early, then nothing more: a decoder that still
// wants data suspends there, and PIL keeps the image as it stands (rows never decoded stay black). This
// source does the same, where libjpeg's memory source would insert end markers for ever.
struct TruncatedSource {
  jpeg_source_mgr pub;
  bool gave_end = false;
  long skip = 0;  // bytes skip_input_data could not skip yet (Pillow skips them from the data that follows)
};

constexpr JOCTET kEndOfImage[2] = {0xFF, 0xD9};

void truncated_init(j_decompress_ptr) {}
void truncated_term(j_decompress_ptr) {}

boolean truncated_fill(j_decompress_ptr cinfo) {
  auto* src = reinterpret_cast<TruncatedSource*>(cinfo->src);
  if (src->gave_end) return FALSE;  // suspend: no data will come
  src->gave_end = true;
  WARNMS(cinfo, JWRN_JPEG_EOF);
  const long skipped = std::min<long>(src->skip, 2);
  src->skip -= skipped;
  src->pub.next_input_byte = kEndOfImage + skipped;
  src->pub.bytes_in_buffer = static_cast<size_t>(2 - skipped);
  return src->pub.bytes_in_buffer > 0 ? TRUE : FALSE;
}

void truncated_skip(j_decompress_ptr cinfo, long num_bytes) {
  auto* src = reinterpret_cast<TruncatedSource*>(cinfo->src);
  if (num_bytes <= 0) return;
  if (static_cast<size_t>(num_bytes) > src->pub.bytes_in_buffer) {
    src->skip = num_bytes - static_cast<long>(src->pub.bytes_in_buffer);
    src->pub.next_input_byte += src->pub.bytes_in_buffer;
    src->pub.bytes_in_buffer = 0;
  } else {
    src->pub.next_input_byte += num_bytes;
    src->pub.bytes_in_buffer -= static_cast<size_t>(num_bytes);
  }
}

// Whether the data holds every marker segment up to and including the first scan header, as PIL's
// JpegImageFile reads them before decoding: a file cut inside them fails in PIL even with
// LOAD_TRUNCATED_IMAGES. (libjpeg would read a scan header completed by the end marker a lenient source
// adds.)
bool header_complete(std::span<const uint8_t> data) {
  size_t i = 2;  // after SOI
  while (i + 1 < data.size()) {
    if (data[i] != 0xFF) {  // PIL skips junk between segments
      ++i;
      continue;
    }
    const uint8_t marker = data[i + 1];
    if (marker == 0xFF) {  // fill byte
      ++i;
      continue;
    }
    if (marker == 0xD8 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {  // no length
      i += 2;
      continue;
    }
    if (i + 4 > data.size()) return false;
    const size_t end = i + 2 + (static_cast<size_t>(data[i + 2]) << 8 | data[i + 3]);
    if (end > data.size()) return false;
    if (marker == 0xDA) return true;  // the first scan header, complete
    i = end;
  }
  return false;
}

// Pillow reads every four-component JPEG as inverted CMYK ("CMYK;I", the Adobe convention) and
// converts to RGB with cmyk2rgb: R = clip(K' - C'K'/255) with K' = 255 - K, in its integer arithmetic.
// libjpeg hands out the stored (inverted) values, so Pillow's C is 255 - ours.
void cmyk_to_rgb(const uint8_t* cmyk, size_t width, uint8_t* rgb) {
  for (size_t x = 0; x < width; ++x, cmyk += 4, rgb += 3) {
    const int nk = cmyk[3];  // 255 - (255 - k)
    for (int c = 0; c < 3; ++c) {
      const int tmp = (255 - cmyk[c]) * nk + 128;  // Pillow's MULDIV255
      const int v = nk - (((tmp >> 8) + tmp) >> 8);
      rgb[c] = static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
    }
  }
}

}  // namespace

struct JpegDecoder::State {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  TruncatedSource truncated;      // the source when truncation is accepted
  std::vector<uint8_t> cmyk_row;  // one CMYK row, before conversion to RGB
  // Where decode() stands (see there).
  int rows_done = -1;
  size_t pitch = 0, skip = 0;

  // The window as far as it was decoded, the rest black: what PIL keeps when its decoder stops early.
  ImageView keep_decoded(Window win, std::vector<uint8_t>& buffer, size_t padding) {
    if (pitch == 0) {  // no row yet
      pitch = static_cast<size_t>(win.width) * 3;
      skip = 0;
      buffer.assign(pitch * win.height + padding, 0);
    } else {
      std::fill(buffer.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(rows_done) * pitch), buffer.end(), 0);
    }
    return ImageView{buffer.data() + skip, pitch};
  }

  // The data as libjpeg reads it: from memory, or, accepting truncation, as PIL feeds it.
  void set_source(std::span<const uint8_t> data) {
    if (!err.accept_truncation) {
      jpeg_mem_src(&cinfo, data.data(), static_cast<unsigned long>(data.size()));
      return;
    }
    truncated = TruncatedSource{};
    truncated.pub.init_source = truncated_init;
    truncated.pub.fill_input_buffer = truncated_fill;
    truncated.pub.skip_input_data = truncated_skip;
    truncated.pub.resync_to_restart = jpeg_resync_to_restart;
    truncated.pub.term_source = truncated_term;
    truncated.pub.next_input_byte = data.data();
    truncated.pub.bytes_in_buffer = data.size();
    cinfo.src = &truncated.pub;
  }
};

JpegDecoder::JpegDecoder(int64_t max_pixels) : state_(std::make_unique<State>()), max_pixels_(max_pixels) {
  State& s = *state_;
  std::memset(&s.cinfo, 0, sizeof(s.cinfo));
  s.err.jpeg.install(s.cinfo);
  s.err.jpeg.pub.emit_message = on_emit_message;
  // jpeg_create_decompress only fails when out of memory; it then jumps here.
  if (setjmp(s.err.jpeg.jump)) std::abort();
  jpeg_create_decompress(&s.cinfo);
}

JpegDecoder::~JpegDecoder() { jpeg_destroy_decompress(&state_->cinfo); }

bool JpegDecoder::is_jpeg(std::span<const uint8_t> data) {
  return data.size() >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF;
}

int64_t JpegDecoder::benign_warnings() const { return state_->err.benign_warnings; }

void JpegDecoder::set_accept_truncation(bool accept) { state_->err.accept_truncation = accept; }

Result<ImageInfo> JpegDecoder::read_info(std::span<const uint8_t> data) {
  if (data.empty()) return corrupt_data("empty file");
  if (!is_jpeg(data)) return unsupported("not a JPEG file (no SOI marker)");
  State& s = *state_;
  jpeg_decompress_struct* cinfo = &s.cinfo;
  // decode() reads the header again: count its warnings there only, once per image.
  const int64_t warnings = s.err.benign_warnings;
  if (setjmp(s.err.jpeg.jump)) {
    jpeg_abort_decompress(cinfo);
    s.err.benign_warnings = warnings;
    return s.err.jpeg.status(corrupt_data);
  }
  if (s.err.accept_truncation && !header_complete(data))
    return corrupt_data("Premature end of JPEG file (inside its header)");
  s.set_source(data);
  if (jpeg_read_header(cinfo, TRUE) == JPEG_SUSPENDED) {  // the file ends inside its header
    jpeg_abort_decompress(cinfo);
    s.err.benign_warnings = warnings;
    return corrupt_data("Premature end of JPEG file (inside its header)");
  }
  s.err.benign_warnings = warnings;
  ImageInfo info{static_cast<int>(cinfo->image_width), static_cast<int>(cinfo->image_height), cinfo->num_components,
                 static_cast<bool>(cinfo->progressive_mode)};
  jpeg_abort_decompress(cinfo);
  return info;
}

Result<ImageView> JpegDecoder::decode(std::span<const uint8_t> data, Window win, std::vector<uint8_t>& buffer,
                                      size_t padding, int reduction) {
  if (reduction != 1 && reduction != 2 && reduction != 4 && reduction != 8)
    return invalid_argument("reduction must be 1, 2, 4 or 8");
  if (data.empty()) return corrupt_data("empty file");
  if (!is_jpeg(data)) return unsupported("not a JPEG file (no SOI marker)");
  State& s = *state_;
  const bool lenient = s.err.accept_truncation;
  if (!lenient && !has_end_marker(data)) return corrupt_data("Premature end of JPEG file (no end-of-image marker)");
  if (lenient && !header_complete(data)) return corrupt_data("Premature end of JPEG file (inside its header)");
  jpeg_decompress_struct* cinfo = &s.cinfo;
  // Where the decode stands, for a lenient decode that stops early (kept in State: setjmp may not keep
  // locals). rows_done < 0: the header is not read yet; pitch 0: no row layout yet.
  s.rows_done = -1;
  s.pitch = s.skip = 0;
  if (setjmp(s.err.jpeg.jump)) {
    jpeg_abort_decompress(cinfo);
    // PIL with LOAD_TRUNCATED_IMAGES ignores a decoder error once the header is read, and keeps the rows
    // it decoded before it; the others stay black. Running out of memory is the machine's failure: not so.
    if (lenient && s.rows_done >= 0 && !s.err.jpeg.out_of_memory()) return s.keep_decoded(win, buffer, padding);
    return s.err.jpeg.status(corrupt_data);
  }
  s.set_source(data);
  if (jpeg_read_header(cinfo, TRUE) == JPEG_SUSPENDED) {
    jpeg_abort_decompress(cinfo);
    return corrupt_data("Premature end of JPEG file (inside its header)");
  }
  const int64_t width = cinfo->image_width, height = cinfo->image_height;
  if (width * height > max_pixels_) {
    jpeg_abort_decompress(cinfo);
    return Status(StatusCode::kResourceExhausted, "image has " + std::to_string(width) + "x" + std::to_string(height) +
                                                      " pixels, over the limit of " + std::to_string(max_pixels_) +
                                                      " (max_pixels, the decompression bomb guard)");
  }
  // libjpeg-turbo expands grayscale to RGB itself; it turns YCCK into CMYK, which we convert below.
  const bool cmyk = cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK;
  cinfo->out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  cinfo->dct_method = JDCT_ISLOW;  // PIL's choice; the accurate integer IDCT
  cinfo->scale_num = 1;
  cinfo->scale_denom = static_cast<unsigned int>(reduction);
  jpeg_calc_output_dimensions(cinfo);
  const int out_w = static_cast<int>(cinfo->output_width), out_h = static_cast<int>(cinfo->output_height);
  if (win.x < 0 || win.y < 0 || win.width <= 0 || win.height <= 0 || win.x + win.width > out_w ||
      win.y + win.height > out_h) {
    jpeg_abort_decompress(cinfo);
    return invalid_argument("decode window outside the image");
  }
  s.rows_done = 0;
  if (!jpeg_start_decompress(cinfo)) {  // suspended (lenient): the data ended before the first row
    jpeg_abort_decompress(cinfo);
    return s.keep_decoded(win, buffer, padding);
  }

  // Columns: libjpeg widens the crop to iMCU boundaries; the window starts `skip` pixels into each row.
  // Fancy upsampling of subsampled chroma treats the crop's edges as image edges, so the request reaches
  // one chroma block past the window on each side; the window's own pixels are then a full decode's.
  const int margin = cinfo->max_h_samp_factor > 1 ? 16 : 0;
  const int x0 = std::max(0, win.x - margin);
  const int x1 = std::min(static_cast<int>(cinfo->output_width), win.x + win.width + margin);
  JDIMENSION crop_x = static_cast<JDIMENSION>(x0), crop_w = static_cast<JDIMENSION>(x1 - x0);
  if (crop_w < cinfo->output_width) jpeg_crop_scanline(cinfo, &crop_x, &crop_w);
  s.skip = static_cast<size_t>(win.x - static_cast<int>(crop_x)) * 3;
  s.pitch = static_cast<size_t>(cinfo->output_width) * 3;
  try {
    buffer.resize(s.pitch * win.height + padding);
    if (cmyk) s.cmyk_row.resize(static_cast<size_t>(cinfo->output_width) * 4);
  } catch (const std::bad_alloc&) {
    jpeg_abort_decompress(cinfo);  // the decompressor stays usable for the next image
    return out_of_memory("for the decoded JPEG window", s.pitch * win.height);
  }
  if (win.y > 0 && jpeg_skip_scanlines(cinfo, static_cast<JDIMENSION>(win.y)) < static_cast<JDIMENSION>(win.y)) {
    jpeg_abort_decompress(cinfo);  // suspended above the window (lenient)
    return s.keep_decoded(win, buffer, padding);
  }
  for (int r = 0; r < win.height;) {
    JSAMPROW rows[4];
    // Leniently, a row at a time: the rows before an error are then exactly those PIL keeps.
    const int want = cmyk || lenient ? 1 : std::min(4, win.height - r);
    for (int i = 0; i < want; ++i) rows[i] = buffer.data() + static_cast<size_t>(r + i) * s.pitch;
    if (cmyk) rows[0] = s.cmyk_row.data();
    const JDIMENSION got = jpeg_read_scanlines(cinfo, rows, static_cast<JDIMENSION>(want));
    if (got == 0) {
      jpeg_abort_decompress(cinfo);
      if (lenient) return s.keep_decoded(win, buffer, padding);  // suspended at the end of the data
      return corrupt_data("decoder returned no row");
    }
    if (cmyk) cmyk_to_rgb(s.cmyk_row.data(), cinfo->output_width, buffer.data() + static_cast<size_t>(r) * s.pitch);
    r += static_cast<int>(got);
    s.rows_done = r;
  }
  // Rows below the window are never decoded.
  jpeg_abort_decompress(cinfo);
  return ImageView{buffer.data() + s.skip, s.pitch};
}

}  // namespace chute
