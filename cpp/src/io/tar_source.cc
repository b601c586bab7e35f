#include "chute/io/tar_source.h"

#include <algorithm>
#include <charconv>

#include "chute/base/atomic_file.h"
#include "chute/io/index_cache.h"

namespace chute {
namespace {

constexpr size_t kHeaderBlock = 512;  // a member's header: the fingerprint hashes the one before each sample

// Kind tar keeps what the scan skipped in the class table: per reason, "<reason>\0<count>\0<example>..."
std::vector<std::string> encode_skipped(const std::vector<TarSkipped>& skipped) {
  std::vector<std::string> out;
  for (const TarSkipped& s : skipped) {
    std::string entry = s.reason + '\0' + std::to_string(s.count);
    for (const std::string& e : s.examples) entry += '\0' + e;
    out.push_back(std::move(entry));
  }
  return out;
}

std::vector<TarSkipped> decode_skipped(const std::vector<std::string>& entries) {
  std::vector<TarSkipped> out;
  for (const std::string& entry : entries) {
    std::vector<std::string> parts;
    size_t start = 0;
    for (size_t nul; (nul = entry.find('\0', start)) != std::string::npos; start = nul + 1)
      parts.push_back(entry.substr(start, nul - start));
    parts.push_back(entry.substr(start));
    if (parts.size() < 2) continue;
    TarSkipped s{.reason = parts[0], .count = 0, .examples = {}};
    std::from_chars(parts[1].data(), parts[1].data() + parts[1].size(), s.count);
    s.examples.assign(parts.begin() + 2, parts.end());
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

uint64_t tar_fingerprint(std::span<const uint8_t> tar, const std::vector<uint64_t>& offsets) {
  return content_fingerprint(tar, offsets, kHeaderBlock);
}

std::vector<uint8_t> encode_tar_index(const MappedFile& file, const TarScan& scan) {
  std::vector<IndexEntry> entries;
  entries.reserve(scan.samples.size());
  std::string keys;
  for (const TarSample& s : scan.samples) {
    entries.push_back({.offset = s.offset,
                       .payload_len = s.size,
                       .label = s.label,
                       .key_offset = keys.size(),
                       .shard = 0,
                       .key_len = static_cast<uint32_t>(s.member.size()),
                       .source_bytes = s.size});
    keys += s.member;
  }
  return encode_file_index(IndexKind::kTar, file, entries, keys, encode_skipped(scan.skipped), kHeaderBlock);
}

Result<std::shared_ptr<TarSource>> TarSource::open(const std::vector<std::string>& paths, TarOptions options) {
  if (paths.empty()) return invalid_argument("no tar file to open");
  auto src = std::shared_ptr<TarSource>(new TarSource());
  for (const std::string& path : paths) {
    Tar t;
    CHUTE_ASSIGN_OR_RETURN(t.file, MappedFile::open(path));
    const IndexRequest request{.kind = IndexKind::kTar,
                               .cache_dir = options.cache_dir,
                               .subdir = "tar-index",
                               .variant = "",
                               .header = kHeaderBlock,
                               .beside = {path + ".chidx"},
                               .matches = {}};
    CHUTE_ASSIGN_OR_RETURN(CachedIndex index, load_file_index(*t.file, request, [&]() -> Result<std::vector<uint8_t>> {
                             CHUTE_ASSIGN_OR_RETURN(TarScan scan, scan_tar(t.file->bytes(), path));
                             return encode_tar_index(*t.file, scan);
                           }));
    t.index_owner = std::move(index.owner);
    t.index = std::move(index.view);
    t.index_path = std::move(index.path);
    for (TarSkipped& s : decode_skipped(t.index.classes())) {
      for (std::string& e : s.examples) e = path + ":" + e;
      auto it = std::find_if(src->skipped_.begin(), src->skipped_.end(),
                             [&](const TarSkipped& o) { return o.reason == s.reason; });
      if (it == src->skipped_.end()) {
        src->skipped_.push_back(std::move(s));
        continue;
      }
      it->count += s.count;
      for (std::string& e : s.examples)
        if (it->examples.size() < kMaxSkipExamples) it->examples.push_back(std::move(e));
    }
    t.first = src->total_;
    src->total_ += static_cast<int64_t>(t.index.size());
    src->tars_.push_back(std::move(t));
  }
  if (src->total_ == 0) {
    std::string why;
    for (const TarSkipped& s : src->skipped_)
      why += (why.empty() ? "; skipped: " : ", ") + std::to_string(s.count) + " " + s.reason +
             (s.examples.empty() ? "" : " (" + s.examples[0] + ")");
    return invalid_argument("no image sample in " + paths.front() + (paths.size() > 1 ? " and the other tars" : "") +
                            why);
  }
  src->label_by_folder();
  return src;
}

void TarSource::label_by_folder() {
  std::vector<std::string_view> members;
  members.reserve(static_cast<size_t>(total_));
  for (const Tar& t : tars_)
    for (uint64_t i = 0; i < t.index.size(); ++i) {
      const IndexEntry e = t.index.entry(i);
      if (e.label != -1) return;  // WebDataset labels (.cls)
      members.push_back(t.index.key(e));
    }
  // The directory every member lies in ("" or ending in '/').
  std::string_view common = members.front().substr(0, members.front().rfind('/') + 1);
  for (std::string_view m : members)
    while (!m.starts_with(common)) {
      common.remove_suffix(1);  // its trailing '/'
      const size_t slash = common.rfind('/');
      common = slash == std::string_view::npos ? std::string_view() : common.substr(0, slash + 1);
    }
  std::vector<std::string_view> class_of(members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    const std::string_view rest = members[i].substr(common.size());
    const size_t slash = rest.find('/');
    if (slash == std::string_view::npos || slash == 0) return;  // an image outside any class directory
    class_of[i] = rest.substr(0, slash);
  }
  std::vector<std::string_view> names(class_of);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  classes_.assign(names.begin(), names.end());
  folder_labels_.resize(members.size());
  for (size_t i = 0; i < members.size(); ++i)
    folder_labels_[i] = std::lower_bound(names.begin(), names.end(), class_of[i]) - names.begin();
}

const TarSource::Tar& TarSource::locate(int64_t index, uint64_t* local) const {
  auto it = std::upper_bound(tars_.begin(), tars_.end(), index, [](int64_t i, const Tar& t) { return i < t.first; });
  const Tar& t = *std::prev(it);
  *local = static_cast<uint64_t>(index - t.first);
  return t;
}

std::vector<int64_t> TarSource::shard_sizes() const {
  std::vector<int64_t> sizes;
  sizes.reserve(tars_.size());
  for (const Tar& t : tars_) sizes.push_back(static_cast<int64_t>(t.index.size()));
  return sizes;
}

int64_t TarSource::label(int64_t index) const {
  if (!folder_labels_.empty()) return folder_labels_[static_cast<size_t>(index)];
  uint64_t i;
  const Tar& t = locate(index, &i);
  return t.index.entry(i).label;
}

std::string TarSource::member(int64_t index) const {
  uint64_t i;
  const Tar& t = locate(index, &i);
  return std::string(t.index.key(t.index.entry(i)));
}

std::string TarSource::name(int64_t index) const {
  uint64_t i;
  const Tar& t = locate(index, &i);
  return t.file->path() + ":" + std::string(t.index.key(t.index.entry(i)));
}

uint64_t TarSource::payload_size(int64_t index) const {
  uint64_t i;
  const Tar& t = locate(index, &i);
  return t.index.entry(i).payload_len;
}

Status TarSource::read(int64_t index, std::vector<uint8_t>& out) const {
  if (index < 0 || index >= total_) return invalid_argument("sample " + std::to_string(index) + " out of range");
  uint64_t i;
  const Tar& t = locate(index, &i);
  const IndexEntry e = t.index.entry(i);
  // IndexView::parse checked offset + length against the indexed size, which equals the mapping's. Copied
  // under the mapping's SIGBUS guard: a tar truncated while open is this sample's error, not a crash.
  out.resize(e.payload_len);
  return t.file->copy(e.offset, e.payload_len, out.data());
}

Status TarSource::read_capped(int64_t index, std::vector<uint8_t>& out, uint64_t max_bytes) const {
  if (index >= 0 && index < total_) {
    uint64_t i;
    const uint64_t len = locate(index, &i).index.entry(i).payload_len;
    if (len > max_bytes) return file_too_large(len, max_bytes);
  }
  return read(index, out);
}

Status write_tar_indexes(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    CHUTE_ASSIGN_OR_RETURN(auto tar, MappedFile::open(path));
    CHUTE_ASSIGN_OR_RETURN(TarScan scan, scan_tar(tar->bytes(), path));
    CHUTE_RETURN_IF_ERROR(write_file_atomically(path + ".chidx", encode_tar_index(*tar, scan)));
  }
  return Status::ok();
}

}  // namespace chute
