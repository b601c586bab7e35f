#include "chute/pack/jpeg_encoder.h"

#include <csetjmp>
#include <cstring>
#include <new>
#include <string>

#include "decode/detail/jpeg_errors.h"

namespace chute {
namespace {

// "Exif\0\0", then a little-endian TIFF header and one IFD with one entry: Orientation (0x0112), SHORT.
std::vector<uint8_t> exif_orientation_segment(int orientation) {
  const uint8_t seg[] = {'E',
                         'x',
                         'i',
                         'f',
                         0,
                         0,  // Exif identifier
                         'I',
                         'I',
                         42,
                         0,
                         8,
                         0,
                         0,
                         0,  // TIFF header, IFD at 8
                         1,
                         0,  // one entry
                         0x12,
                         0x01,
                         3,
                         0,
                         1,
                         0,
                         0,
                         0,  // Orientation, SHORT, count 1
                         static_cast<uint8_t>(orientation),
                         0,
                         0,
                         0,  // value
                         0,
                         0,
                         0,
                         0};  // no next IFD
  return {seg, seg + sizeof seg};
}

// A destination that appends to a std::vector (jpeg_mem_dest's growth frees buffers that an aborted encode
// would still point to). A failed allocation becomes libjpeg's out-of-memory error, never an exception
// through C code.
struct VectorDestination {
  jpeg_destination_mgr pub;
  std::vector<uint8_t>* out = nullptr;
};

constexpr size_t kDestinationChunk = size_t{64} << 10;

bool grow(j_compress_ptr cinfo, size_t used) {
  auto* d = reinterpret_cast<VectorDestination*>(cinfo->dest);
  try {
    d->out->resize(used + kDestinationChunk);
  } catch (const std::bad_alloc&) {
    return false;
  }
  d->pub.next_output_byte = d->out->data() + used;
  d->pub.free_in_buffer = kDestinationChunk;
  return true;
}

void destination_init(j_compress_ptr cinfo) {
  if (!grow(cinfo, 0)) ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 0);
}

boolean destination_empty(j_compress_ptr cinfo) {
  auto* d = reinterpret_cast<VectorDestination*>(cinfo->dest);
  if (!grow(cinfo, d->out->size())) ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 0);  // the buffer is full: all of it is used
  return TRUE;
}

void destination_term(j_compress_ptr cinfo) {
  auto* d = reinterpret_cast<VectorDestination*>(cinfo->dest);
  d->out->resize(d->out->size() - d->pub.free_in_buffer);
}

}  // namespace

struct JpegEncoder::State {
  jpeg_compress_struct cinfo;
  detail::JpegErrors err;
  VectorDestination dest;
};

JpegEncoder::JpegEncoder() : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.err.install(s.cinfo);
  if (setjmp(s.err.jump)) throw std::bad_alloc();  // jpeg_create_compress fails only for lack of memory
  jpeg_create_compress(&s.cinfo);
}

JpegEncoder::~JpegEncoder() { jpeg_destroy_compress(&state_->cinfo); }

Status JpegEncoder::encode(const uint8_t* pixels, size_t pitch, int width, int height, int quality,
                           ChromaSubsampling subsampling, int orientation, std::vector<uint8_t>& out) {
  if (quality < 1 || quality > 100)
    return invalid_argument("JPEG quality must be in [1, 100], got " + std::to_string(quality));
  if (width <= 0 || height <= 0 || width > JPEG_MAX_DIMENSION || height > JPEG_MAX_DIMENSION)
    return invalid_argument("cannot encode a " + std::to_string(width) + "x" + std::to_string(height) +
                            " JPEG (at most 65500 pixels a side)");
  State& s = *state_;
  jpeg_compress_struct* c = &s.cinfo;
  const std::vector<uint8_t> exif =
      orientation > 1 && orientation <= 8 ? exif_orientation_segment(orientation) : std::vector<uint8_t>();
  if (setjmp(s.err.jump)) {
    jpeg_abort_compress(c);
    return s.err.status([](std::string message) { return invalid_argument("JPEG encode failed: " + message); });
  }
  out.clear();
  s.dest.out = &out;
  s.dest.pub.init_destination = destination_init;
  s.dest.pub.empty_output_buffer = destination_empty;
  s.dest.pub.term_destination = destination_term;
  c->dest = &s.dest.pub;
  c->image_width = static_cast<JDIMENSION>(width);
  c->image_height = static_cast<JDIMENSION>(height);
  c->input_components = 3;
  c->in_color_space = JCS_RGB;
  jpeg_set_defaults(c);
  jpeg_set_quality(c, quality, TRUE);
  c->optimize_coding = TRUE;
  const int factor = subsampling == ChromaSubsampling::k420 ? 2 : 1;
  c->comp_info[0].h_samp_factor = c->comp_info[0].v_samp_factor = factor;
  for (int i = 1; i < 3; ++i) c->comp_info[i].h_samp_factor = c->comp_info[i].v_samp_factor = 1;
  jpeg_start_compress(c, TRUE);
  if (!exif.empty()) jpeg_write_marker(c, JPEG_APP0 + 1, exif.data(), static_cast<unsigned>(exif.size()));
  while (c->next_scanline < c->image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(pixels + static_cast<size_t>(c->next_scanline) * pitch);
    jpeg_write_scanlines(c, &row, 1);
  }
  jpeg_finish_compress(c);
  return Status::ok();
}

}  // namespace chute
