#include "test_util.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <stdexcept>

#include <jpeglib.h>

namespace chute::testing {

std::vector<uint8_t> synthetic_rgb(int width, int height, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::normal_distribution<double> noise(0.0, 6.0);
  const double fx = 2 + 6 * u(gen), fy = 2 + 6 * u(gen), phase = 6.28 * u(gen);
  const int cx = static_cast<int>(width * u(gen)), cy = static_cast<int>(height * u(gen));
  const int radius = 10 + static_cast<int>(std::min(width, height) * 0.3 * u(gen));
  std::vector<uint8_t> rgb(static_cast<size_t>(width) * height * 3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const double gx = static_cast<double>(x) / width, gy = static_cast<double>(y) / height;
      const bool inside = (x - cx) * (x - cx) + (y - cy) * (y - cy) < radius * radius;
      for (int c = 0; c < 3; ++c) {
        double v = 128 + 90 * std::sin(fx * gx * 6.28 + phase + c) * std::cos(fy * gy * 6.28 - c);
        if (inside) v = 255 - v * 0.7;
        v += noise(gen);
        rgb[(static_cast<size_t>(y) * width + x) * 3 + c] = static_cast<uint8_t>(std::clamp(v, 0.0, 255.0));
      }
    }
  }
  return rgb;
}

namespace {

// libjpeg's compressor into memory: `configure` sets the parameters after jpeg_set_defaults, `row(y, buf)`
// returns scanline y (it may fill `buf`, of width * components bytes, and return it).
template <class Configure, class Row>
std::vector<uint8_t> compress(int width, int height, int components, J_COLOR_SPACE in_space, Configure configure,
                              Row row) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = width;
  cinfo.image_height = height;
  cinfo.input_components = components;
  cinfo.in_color_space = in_space;
  jpeg_set_defaults(&cinfo);
  configure(cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  std::vector<uint8_t> scratch(static_cast<size_t>(width) * components);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW r = row(static_cast<int>(cinfo.next_scanline), scratch.data());
    jpeg_write_scanlines(&cinfo, &r, 1);
  }
  jpeg_finish_compress(&cinfo);
  std::vector<uint8_t> out(buffer, buffer + size);
  jpeg_destroy_compress(&cinfo);
  std::free(buffer);
  return out;
}

}  // namespace

std::vector<uint8_t> encode_jpeg(const std::vector<uint8_t>& rgb, int width, int height, EncodeOptions opts) {
  return compress(
      width, height, opts.grayscale ? 1 : 3, opts.grayscale ? JCS_GRAYSCALE : JCS_RGB,
      [&](jpeg_compress_struct& cinfo) {
        jpeg_set_quality(&cinfo, opts.quality, TRUE);
        if (!opts.grayscale) {
          cinfo.comp_info[0].h_samp_factor = opts.h_samp;
          cinfo.comp_info[0].v_samp_factor = opts.v_samp;
        }
        if (opts.progressive) jpeg_simple_progression(&cinfo);
      },
      [&](int y, uint8_t* buf) {
        const uint8_t* src = rgb.data() + static_cast<size_t>(y) * width * 3;
        if (!opts.grayscale) return const_cast<uint8_t*>(src);
        for (int x = 0; x < width; ++x) buf[x] = src[x * 3];
        return buf;
      });
}

std::vector<uint8_t> encode_jpeg_cmyk(const std::vector<uint8_t>& cmyk, int width, int height, bool ycck) {
  return compress(
      width, height, 4, JCS_CMYK,
      [&](jpeg_compress_struct& cinfo) {
        jpeg_set_colorspace(&cinfo, ycck ? JCS_YCCK : JCS_CMYK);
        jpeg_set_quality(&cinfo, 95, TRUE);
        for (int c = 0; c < 4; ++c) cinfo.comp_info[c].h_samp_factor = cinfo.comp_info[c].v_samp_factor = 1;
      },
      [&](int y, uint8_t*) { return const_cast<uint8_t*>(cmyk.data()) + static_cast<size_t>(y) * width * 4; });
}

std::vector<uint8_t> reference_decode(const std::vector<uint8_t>& jpeg, int* width, int* height) {
  jpeg_decompress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, jpeg.data(), jpeg.size());
  jpeg_read_header(&cinfo, TRUE);
  cinfo.out_color_space = JCS_RGB;
  cinfo.dct_method = JDCT_ISLOW;
  jpeg_start_decompress(&cinfo);
  *width = static_cast<int>(cinfo.output_width);
  *height = static_cast<int>(cinfo.output_height);
  std::vector<uint8_t> out(static_cast<size_t>(*width) * *height * 3);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW r = out.data() + static_cast<size_t>(cinfo.output_scanline) * *width * 3;
    jpeg_read_scanlines(&cinfo, &r, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return out;
}

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "chute_test_XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void add_tar_member(std::vector<uint8_t>& tar, const std::string& name, const std::string& data, char type,
                    const std::string& link) {
  std::vector<uint8_t> h(512, 0);
  std::memcpy(h.data(), name.data(), std::min<size_t>(name.size(), 100));
  std::memcpy(h.data() + 157, link.data(), std::min<size_t>(link.size(), 100));
  std::snprintf(reinterpret_cast<char*>(h.data()) + 100, 8, "%07o", 0644);
  std::snprintf(reinterpret_cast<char*>(h.data()) + 108, 8, "%07o", 0);
  std::snprintf(reinterpret_cast<char*>(h.data()) + 116, 8, "%07o", 0);
  std::snprintf(reinterpret_cast<char*>(h.data()) + 124, 12, "%011lo", static_cast<unsigned long>(data.size()));
  std::snprintf(reinterpret_cast<char*>(h.data()) + 136, 12, "%011o", 0);
  std::memset(h.data() + 148, ' ', 8);
  h[156] = static_cast<uint8_t>(type);
  std::memcpy(h.data() + 257,
              "ustar\0"
              "00",
              8);
  unsigned sum = 0;
  for (uint8_t c : h) sum += c;
  std::snprintf(reinterpret_cast<char*>(h.data()) + 148, 8, "%06o", sum);
  tar.insert(tar.end(), h.begin(), h.end());
  tar.insert(tar.end(), data.begin(), data.end());
  tar.resize((tar.size() + 511) / 512 * 512, 0);
}

void end_tar(std::vector<uint8_t>& tar) { tar.resize(tar.size() + 1024, 0); }

void TempDir::write(const std::string& relative, const std::vector<uint8_t>& bytes) const {
  const auto p = path_ / relative;
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace chute::testing
