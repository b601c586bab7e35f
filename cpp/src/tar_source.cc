#include "chute/tar_source.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <filesystem>

#include "chute/pack_writer.h"

namespace chute {
namespace {

constexpr size_t kBlock = 512;
constexpr const char* kTarImageExtensions[] = {"jpg", "jpeg", "png", "ppm", "bmp", "pgm", "tif", "tiff", "webp"};

std::string field(const uint8_t* p, size_t n) {
  const void* nul = std::memchr(p, 0, n);
  return std::string(reinterpret_cast<const char*>(p), nul ? static_cast<const uint8_t*>(nul) - p : n);
}

// A numeric header field: octal digits (space or NUL padded), or GNU base-256 when the top bit is set.
bool parse_number(const uint8_t* p, size_t n, uint64_t* out) {
  uint64_t v = 0;
  if (p[0] & 0x80) {
    if (p[0] & 0x40) return false;  // negative
    v = p[0] & 0x3f;
    for (size_t i = 1; i < n; ++i) {
      if (v >> 56) return false;
      v = (v << 8) | p[i];
    }
    *out = v;
    return true;
  }
  size_t i = 0;
  while (i < n && p[i] == ' ') ++i;
  bool any = false;
  for (; i < n && p[i] >= '0' && p[i] <= '7'; ++i) {
    if (v >> 61) return false;
    v = v * 8 + (p[i] - '0');
    any = true;
  }
  for (; i < n; ++i)
    if (p[i] != ' ' && p[i] != 0) return false;
  *out = v;
  return any;
}

bool checksum_ok(const uint8_t* h) {
  uint64_t stored;
  if (!parse_number(h + 148, 8, &stored)) return false;
  uint64_t sum = 0;
  int64_t signed_sum = 0;
  for (size_t i = 0; i < kBlock; ++i) {
    const uint8_t c = (i >= 148 && i < 156) ? ' ' : h[i];
    sum += c;
    signed_sum += static_cast<int8_t>(c);
  }
  return stored == sum || static_cast<int64_t>(stored) == signed_sum;
}

// pax extended header records: "<len> <key>=<value>\n". Picks out path and size.
bool parse_pax(std::span<const uint8_t> data, std::string* path, uint64_t* size, bool* has_size) {
  size_t pos = 0;
  while (pos < data.size()) {
    size_t len = 0;
    const char* begin = reinterpret_cast<const char*>(data.data() + pos);
    const char* stop = reinterpret_cast<const char*>(data.data() + data.size());
    auto [ptr, ec] = std::from_chars(begin, stop, len);
    if (ec != std::errc() || ptr == stop || *ptr != ' ' || len == 0 || len > data.size() - pos) return false;
    const std::string_view record(begin, len);
    if (record.back() != '\n') return false;
    const std::string_view kv = record.substr(static_cast<size_t>(ptr - begin) + 1, len - (ptr - begin) - 2);
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos) return false;
    const std::string_view key = kv.substr(0, eq), value = kv.substr(eq + 1);
    if (key == "path") *path = std::string(value);
    if (key == "size") {
      auto [p2, ec2] = std::from_chars(value.data(), value.data() + value.size(), *size);
      if (ec2 != std::errc() || p2 != value.data() + value.size()) return false;
      *has_size = true;
    }
    pos += len;
  }
  return true;
}

bool is_image_extension(std::string ext) {
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return std::find_if(std::begin(kTarImageExtensions), std::end(kTarImageExtensions),
                      [&](const char* e) { return ext == e; }) != std::end(kTarImageExtensions);
}

}  // namespace

Result<std::vector<TarSample>> scan_tar(std::span<const uint8_t> tar, const std::string& what) {
  struct Group {
    std::string key;
    bool has_image = false, has_label = false;
    TarSample sample;
  };
  std::vector<TarSample> samples;
  Group group;
  auto finish_group = [&] {
    if (group.has_image) samples.push_back(std::move(group.sample));
    group = Group{};
  };
  std::string long_name, pax_path;
  uint64_t pax_size = 0;
  bool pax_has_size = false;
  uint64_t pos = 0;
  while (pos < tar.size()) {
    const std::string at = what + ": member header at offset " + std::to_string(pos);
    if (tar.size() - pos < kBlock) return corrupt_data(at + " is cut short (truncated tar)");
    const uint8_t* h = tar.data() + pos;
    if (std::all_of(h, h + kBlock, [](uint8_t c) { return c == 0; })) break;  // end of archive
    if (!checksum_ok(h)) return corrupt_data(at + ": bad header checksum (not a tar file, or corrupt)");
    uint64_t size;
    if (!parse_number(h + 124, 12, &size)) return corrupt_data(at + ": bad size field");
    const char type = static_cast<char>(h[156]);
    std::string name = field(h, 100);
    if (std::memcmp(h + 257, "ustar", 5) == 0) {
      const std::string prefix = field(h + 345, 155);
      if (!prefix.empty()) name = prefix + "/" + name;
    }
    if (!long_name.empty()) name = std::move(long_name), long_name.clear();
    if (!pax_path.empty()) name = std::move(pax_path), pax_path.clear();
    if (pax_has_size && type != 'x' && type != 'g' && type != 'L' && type != 'K') size = pax_size, pax_has_size = false;
    const uint64_t data = pos + kBlock;
    if (size > tar.size() - data)
      return corrupt_data(what + ": member " + name + " at offset " + std::to_string(pos) + ": size " +
                          std::to_string(size) + " runs past the end of the file (truncated tar?)");
    const std::span<const uint8_t> body = tar.subspan(data, size);
    if (type == 'L') {
      long_name = field(body.data(), body.size());
    } else if (type == 'x') {
      if (!parse_pax(body, &pax_path, &pax_size, &pax_has_size)) return corrupt_data(at + ": bad pax header");
    } else if (type == '0' || type == '\0' || type == '7') {
      while (name.starts_with("./")) name.erase(0, 2);
      // WebDataset's key rule: path up to the first dot of the file name; the rest is the extension.
      const size_t slash = name.rfind('/');
      const size_t dot = name.find('.', slash == std::string::npos ? 0 : slash + 1);
      if (dot != std::string::npos && dot > (slash == std::string::npos ? 0 : slash + 1)) {
        const std::string key = name.substr(0, dot), ext = name.substr(dot + 1);
        if (key != group.key) finish_group(), group.key = key;
        if (ext == "cls") {
          std::string text(reinterpret_cast<const char*>(body.data()), body.size());
          while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
          size_t start = 0;
          while (start < text.size() && std::isspace(static_cast<unsigned char>(text[start]))) ++start;
          int64_t label = 0;
          auto [p, ec] = std::from_chars(text.data() + start, text.data() + text.size(), label);
          if (ec != std::errc() || p != text.data() + text.size() || start == text.size())
            return corrupt_data(what + ": member " + name + ": label is not an integer");
          group.has_label = true;
          group.sample.label = label;
        } else if (!group.has_image && is_image_extension(ext)) {
          group.has_image = true;
          group.sample.offset = data;
          group.sample.size = size;
          group.sample.member = name;
        }
      }
    }
    const uint64_t padded = (size + kBlock - 1) / kBlock * kBlock;  // size <= tar.size(): no overflow
    if (padded > tar.size() - data) break;  // the last member's padding may be missing
    pos = data + padded;
  }
  finish_group();
  return samples;
}

std::vector<uint8_t> encode_tar_index(const MappedFile& file, const std::vector<TarSample>& samples) {
  std::vector<IndexEntry> entries;
  entries.reserve(samples.size());
  std::string keys;
  for (const TarSample& s : samples) {
    entries.push_back({.offset = s.offset, .payload_len = s.size, .label = s.label, .key_offset = keys.size(),
                       .shard = 0, .key_len = static_cast<uint32_t>(s.member.size())});
    keys += s.member;
  }
  const ShardInfo info{.name = std::filesystem::path(file.path()).filename().string(), .shard_id = 0,
                       .file_size = file.bytes().size(), .record_count = samples.size(), .first_sample = 0,
                       .mtime_ns = file.mtime_ns()};
  return encode_index(IndexKind::kTar, {info}, entries, keys, {});
}

namespace {

// The tar's index from "<tar>.chidx" when it is there and matches the tar; else scanned (and written).
Status load_index(const std::shared_ptr<const MappedFile>& tar, bool write, std::shared_ptr<const void>* owner,
                  IndexView* view) {
  const std::string index_path = tar->path() + ".chidx";
  auto mapped = MappedFile::open(index_path);
  if (mapped.is_ok()) {
    auto parsed = IndexView::parse((*mapped)->bytes(), index_path);
    if (parsed.is_ok() && parsed->kind() == IndexKind::kTar && parsed->shards().size() == 1 &&
        parsed->shards()[0].file_size == tar->bytes().size() && parsed->shards()[0].mtime_ns == tar->mtime_ns() &&
        parsed->shards()[0].name == std::filesystem::path(tar->path()).filename().string()) {
      *owner = std::move(mapped).value();
      *view = std::move(parsed).value();
      return Status::ok();
    }
    // Stale (the tar changed) or damaged: rebuilt below.
  }
  CHUTE_ASSIGN_OR_RETURN(std::vector<TarSample> samples, scan_tar(tar->bytes(), tar->path()));
  auto bytes = std::make_shared<const std::vector<uint8_t>>(encode_tar_index(*tar, samples));
  if (write) (void)write_file_atomically(index_path, *bytes);  // best effort: a read-only directory is fine
  CHUTE_ASSIGN_OR_RETURN(*view, IndexView::parse(*bytes, index_path));
  *owner = std::move(bytes);
  return Status::ok();
}

}  // namespace

Result<std::shared_ptr<TarSource>> TarSource::open(const std::vector<std::string>& paths, TarOptions options) {
  if (paths.empty()) return invalid_argument("no tar file to open");
  auto src = std::shared_ptr<TarSource>(new TarSource());
  for (const std::string& path : paths) {
    Tar t;
    CHUTE_ASSIGN_OR_RETURN(t.file, MappedFile::open(path));
    CHUTE_RETURN_IF_ERROR(load_index(t.file, options.write_index, &t.index_owner, &t.index));
    t.first = src->total_;
    src->total_ += static_cast<int64_t>(t.index.size());
    src->tars_.push_back(std::move(t));
  }
  if (src->total_ == 0) return invalid_argument("no image sample in " + paths.front() + (paths.size() > 1 ? " and the other tars" : ""));
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
    CHUTE_ASSIGN_OR_RETURN(std::vector<TarSample> samples, scan_tar(tar->bytes(), path));
    CHUTE_RETURN_IF_ERROR(write_file_atomically(path + ".chidx", encode_tar_index(*tar, samples)));
  }
  return Status::ok();
}

}  // namespace chute
