// scan_tar: a tar file's members (ustar, GNU long names and links, pax path/size/linkpath) grouped into
// image samples, with every member that does not become part of a sample reported, by reason.
//
// Links: a hard link, or a symbolic link whose target (relative to the link's directory, followed through
// other links, at most 40 of them) is a member of the same archive, reads its target's bytes under its own
// name. A symbolic link to a directory of the archive stands for that directory's files under the link's
// path, as os.walk(followlinks=True) sees them (one level: links inside the linked directory that point to
// directories are not followed again). Links leaving the archive, to missing members, or in a loop are
// skipped and reported.
//
// Samples, per tar, in one of two layouts:
// - WebDataset (some member shares its key with an image but is not one: a .cls, .json, .txt...): members
//   are grouped by WebDataset's rule exactly (webdataset_key; consecutive members with one key are a
//   sample; "__*__" metadata skipped; a repeated extension in a sample is skipped and reported, where
//   WebDataset raises). A sample's image is its first member whose extension is an image extension, else
//   its first whose last extension is ("img.0.jpg"); its label the integer in its `.cls` member, else -1.
// - a tar of an image tree (no such companion): every member whose name ends with an image extension is
//   a sample, as torchvision's ImageFolder lists files, so the tree and its tar count the same samples
//   ("img.0.jpg" and "img.1.jpg" are two samples, not one WebDataset sample with two images).
// Image extensions are ImageFolder's (kImageExtensions, chute/image_folder.h), compared case-blind.
// Every header is checked (checksum, sizes inside the file); errors name the tar and the member.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chute/base/status.h"

namespace chute {

struct TarSample {
  uint64_t offset = 0;  // the image's bytes in the tar (a link's target's)
  uint64_t size = 0;
  int64_t label = -1;
  std::string member;  // the image member's path in the tar (a link's own path)
};

// Members left out of every sample for one reason: how many, and the first few names.
struct TarSkipped {
  std::string reason;
  uint64_t count = 0;
  std::vector<std::string> examples;
};
inline constexpr size_t kMaxSkipExamples = 5;

struct TarScan {
  std::vector<TarSample> samples;
  std::vector<TarSkipped> skipped;  // in order of first occurrence
};

// WebDataset's split of a member path (webdataset.tariterators.base_plus_ext, the regular expression
// ^((?:.*/|)[^.]+)[.]([^/]*)$): the key is the path up to the first dot of the file name, the extension
// the rest. False when the path has no such split (no dot in the file name; a leading dot is not one
// unless a directory name can end the key, as in the regular expression).
bool webdataset_key(std::string_view path, std::string_view* key, std::string_view* ext);

// `what` names the tar in errors.
Result<TarScan> scan_tar(std::span<const uint8_t> tar, const std::string& what);

}  // namespace chute
