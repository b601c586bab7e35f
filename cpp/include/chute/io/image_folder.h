// ImageFolder: a directory tree in torchvision's ImageFolder layout, root/<class>/**/<image>.
//
// Listing follows torchvision exactly: class directories sorted by name become labels 0..C-1; under each
// class, directories are walked recursively (following links), visited in sorted path order, and files in
// sorted name order are kept when their lower-cased name ends with an image extension. A class with no
// image is an error, as in torchvision.
// Thread-safety: immutable after construction; read() may run on many threads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "chute/io/source.h"

namespace chute {

// The extensions of the formats chute decodes (image_decoder.h): torchvision's IMG_EXTENSIONS less .ppm,
// .pgm, .bmp, .tif and .tiff. Files with those are left out of the listing, where torchvision would list
// them, and counted in ImageFolder::left_out().
inline constexpr const char* kImageExtensions[] = {".jpg", ".jpeg", ".png", ".webp"};
// torchvision's image extensions that chute cannot decode.
inline constexpr const char* kUndecodedExtensions[] = {".ppm", ".bmp", ".pgm", ".tif", ".tiff"};

class ImageFolder final : public Source {
 public:
  static Result<std::shared_ptr<ImageFolder>> open(const std::string& root);

  int64_t size() const override { return static_cast<int64_t>(paths_.size()); }
  int64_t label(int64_t index) const override { return labels_[index]; }
  std::string name(int64_t index) const override { return paths_[index]; }
  std::string key(int64_t index) const override { return path_below(root_, paths_[index]); }
  Status read(int64_t index, std::vector<uint8_t>& out) const override;
  Status read_capped(int64_t index, std::vector<uint8_t>& out, uint64_t max_bytes) const override;

  const std::vector<std::string>& classes() const { return classes_; }
  const std::string& root() const { return root_; }
  // Files torchvision's ImageFolder would list but chute cannot decode (kUndecodedExtensions), left out.
  const std::vector<std::string>& left_out() const { return left_out_; }

 private:
  std::string root_;
  std::vector<std::string> classes_;
  std::vector<std::string> paths_;
  std::vector<int64_t> labels_;
  std::vector<std::string> left_out_;
};

// Reads a whole file into `out` (reusing its capacity). Shared by file-backed sources. A file larger than
// `max_bytes` is a kResourceExhausted error, found before anything is allocated. A failure of the machine
// (out of descriptors or memory, EIO, ...) is kEnvironment (environment.h); the caller retries it.
Status read_file(const std::string& path, std::vector<uint8_t>& out, uint64_t max_bytes = kDefaultMaxFileBytes);

}  // namespace chute
