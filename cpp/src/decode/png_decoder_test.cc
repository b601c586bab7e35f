// PngDecoder: pixel values against Pillow's convert("RGB") rules (as observed with Pillow 13), windows
// against the full decode, and errors for every kind of broken file. The PNGs are written here with
// libpng's writer (encode_png), so every colour type, bit depth and interlacing is covered.
#include "chute/decode/png_decoder.h"

#include <gtest/gtest.h>
#include <png.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace chute {
namespace {

// ---------------------------------------------------------------------------------------------------
// A test image: samples (each below 2^bit_depth), its palette, and its PNG encoding.

struct PngSpec {
  std::string name;
  int width = 0, height = 0;
  int bit_depth = 8;
  int color_type = PNG_COLOR_TYPE_RGB;
  bool interlace = false;
  int palette_size = 0;  // PLTE entries; indices reach 2^bit_depth - 1, so a short palette has gaps
  bool trns = false;     // a tRNS chunk: palette alphas, or a gray/RGB colour key
  bool text = false;     // a tEXt chunk before the image data
};

struct TestImage {
  PngSpec spec;
  int channels = 0;
  std::vector<uint16_t> samples;  // width * height * channels
  std::vector<png_color> palette;
  std::vector<uint8_t> png;
};

int channels_of(int color_type) {
  switch (color_type) {
    case PNG_COLOR_TYPE_GRAY:
      return 1;
    case PNG_COLOR_TYPE_GRAY_ALPHA:
      return 2;
    case PNG_COLOR_TYPE_RGB:
      return 3;
    case PNG_COLOR_TYPE_RGB_ALPHA:
      return 4;
    default:
      return 1;  // palette index
  }
}

[[noreturn]] void abort_on_write_error(png_structp, png_const_charp message) {
  std::fprintf(stderr, "encode_png: libpng error: %s\n", message);
  std::abort();
}
void ignore_write_warning(png_structp, png_const_charp) {}

void append_bytes(png_structp png, png_bytep data, size_t n) {
  auto* out = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + n);
}
void flush_nothing(png_structp) {}

// Writes the image with libpng's writer. Low bit depths are given one sample per byte (png_set_packing);
// 16-bit samples are written big-endian, as PNG stores them.
std::vector<uint8_t> encode_png(const TestImage& t) {
  const PngSpec& s = t.spec;
  std::vector<uint8_t> out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, abort_on_write_error, ignore_write_warning);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(png, &out, append_bytes, flush_nothing);
  png_set_check_for_invalid_index(png, 0);  // short palettes are written on purpose
  png_set_IHDR(png, info, s.width, s.height, s.bit_depth, s.color_type,
               s.interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (!t.palette.empty()) png_set_PLTE(png, info, t.palette.data(), static_cast<int>(t.palette.size()));
  std::vector<uint8_t> alphas;
  png_color_16 key{};
  if (s.trns) {
    if (s.color_type == PNG_COLOR_TYPE_PALETTE) {
      for (size_t i = 0; i < t.palette.size(); ++i) alphas.push_back(static_cast<uint8_t>(i * 37));
      png_set_tRNS(png, info, alphas.data(), static_cast<int>(alphas.size()), nullptr);
    } else {
      key.gray = t.samples[0];
      key.red = t.samples[0];
      key.green = t.samples[1 % t.channels];
      key.blue = t.samples[2 % t.channels];
      png_set_tRNS(png, info, nullptr, 0, &key);
    }
  }
  png_text text{};
  char key_word[] = "Comment", value[] = "written by png_decoder_test";
  if (s.text) {
    text.compression = PNG_TEXT_COMPRESSION_NONE;
    text.key = key_word;
    text.text = value;
    png_set_text(png, info, &text, 1);
  }
  png_write_info(png, info);
  if (s.bit_depth < 8) png_set_packing(png);
  if (s.interlace) png_set_interlace_handling(png);

  const size_t row_samples = static_cast<size_t>(s.width) * t.channels;
  const size_t bytes_per_sample = s.bit_depth == 16 ? 2 : 1;
  std::vector<uint8_t> rows(row_samples * bytes_per_sample * s.height);
  for (size_t i = 0; i < t.samples.size(); ++i) {
    if (bytes_per_sample == 2) {
      rows[2 * i] = static_cast<uint8_t>(t.samples[i] >> 8);
      rows[2 * i + 1] = static_cast<uint8_t>(t.samples[i] & 0xFF);
    } else {
      rows[i] = static_cast<uint8_t>(t.samples[i]);
    }
  }
  std::vector<png_bytep> row_pointers(s.height);
  for (int y = 0; y < s.height; ++y) row_pointers[y] = rows.data() + y * row_samples * bytes_per_sample;
  png_write_image(png, row_pointers.data());
  png_write_end(png, info);
  png_destroy_write_struct(&png, &info);
  return out;
}

TestImage make_image(const PngSpec& spec, uint32_t seed) {
  TestImage t;
  t.spec = spec;
  t.channels = channels_of(spec.color_type);
  std::mt19937 rng(seed);
  const uint32_t top = (1u << spec.bit_depth) - 1;
  const size_t n = static_cast<size_t>(spec.width) * spec.height * t.channels;
  t.samples.resize(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t v = rng() & top;
    // 16-bit gray: half the samples at most 255, where Pillow keeps the value, half anywhere (clipped).
    if (spec.bit_depth == 16 && spec.color_type == PNG_COLOR_TYPE_GRAY && (rng() & 1)) v &= 0xFF;
    t.samples[i] = static_cast<uint16_t>(v);
  }
  if (spec.bit_depth == 16 && n >= 6) {  // the edges of both rules
    const uint16_t edges[6] = {0, 255, 256, 257, 0xFF00, 0xFFFF};
    for (int i = 0; i < 6; ++i) t.samples[i] = edges[i];
  }
  for (int i = 0; i < spec.palette_size; ++i)
    t.palette.push_back(
        png_color{static_cast<png_byte>(rng()), static_cast<png_byte>(rng()), static_cast<png_byte>(rng())});
  t.png = encode_png(t);
  return t;
}

// The RGB that Pillow's Image.open(f).convert("RGB") gives, written out rule by rule (each rule checked
// with Pillow 13.0: see test_png.py and the report that came with this file).
std::vector<uint8_t> expected_rgb(const TestImage& t) {
  const PngSpec& s = t.spec;
  std::vector<uint8_t> rgb(static_cast<size_t>(s.width) * s.height * 3);
  auto eight = [&](uint16_t v) -> uint8_t {  // 8-bit or the high byte of 16-bit
    return static_cast<uint8_t>(s.bit_depth == 16 ? v >> 8 : v);
  };
  for (size_t p = 0; p < static_cast<size_t>(s.width) * s.height; ++p) {
    const uint16_t* in = t.samples.data() + p * t.channels;
    uint8_t* out = rgb.data() + 3 * p;
    switch (s.color_type) {
      case PNG_COLOR_TYPE_GRAY: {
        uint8_t v = 0;
        switch (s.bit_depth) {
          case 1:
            v = in[0] ? 255 : 0;
            break;  // mode "1"
          case 2:
            v = static_cast<uint8_t>(in[0] * 85);
            break;  // "L;2": 0, 85, 170, 255
          case 4:
            v = static_cast<uint8_t>(in[0] * 17);
            break;  // "L;4": 0, 17, ..., 255
          case 8:
            v = static_cast<uint8_t>(in[0]);
            break;
          case 16:
            v = static_cast<uint8_t>(std::min<int>(in[0], 255));
            break;  // "I;16" -> RGB clips
        }
        out[0] = out[1] = out[2] = v;
        break;
      }
      case PNG_COLOR_TYPE_GRAY_ALPHA:
        out[0] = out[1] = out[2] = eight(in[0]);
        break;  // alpha dropped
      case PNG_COLOR_TYPE_RGB:
      case PNG_COLOR_TYPE_RGB_ALPHA:
        for (int c = 0; c < 3; ++c) out[c] = eight(in[c]);
        break;
      case PNG_COLOR_TYPE_PALETTE:
        if (in[0] < t.palette.size()) {
          out[0] = t.palette[in[0]].red;
          out[1] = t.palette[in[0]].green;
          out[2] = t.palette[in[0]].blue;
        } else {
          out[0] = out[1] = out[2] = 0;  // past the palette's end: black
        }
        break;
    }
  }
  return rgb;
}

// Copies a decoded view into a tight width*height*3 array.
std::vector<uint8_t> tight(const PngDecoder::View& v, int width, int height) {
  std::vector<uint8_t> out(static_cast<size_t>(width) * height * 3);
  for (int y = 0; y < height; ++y)
    std::memcpy(out.data() + static_cast<size_t>(y) * width * 3, v.pixels + y * v.pitch, 3 * width);
  return out;
}

std::vector<uint8_t> crop(const std::vector<uint8_t>& rgb, int width, const Window& w) {
  std::vector<uint8_t> out;
  for (int y = w.y; y < w.y + w.height; ++y) {
    const uint8_t* row = rgb.data() + (static_cast<size_t>(y) * width + w.x) * 3;
    out.insert(out.end(), row, row + 3 * w.width);
  }
  return out;
}

Window full(const PngSpec& s) { return Window{0, 0, s.width, s.height}; }

std::vector<PngSpec> all_kinds() {
  using S = PngSpec;
  const int G = PNG_COLOR_TYPE_GRAY, GA = PNG_COLOR_TYPE_GRAY_ALPHA, RGB = PNG_COLOR_TYPE_RGB,
            RGBA = PNG_COLOR_TYPE_RGB_ALPHA, P = PNG_COLOR_TYPE_PALETTE;
  return {
      S{.name = "rgb8", .width = 37, .height = 23, .bit_depth = 8, .color_type = RGB, .text = true},
      S{.name = "rgba8", .width = 37, .height = 23, .bit_depth = 8, .color_type = RGBA},
      S{.name = "gray8", .width = 37, .height = 23, .bit_depth = 8, .color_type = G},
      S{.name = "gray_alpha8", .width = 37, .height = 23, .bit_depth = 8, .color_type = GA},
      S{.name = "gray8_trns", .width = 37, .height = 23, .bit_depth = 8, .color_type = G, .trns = true},
      S{.name = "rgb8_trns", .width = 37, .height = 23, .bit_depth = 8, .color_type = RGB, .trns = true},
      S{.name = "palette8", .width = 37, .height = 23, .bit_depth = 8, .color_type = P, .palette_size = 256},
      S{.name = "palette8_trns",
        .width = 37,
        .height = 23,
        .bit_depth = 8,
        .color_type = P,
        .palette_size = 256,
        .trns = true},
      S{.name = "palette8_short", .width = 37, .height = 23, .bit_depth = 8, .color_type = P, .palette_size = 20},
      S{.name = "gray1", .width = 37, .height = 23, .bit_depth = 1, .color_type = G},
      S{.name = "gray2", .width = 37, .height = 23, .bit_depth = 2, .color_type = G},
      S{.name = "gray4", .width = 37, .height = 23, .bit_depth = 4, .color_type = G, .trns = true},
      S{.name = "palette1", .width = 37, .height = 23, .bit_depth = 1, .color_type = P, .palette_size = 2},
      S{.name = "palette2_trns",
        .width = 37,
        .height = 23,
        .bit_depth = 2,
        .color_type = P,
        .palette_size = 4,
        .trns = true},
      S{.name = "palette4", .width = 37, .height = 23, .bit_depth = 4, .color_type = P, .palette_size = 16},
      S{.name = "palette4_short", .width = 37, .height = 23, .bit_depth = 4, .color_type = P, .palette_size = 5},
      S{.name = "rgb16", .width = 37, .height = 23, .bit_depth = 16, .color_type = RGB},
      S{.name = "rgba16", .width = 37, .height = 23, .bit_depth = 16, .color_type = RGBA},
      S{.name = "gray16", .width = 37, .height = 23, .bit_depth = 16, .color_type = G},
      S{.name = "gray_alpha16", .width = 37, .height = 23, .bit_depth = 16, .color_type = GA},
      S{.name = "rgb8_adam7", .width = 37, .height = 23, .bit_depth = 8, .color_type = RGB, .interlace = true},
      S{.name = "rgba16_adam7", .width = 37, .height = 23, .bit_depth = 16, .color_type = RGBA, .interlace = true},
      S{.name = "gray1_adam7", .width = 37, .height = 23, .bit_depth = 1, .color_type = G, .interlace = true},
      S{.name = "gray16_adam7", .width = 37, .height = 23, .bit_depth = 16, .color_type = G, .interlace = true},
      S{.name = "gray_alpha8_adam7", .width = 37, .height = 23, .bit_depth = 8, .color_type = GA, .interlace = true},
      S{.name = "palette4_adam7",
        .width = 37,
        .height = 23,
        .bit_depth = 4,
        .color_type = P,
        .interlace = true,
        .palette_size = 16,
        .trns = true},
      S{.name = "rgb8_adam7_1x1", .width = 1, .height = 1, .bit_depth = 8, .color_type = RGB, .interlace = true},
      S{.name = "rgb8_adam7_3x2", .width = 3, .height = 2, .bit_depth = 8, .color_type = RGB, .interlace = true},
      S{.name = "gray2_adam7_5x9", .width = 5, .height = 9, .bit_depth = 2, .color_type = G, .interlace = true},
      S{.name = "rgb8_1x1", .width = 1, .height = 1, .bit_depth = 8, .color_type = RGB},
      S{.name = "rgb8_tall", .width = 2, .height = 300, .bit_depth = 8, .color_type = RGB},
      S{.name = "gray8_wide", .width = 700, .height = 3, .bit_depth = 8, .color_type = G},
  };
}

const std::vector<TestImage>& all_images() {
  static const std::vector<TestImage> images = [] {
    std::vector<TestImage> v;
    uint32_t seed = 1;
    for (const PngSpec& s : all_kinds()) v.push_back(make_image(s, seed++));
    return v;
  }();
  return images;
}

const TestImage& image_named(const std::string& name) {
  for (const TestImage& t : all_images())
    if (t.spec.name == name) return t;
  std::abort();
}

// ---------------------------------------------------------------------------------------------------
// Chunk surgery for the error tests.

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}
void put_be32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}

struct Chunk {
  size_t offset;  // of the length field
  uint32_t length;
  std::string type;
};

// The chunks as far as the structure holds.
std::vector<Chunk> chunks_of(const std::vector<uint8_t>& png) {
  std::vector<Chunk> out;
  size_t pos = 8;
  while (png.size() >= pos + 12) {
    const uint32_t length = be32(png.data() + pos);
    if (length > png.size() - pos - 12) break;
    out.push_back(Chunk{pos, length, std::string(reinterpret_cast<const char*>(png.data() + pos + 4), 4)});
    pos += 12 + size_t{length};
  }
  return out;
}

void fix_crc(std::vector<uint8_t>& png, const Chunk& c) {
  put_be32(png.data() + c.offset + 8 + c.length,
           static_cast<uint32_t>(crc32(0, png.data() + c.offset + 4, c.length + 4)));
}

void fix_all_crcs(std::vector<uint8_t>& png) {
  for (const Chunk& c : chunks_of(png)) fix_crc(png, c);
}

const Chunk& find_chunk(const std::vector<Chunk>& chunks, const std::string& type) {
  for (const Chunk& c : chunks)
    if (c.type == type) return c;
  std::abort();
}

std::vector<uint8_t> make_chunk(const std::string& type, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out(12 + data.size());
  put_be32(out.data(), static_cast<uint32_t>(data.size()));
  std::memcpy(out.data() + 4, type.data(), 4);
  std::copy(data.begin(), data.end(), out.begin() + 8);
  put_be32(out.data() + 8 + data.size(), static_cast<uint32_t>(crc32(0, out.data() + 4, data.size() + 4)));
  return out;
}

// A PNG from raw parts: IHDR fields, the (unfiltered rows') bytes compressed into one IDAT, extra chunks.
std::vector<uint8_t> assemble(uint32_t width, uint32_t height, int depth, int color_type,
                              const std::vector<uint8_t>& idat, const std::vector<uint8_t>& before_idat = {}) {
  std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  std::vector<uint8_t> ihdr(13);
  put_be32(ihdr.data(), width);
  put_be32(ihdr.data() + 4, height);
  ihdr[8] = static_cast<uint8_t>(depth);
  ihdr[9] = static_cast<uint8_t>(color_type);
  for (const auto& part : {make_chunk("IHDR", ihdr), before_idat, make_chunk("IDAT", idat), make_chunk("IEND", {})})
    out.insert(out.end(), part.begin(), part.end());
  return out;
}

// The same PNG with its zlib stream cut into IDAT chunks at `cuts` (offsets into the stream, ascending).
std::vector<uint8_t> resplit_idat(const std::vector<uint8_t>& png, const std::vector<size_t>& cuts) {
  std::vector<uint8_t> stream, out(png.begin(), png.begin() + 8), tail;
  bool seen_idat = false;
  for (const Chunk& c : chunks_of(png)) {
    const auto begin = png.begin() + static_cast<std::ptrdiff_t>(c.offset);
    if (c.type == "IDAT") {
      stream.insert(stream.end(), begin + 8, begin + 8 + c.length);
      seen_idat = true;
    } else {
      (seen_idat ? tail : out).insert((seen_idat ? tail : out).end(), begin, begin + 12 + c.length);
    }
  }
  size_t from = 0;
  std::vector<size_t> ends = cuts;
  ends.push_back(stream.size());
  for (size_t end : ends) {
    const auto part = make_chunk("IDAT", std::vector<uint8_t>(stream.begin() + from, stream.begin() + end));
    out.insert(out.end(), part.begin(), part.end());
    from = end;
  }
  out.insert(out.end(), tail.begin(), tail.end());
  return out;
}

std::vector<uint8_t> deflate(const std::vector<uint8_t>& raw) {
  uLongf size = compressBound(raw.size());
  std::vector<uint8_t> out(size);
  EXPECT_EQ(compress(out.data(), &size, raw.data(), raw.size()), Z_OK);
  out.resize(size);
  return out;
}

// ---------------------------------------------------------------------------------------------------

TEST(PngDecoderTest, IsPngChecksTheEightByteSignature) {
  const std::vector<uint8_t>& png = image_named("rgb8").png;
  EXPECT_TRUE(PngDecoder::is_png(png));
  EXPECT_TRUE(PngDecoder::is_png(std::span(png).first(8)));
  EXPECT_FALSE(PngDecoder::is_png(std::span(png).first(7)));
  EXPECT_FALSE(PngDecoder::is_png({}));
  std::vector<uint8_t> bad = png;
  bad[4] = '\n';  // a signature mangled by a text-mode transfer
  EXPECT_FALSE(PngDecoder::is_png(bad));
  const std::vector<uint8_t> jpeg = {0xFF, 0xD8, 0xFF, 0xE0, 0, 16, 'J', 'F', 'I', 'F', 0};
  EXPECT_FALSE(PngDecoder::is_png(jpeg));
}

TEST(PngDecoderTest, ReadInfoReportsSizeChannelsAndInterlacing) {
  PngDecoder decoder;
  struct Want {
    const char* name;
    int components;
  };
  for (const Want& w :
       {Want{"rgb8", 3}, Want{"rgba8", 4}, Want{"gray8", 1}, Want{"gray_alpha8", 2}, Want{"gray8_trns", 1},
        Want{"rgb8_trns", 3}, Want{"palette8", 3}, Want{"palette8_trns", 4}, Want{"gray1", 1}, Want{"palette2_trns", 4},
        Want{"rgb16", 3}, Want{"gray16", 1}, Want{"gray_alpha16", 2}, Want{"rgba16_adam7", 4}}) {
    SCOPED_TRACE(w.name);
    const TestImage& t = image_named(w.name);
    Result<ImageInfo> info = decoder.read_info(t.png);
    ASSERT_TRUE(info.is_ok()) << info.status().to_string();
    EXPECT_EQ(info->width, t.spec.width);
    EXPECT_EQ(info->height, t.spec.height);
    EXPECT_EQ(info->components, w.components);
    EXPECT_EQ(info->progressive, t.spec.interlace);
  }
}

TEST(PngDecoderTest, FullDecodeFollowsPillowsConversionRulesForEveryKind) {
  PngDecoder decoder;  // one decoder for all: its state is reused between images
  std::vector<uint8_t> buffer;
  for (const TestImage& t : all_images()) {
    SCOPED_TRACE(t.spec.name);
    for (size_t padding : {size_t{0}, size_t{64}}) {
      Result<PngDecoder::View> view = decoder.decode(t.png, full(t.spec), buffer, padding);
      ASSERT_TRUE(view.is_ok()) << view.status().to_string();
      EXPECT_GE(view->pitch, 3 * static_cast<size_t>(t.spec.width));
      const uint8_t* end = view->pixels + (t.spec.height - 1) * view->pitch + 3 * t.spec.width;
      EXPECT_LE(end + padding, buffer.data() + buffer.size());  // readable `padding` bytes past the last row
      EXPECT_EQ(tight(*view, t.spec.width, t.spec.height), expected_rgb(t));
    }
  }
  EXPECT_EQ(decoder.benign_warnings(), 0);
}

TEST(PngDecoderTest, SixteenBitGrayClipsAndSixteenBitColourKeepsTheHighByte) {
  // Pillow 13: a 16-bit gray PNG opens as "I;16" and convert("RGB") maps 0, 1, 254, 255, 256, 257, 1000,
  // 65280, 65535 to 0, 1, 254, 255, 255, 255, 255, 255, 255. 16-bit RGB (0x1234, 0xabff, 0x00ff) gives
  // (0x12, 0xab, 0x00): the high byte, not rounded.
  PngDecoder decoder;
  std::vector<uint8_t> buffer;
  {
    const uint16_t values[] = {0, 1, 254, 255, 256, 257, 1000, 65280, 65535};
    std::vector<uint8_t> raw = {0};
    for (uint16_t v : values) raw.insert(raw.end(), {static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v)});
    auto png = assemble(9, 1, 16, PNG_COLOR_TYPE_GRAY, deflate(raw));
    Result<PngDecoder::View> v = decoder.decode(png, {0, 0, 9, 1}, buffer);
    ASSERT_TRUE(v.is_ok()) << v.status().to_string();
    const uint8_t want[] = {0, 1, 254, 255, 255, 255, 255, 255, 255};
    for (int i = 0; i < 9; ++i)
      for (int c = 0; c < 3; ++c) EXPECT_EQ(v->pixels[3 * i + c], want[i]) << i;
  }
  {
    const std::vector<uint8_t> raw = {0, 0x12, 0x34, 0xab, 0xff, 0x00, 0xff, 0xff, 0x00, 0x01, 0x80, 0xff, 0xfe};
    auto png = assemble(2, 1, 16, PNG_COLOR_TYPE_RGB, deflate(raw));
    Result<PngDecoder::View> v = decoder.decode(png, {0, 0, 2, 1}, buffer);
    ASSERT_TRUE(v.is_ok()) << v.status().to_string();
    EXPECT_EQ(std::vector<uint8_t>(v->pixels, v->pixels + 6),
              (std::vector<uint8_t>{0x12, 0xab, 0x00, 0xff, 0x01, 0xff}));
  }
}

TEST(PngDecoderTest, LowBitDepthsExpandLikePillow) {
  // Pillow 13: 1-bit gray is mode "1" (0 -> 0, 1 -> 255); 2-bit "L;2" gives 0, 85, 170, 255; 4-bit
  // "L;4" gives v * 17. Palette indices of 1, 2 and 4 bits look up the palette.
  PngDecoder decoder;
  std::vector<uint8_t> buffer;
  struct Case {
    int depth;
    std::vector<uint8_t> packed;  // one row of 2^depth pixels, values 0, 1, 2, ...
    std::vector<uint8_t> want;
  };
  for (const Case& c : {Case{1, {0b01000000}, {0, 255}}, Case{2, {0b00011011}, {0, 85, 170, 255}},
                        Case{4,
                             {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef},
                             {0, 17, 34, 51, 68, 85, 102, 119, 136, 153, 170, 187, 204, 221, 238, 255}}}) {
    SCOPED_TRACE(c.depth);
    std::vector<uint8_t> raw = {0};
    raw.insert(raw.end(), c.packed.begin(), c.packed.end());
    const int n = 1 << c.depth;
    auto png = assemble(n, 1, c.depth, PNG_COLOR_TYPE_GRAY, deflate(raw));
    Result<PngDecoder::View> v = decoder.decode(png, {0, 0, n, 1}, buffer);
    ASSERT_TRUE(v.is_ok()) << v.status().to_string();
    for (int i = 0; i < n; ++i) EXPECT_EQ(v->pixels[3 * i], c.want[i]) << i;
  }
}

TEST(PngDecoderTest, PaletteIndicesPastThePaletteAreBlack) {
  // Pillow 13: a 4-bit image with a 2-entry palette gives the two colours, then (0, 0, 0) for indices 2..15.
  PngDecoder decoder;
  std::vector<uint8_t> buffer;
  const std::vector<uint8_t> raw = {0, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef};
  auto png = assemble(16, 1, 4, PNG_COLOR_TYPE_PALETTE, deflate(raw), make_chunk("PLTE", {10, 20, 30, 40, 50, 60}));
  Result<PngDecoder::View> v = decoder.decode(png, {0, 0, 16, 1}, buffer);
  ASSERT_TRUE(v.is_ok()) << v.status().to_string();
  std::vector<uint8_t> want = {10, 20, 30, 40, 50, 60};
  want.resize(48, 0);
  EXPECT_EQ(std::vector<uint8_t>(v->pixels, v->pixels + 48), want);
}

TEST(PngDecoderTest, WindowsEqualTheCropOfTheFullDecode) {
  PngDecoder decoder;
  std::vector<uint8_t> buffer;
  std::mt19937 rng(7);
  for (const TestImage& t : all_images()) {
    SCOPED_TRACE(t.spec.name);
    const std::vector<uint8_t> want = expected_rgb(t);
    const int W = t.spec.width, H = t.spec.height;
    std::vector<Window> windows = {
        {0, 0, W, 1}, {0, H - 1, W, 1}, {W - 1, 0, 1, H}, {W / 2, H / 2, W - W / 2, H - H / 2}};
    for (int i = 0; i < 25; ++i) {
      Window w;
      w.x = static_cast<int>(rng() % W);
      w.y = static_cast<int>(rng() % H);
      w.width = 1 + static_cast<int>(rng() % (W - w.x));
      w.height = 1 + static_cast<int>(rng() % (H - w.y));
      windows.push_back(w);
    }
    for (const Window& w : windows) {
      const size_t padding = rng() % 3 == 0 ? 0 : rng() % 100;
      Result<PngDecoder::View> view = decoder.decode(t.png, w, buffer, padding);
      ASSERT_TRUE(view.is_ok()) << view.status().to_string();
      ASSERT_EQ(tight(*view, w.width, w.height), crop(want, W, w))
          << "window " << w.x << "," << w.y << " " << w.width << "x" << w.height;
      const uint8_t* end = view->pixels + (w.height - 1) * view->pitch + 3 * w.width;
      ASSERT_LE(end + padding, buffer.data() + buffer.size());
    }
  }
}

TEST(PngDecoderTest, ImageDataSplitIntoManyChunksDecodesTheSame) {
  PngDecoder decoder;
  std::vector<uint8_t> buffer;
  for (const char* name : {"rgb8", "palette4_adam7", "gray16"}) {
    SCOPED_TRACE(name);
    const TestImage& t = image_named(name);
    size_t stream_size = 0;
    for (const Chunk& c : chunks_of(t.png)) stream_size += c.type == "IDAT" ? c.length : 0;
    std::vector<size_t> cuts;
    for (size_t at = 1; at < stream_size; at += 1 + at % 5) cuts.push_back(at);  // 1 to 5 bytes a chunk
    const std::vector<uint8_t> png = resplit_idat(t.png, cuts);
    ASSERT_GT(chunks_of(png).size(), stream_size / 4);
    Result<PngDecoder::View> r = decoder.decode(png, full(t.spec), buffer);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(tight(*r, t.spec.width, t.spec.height), expected_rgb(t));
    const Window w{3, 5, 10, 7};
    Result<PngDecoder::View> rw = decoder.decode(png, w, buffer);
    ASSERT_TRUE(rw.is_ok()) << rw.status().to_string();
    EXPECT_EQ(tight(*rw, w.width, w.height), crop(expected_rgb(t), t.spec.width, w));
  }
}

TEST(PngDecoderTest, EmptyAndForeignBytesAreRefused) {
  PngDecoder decoder;
  std::vector<uint8_t> buffer;
  Result<PngDecoder::View> empty = decoder.decode({}, {0, 0, 1, 1}, buffer);
  EXPECT_EQ(empty.status().code(), StatusCode::kCorruptData);
  EXPECT_EQ(empty.status().message(), "empty file");
  EXPECT_EQ(decoder.read_info({}).status().code(), StatusCode::kCorruptData);
  const std::vector<uint8_t> jpeg = {0xFF, 0xD8, 0xFF, 0xE0, 0, 16, 'J', 'F', 'I', 'F', 0, 1, 1, 0};
  const std::vector<uint8_t> gif = {'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0, 0, 0, 0};
  for (const auto& bytes : {jpeg, gif}) {
    Result<PngDecoder::View> r = decoder.decode(bytes, {0, 0, 1, 1}, buffer);
    EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
    EXPECT_EQ(r.status().message(), "not a PNG file");
    EXPECT_EQ(decoder.read_info(bytes).status().code(), StatusCode::kUnsupported);
  }
}

TEST(PngDecoderTest, TruncatedFilesAreErrorsWhateverTheWindow) {
  PngDecoder decoder;
  std::vector<uint8_t> buffer;
  for (const char* name : {"rgb8", "palette4_adam7", "gray16"}) {
    SCOPED_TRACE(name);
    const TestImage& t = image_named(name);
    for (size_t n = 1; n < t.png.size(); ++n) {
      const std::span<const uint8_t> cut(t.png.data(), n);
      for (const Window& w : {full(t.spec), Window{0, 0, 1, 1}}) {
        Result<PngDecoder::View> r = decoder.decode(cut, w, buffer);
        ASSERT_FALSE(r.is_ok()) << n;
        // Under 8 bytes there is no whole signature: not recognised as PNG at all.
        ASSERT_EQ(r.status().code(), n < 8 ? StatusCode::kUnsupported : StatusCode::kCorruptData) << n;
      }
    }
    Result<PngDecoder::View> r = decoder.decode(std::span(t.png).first(t.png.size() - 12), {0, 0, 1, 1}, buffer);
    EXPECT_NE(r.status().message().find("without an IEND chunk"), std::string::npos) << r.status().message();
  }
}

TEST(PngDecoderTest, TrailingBytesAfterIendAreIgnored) {
  PngDecoder decoder;
  std::vector<uint8_t> buffer;
  const TestImage& t = image_named("rgba8");
  std::vector<uint8_t> png = t.png;
  for (int i = 0; i < 100; ++i) png.push_back(static_cast<uint8_t>(i * 7));
  Result<PngDecoder::View> r = decoder.decode(png, full(t.spec), buffer);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(tight(*r, t.spec.width, t.spec.height), expected_rgb(t));
}

TEST(PngDecoderTest, CrcErrorsAreErrorsWhateverTheWindow) {
  PngDecoder decoder;
  std::vector<uint8_t> buffer;
  for (const char* name : {"rgb8", "palette8_trns"}) {
    const TestImage& t = image_named(name);
    const std::vector<Chunk> chunks = chunks_of(t.png);
    for (const Chunk& c : chunks) {
      SCOPED_TRACE(std::string(name) + " " + c.type);
      // A flipped bit in the data, or in the CRC itself.
      for (size_t at : {c.offset + 8 + c.length / 2, c.offset + 8 + c.length}) {
        if (c.length == 0 && at == c.offset + 8) continue;
        std::vector<uint8_t> png = t.png;
        png[at] ^= 0x04;
        for (const Window& w : {full(t.spec), Window{0, 0, 1, 1}}) {
          Result<PngDecoder::View> r = decoder.decode(png, w, buffer);
          ASSERT_FALSE(r.is_ok());
          EXPECT_EQ(r.status().code(), StatusCode::kCorruptData);
          EXPECT_EQ(r.status().message(), c.type + ": CRC error");
        }
      }
    }
    // read_info reads the chunks before the image data and checks their CRCs too.
    std::vector<uint8_t> png = t.png;
    png[8 + 8 + 2] ^= 1;  // IHDR's width
    EXPECT_EQ(decoder.read_info(png).status().code(), StatusCode::kCorruptData);
  }
}

TEST(PngDecoderTest, CorruptZlibStreamsAreErrors) {
  PngDecoder decoder;
  std::vector<uint8_t> buffer;
  const TestImage& t = image_named("rgb8");
  const Chunk idat = find_chunk(chunks_of(t.png), "IDAT");
  {
    std::vector<uint8_t> png = t.png;  // a zlib header that names no known method
    png[idat.offset + 8] = 0x00;
    fix_crc(png, idat);
    Result<PngDecoder::View> r = decoder.decode(png, full(t.spec), buffer);
    EXPECT_EQ(r.status().code(), StatusCode::kCorruptData);
    EXPECT_NE(r.status().message().find("IDAT"), std::string::npos) << r.status().message();
  }
  int errors = 0;
  for (uint32_t i = 0; i < 40; ++i) {  // garbage in the middle of the deflate data
    std::vector<uint8_t> png = t.png;
    for (uint32_t k = 0; k < 8; ++k) png[idat.offset + 8 + 10 + (i * 7 + k * 13) % (idat.length - 20)] ^= 0x5A;
    fix_crc(png, idat);
    Result<PngDecoder::View> r = decoder.decode(png, full(t.spec), buffer);
    if (!r.is_ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kCorruptData);
      ++errors;
    }
  }
  EXPECT_EQ(errors, 40);  // the Adler-32 check catches what the inflater does not
  {
    // Rows missing: the stream ends one row early.
    std::vector<uint8_t> raw(2 * (1 + 3 * 4), 0);
    auto png = assemble(4, 3, 8, PNG_COLOR_TYPE_RGB, deflate(raw));
    Result<PngDecoder::View> r = decoder.decode(png, {0, 0, 4, 3}, buffer);
    EXPECT_EQ(r.status().code(), StatusCode::kCorruptData);
    EXPECT_NE(r.status().message().find("Not enough image data"), std::string::npos) << r.status().message();
  }
  {
    // A filter type that does not exist.
    std::vector<uint8_t> raw(3 * (1 + 3 * 4), 0);
    raw[1 + 3 * 4] = 9;
    auto png = assemble(4, 3, 8, PNG_COLOR_TYPE_RGB, deflate(raw));
    EXPECT_EQ(decoder.decode(png, {0, 0, 4, 3}, buffer).status().code(), StatusCode::kCorruptData);
  }
}

TEST(PngDecoderTest, ZlibErrorsAreFoundAsFarAsTheWindowReaches) {
  // A bad Adler-32 is found at the end of the stream: a window that stops before the last row never
  // reads it (rows below the window are not inflated), a window that reaches the last row does.
  PngDecoder decoder;
  std::vector<uint8_t> buffer;
  for (const char* name : {"rgb8", "gray4", "rgb8_adam7", "palette4_adam7"}) {
    SCOPED_TRACE(name);
    const TestImage& t = image_named(name);
    std::vector<uint8_t> png = t.png;
    const std::vector<Chunk> chunks = chunks_of(png);
    const Chunk* last_idat = nullptr;
    for (const Chunk& c : chunks)
      if (c.type == "IDAT") last_idat = &c;
    png[last_idat->offset + 8 + last_idat->length - 1] ^= 0x01;  // the last byte of the Adler-32
    fix_crc(png, *last_idat);
    Result<PngDecoder::View> whole = decoder.decode(png, full(t.spec), buffer);
    EXPECT_EQ(whole.status().code(), StatusCode::kCorruptData);
    EXPECT_NE(whole.status().message().find("incorrect data check"), std::string::npos) << whole.status().message();
    Result<PngDecoder::View> bottom = decoder.decode(png, {0, t.spec.height - 1, 1, 1}, buffer);
    EXPECT_EQ(bottom.status().code(), StatusCode::kCorruptData);
    // The Adler-32 alone in the last IDAT: libpng reads it only after handing out the last row, and
    // reports its mismatch as a benign error, which the decoder must still treat as an error.
    size_t stream_size = 0;
    for (const Chunk& c : chunks) stream_size += c.type == "IDAT" ? c.length : 0;
    const std::vector<uint8_t> split = resplit_idat(png, {stream_size - 4});
    Result<PngDecoder::View> split_whole = decoder.decode(split, full(t.spec), buffer);
    EXPECT_EQ(split_whole.status().code(), StatusCode::kCorruptData);
    EXPECT_NE(split_whole.status().message().find("incorrect data check"), std::string::npos)
        << split_whole.status().message();
    if (!t.spec.interlace) {
      Result<PngDecoder::View> top = decoder.decode(png, {0, 0, t.spec.width, t.spec.height - 1}, buffer);
      ASSERT_TRUE(top.is_ok()) << top.status().to_string();
      EXPECT_EQ(tight(*top, t.spec.width, t.spec.height - 1),
                crop(expected_rgb(t), t.spec.width, {0, 0, t.spec.width, t.spec.height - 1}));
    }
  }
}

TEST(PngDecoderTest, BenignProblemsAreCountedNeverPrinted) {
  PngDecoder decoder;
  std::vector<uint8_t> buffer;
  const std::vector<uint8_t> raw = {0, 1, 2, 3, 4, 5, 6};
  // A tRNS chunk of the wrong length for an RGB image: libpng ignores it with a benign error.
  auto png = assemble(2, 1, 8, PNG_COLOR_TYPE_RGB, deflate(raw), make_chunk("tRNS", {0, 1}));
  // Extra rows of compressed data after the image: Pillow ignores them, and so does libpng.
  std::vector<uint8_t> extra = raw;
  extra.insert(extra.end(), 70, 0);
  auto png_extra = assemble(2, 1, 8, PNG_COLOR_TYPE_RGB, deflate(extra));
  ::testing::internal::CaptureStderr();
  Result<PngDecoder::View> r = decoder.decode(png, {0, 0, 2, 1}, buffer);
  Result<PngDecoder::View> r_extra = decoder.decode(png_extra, {0, 0, 2, 1}, buffer);
  const std::string printed = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_TRUE(r_extra.is_ok()) << r_extra.status().to_string();
  EXPECT_EQ(std::vector<uint8_t>(r_extra->pixels, r_extra->pixels + 6), (std::vector<uint8_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_GE(decoder.benign_warnings(), 2);
  EXPECT_EQ(printed, "");
}

TEST(PngDecoderTest, ChunksThatDoNotChangeThePixelsAreSkippedUnparsed) {
  // Garbage inside zTXt, iCCP, sRGB and gAMA chunks, an unknown ancillary chunk and APNG's acTL: none is
  // parsed (libpng would otherwise warn about the first four), so the decode is clean. An unknown
  // critical chunk is an error.
  PngDecoder decoder;
  std::vector<uint8_t> buffer;
  const std::vector<uint8_t> raw = {0, 1, 2, 3, 4, 5, 6};
  const std::vector<uint8_t> junk = {'k', 0, 0, 0xDE, 0xAD, 0xBE, 0xEF};
  std::vector<uint8_t> extra;
  for (const char* type : {"zTXt", "iCCP", "sRGB", "gAMA", "abCd", "acTL"}) {
    const auto c = make_chunk(type, junk);
    extra.insert(extra.end(), c.begin(), c.end());
  }
  auto png = assemble(2, 1, 8, PNG_COLOR_TYPE_RGB, deflate(raw), extra);
  Result<PngDecoder::View> r = decoder.decode(png, {0, 0, 2, 1}, buffer);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(std::vector<uint8_t>(r->pixels, r->pixels + 6), (std::vector<uint8_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(decoder.benign_warnings(), 0);
  auto critical = assemble(2, 1, 8, PNG_COLOR_TYPE_RGB, deflate(raw), make_chunk("ABCD", junk));
  EXPECT_EQ(decoder.decode(critical, {0, 0, 2, 1}, buffer).status().code(), StatusCode::kCorruptData);
}

TEST(PngDecoderTest, FormatErrorsAreCorruptData) {
  PngDecoder decoder;
  std::vector<uint8_t> buffer;
  const std::vector<uint8_t> raw(1 + 4, 0);
  struct Case {
    const char* what;
    std::vector<uint8_t> png;
  };
  for (const Case& c : {Case{"bit depth 3", assemble(4, 1, 3, PNG_COLOR_TYPE_GRAY, deflate(raw))},
                        Case{"16-bit palette", assemble(1, 1, 16, PNG_COLOR_TYPE_PALETTE, deflate(raw))},
                        Case{"palette without PLTE", assemble(4, 1, 8, PNG_COLOR_TYPE_PALETTE, deflate(raw))},
                        Case{"zero width", assemble(0, 1, 8, PNG_COLOR_TYPE_GRAY, deflate(raw))},
                        Case{"colour type 5", assemble(4, 1, 8, 5, deflate(raw))}}) {
    SCOPED_TRACE(c.what);
    Result<PngDecoder::View> r = decoder.decode(c.png, {0, 0, 1, 1}, buffer);
    EXPECT_EQ(r.status().code(), StatusCode::kCorruptData) << r.status().to_string();
    EXPECT_FALSE(r.status().message().empty());
  }
  // IHDR not first.
  std::vector<uint8_t> png = image_named("gray8").png;
  const Chunk ihdr = chunks_of(png)[0];
  std::memcpy(png.data() + ihdr.offset + 4, "IHDX", 4);
  fix_crc(png, ihdr);
  EXPECT_EQ(decoder.decode(png, {0, 0, 1, 1}, buffer).status().code(), StatusCode::kCorruptData);
  EXPECT_EQ(decoder.read_info(png).status().code(), StatusCode::kCorruptData);
}

TEST(PngDecoderTest, MaxPixelsGuardRefusesBeforeAllocating) {
  std::vector<uint8_t> buffer;
  const TestImage& t = image_named("rgb8");  // 37 x 23 = 851 pixels
  PngDecoder small(850), exact(851);
  Result<PngDecoder::View> r = small.decode(t.png, full(t.spec), buffer);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("37x23"), std::string::npos) << r.status().message();
  EXPECT_TRUE(exact.decode(t.png, full(t.spec), buffer).is_ok());
  // read_info reports the size whatever the limit; the caller decides.
  EXPECT_TRUE(small.read_info(t.png).is_ok());

  // A header that claims 100000 x 100000 over a few bytes of data: refused before anything is allocated.
  PngDecoder decoder;
  buffer.clear();
  buffer.shrink_to_fit();
  auto bomb = assemble(100000, 100000, 8, PNG_COLOR_TYPE_RGB_ALPHA, deflate(std::vector<uint8_t>(64, 0)));
  Result<PngDecoder::View> b = decoder.decode(bomb, {0, 0, 1, 1}, buffer);
  EXPECT_EQ(b.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(buffer.capacity(), 0u);
  Result<ImageInfo> info = decoder.read_info(bomb);
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  EXPECT_EQ(info->width, 100000);
  // A width past libpng's 2^31 - 1 limit, with a height that keeps the product small, is still refused.
  auto wide = assemble(0x80000000u, 1, 8, PNG_COLOR_TYPE_GRAY, deflate(std::vector<uint8_t>(64, 0)));
  EXPECT_EQ(decoder.decode(wide, {0, 0, 1, 1}, buffer).status().code(), StatusCode::kResourceExhausted);
  // The largest size a header can claim: the product is computed without overflow (UBSan checks).
  auto huge = assemble(0xFFFFFFFFu, 0xFFFFFFFFu, 8, PNG_COLOR_TYPE_GRAY, deflate(std::vector<uint8_t>(64, 0)));
  EXPECT_EQ(decoder.decode(huge, {0, 0, 1, 1}, buffer).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(decoder.read_info(huge).status().code(), StatusCode::kCorruptData);  // past PNG's 2^31 - 1
}

TEST(PngDecoderTest, WindowOutsideTheImageIsInvalid) {
  PngDecoder decoder;
  std::vector<uint8_t> buffer;
  const TestImage& t = image_named("gray8");
  const int W = t.spec.width, H = t.spec.height;
  for (const Window& w : {Window{-1, 0, 2, 2}, Window{0, -1, 2, 2}, Window{0, 0, 0, 1}, Window{0, 0, 1, 0},
                          Window{W - 1, 0, 2, 1}, Window{0, H - 1, 1, 2}, Window{0, 0, W + 1, H}}) {
    EXPECT_EQ(decoder.decode(t.png, w, buffer).status().code(), StatusCode::kInvalidArgument);
  }
}

// Random damage, never a crash, never a print: flips with the CRCs left alone (caught by the chunk walk)
// and with the CRCs recomputed (which sends the damage into libpng's parser and the inflater).
TEST(PngDecoderTest, RandomByteFlipsNeverCrash) {
  PngDecoder decoder;
  std::vector<uint8_t> buffer;
  std::mt19937 rng(2024);
  const std::vector<TestImage>& images = all_images();
  int ok = 0, failed = 0;
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 600; ++i) {
    const TestImage& t = images[rng() % images.size()];
    std::vector<uint8_t> png = t.png;
    const int flips = 1 + static_cast<int>(rng() % 6);
    for (int k = 0; k < flips; ++k) {
      const size_t at = 8 + rng() % (png.size() - 8);
      png[at] ^= static_cast<uint8_t>(1 + rng() % 255);
    }
    if (i % 5 == 4) png.resize(8 + rng() % (png.size() - 8));
    if (i % 2 == 1) fix_all_crcs(png);
    Result<ImageInfo> info = decoder.read_info(png);
    Window w{0, 0, 1, 1};
    if (info.is_ok() && info->width > 0 && info->height > 0 && int64_t{info->width} * info->height < 4'000'000) {
      w.width = static_cast<int>(1 + rng() % info->width);
      w.height = static_cast<int>(1 + rng() % info->height);
    }
    Result<PngDecoder::View> r = decoder.decode(png, w, buffer, rng() % 32);
    if (r.is_ok()) {
      ++ok;
      volatile uint8_t sink = 0;  // touch every decoded byte (ASan checks the reads)
      for (int y = 0; y < w.height; ++y)
        for (int x = 0; x < 3 * w.width; ++x) sink = sink + r->pixels[y * r->pitch + x];
    } else {
      ++failed;
      const StatusCode code = r.status().code();
      EXPECT_TRUE(code == StatusCode::kCorruptData || code == StatusCode::kResourceExhausted ||
                  code == StatusCode::kInvalidArgument)
          << r.status().to_string();
      EXPECT_FALSE(r.status().message().empty());
    }
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_GT(failed, 300);
  EXPECT_GT(ok, 0);  // flips in ignored chunks or in pixel bytes can still decode
}

TEST(PngDecoderTest, RandomGarbageNeverCrashes) {
  PngDecoder decoder;
  std::vector<uint8_t> buffer;
  std::mt19937 rng(99);
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 300; ++i) {
    std::vector<uint8_t> bytes(rng() % 300);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    if (i % 3 == 1) {  // behind a real signature
      const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
      bytes.insert(bytes.begin(), sig, sig + 8);
    } else if (i % 3 == 2) {  // random chunk bodies behind a small, valid IHDR, with right CRCs
      std::vector<uint8_t> idat(rng() % 200);
      for (auto& b : idat) b = static_cast<uint8_t>(rng());
      bytes = assemble(1 + rng() % 20, 1 + rng() % 20, 8, PNG_COLOR_TYPE_RGB, idat);
    }
    Result<PngDecoder::View> r = decoder.decode(bytes, {0, 0, 1, 1}, buffer);
    if (!r.is_ok()) {
      const StatusCode code = r.status().code();
      EXPECT_TRUE(code == StatusCode::kCorruptData || code == StatusCode::kUnsupported ||
                  code == StatusCode::kResourceExhausted || code == StatusCode::kInvalidArgument)
          << r.status().to_string();
    }
    (void)decoder.read_info(bytes);
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

}  // namespace
}  // namespace chute
