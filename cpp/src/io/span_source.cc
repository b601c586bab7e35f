#include "chute/io/span_source.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>

namespace chute {
namespace {

constexpr char kScanNote[] = "scan";
constexpr char kBadNote[] = "bad";

// A note's fields, split at NULs.
std::vector<std::string_view> fields(const std::string& note) {
  std::vector<std::string_view> out;
  std::string_view rest(note);
  for (size_t nul; (nul = rest.find('\0')) != std::string_view::npos; rest.remove_prefix(nul + 1))
    out.push_back(rest.substr(0, nul));
  out.push_back(rest);
  return out;
}

}  // namespace

std::vector<std::string> span_notes(const std::string& scan, const std::vector<std::pair<uint64_t, std::string>>& bad) {
  std::vector<std::string> out{std::string(kScanNote) + '\0' + scan};
  for (const auto& [index, why] : bad) out.push_back(std::string(kBadNote) + '\0' + std::to_string(index) + '\0' + why);
  return out;
}

std::string span_scan_note(const IndexView& index) {
  for (const std::string& note : index.classes()) {
    const auto f = fields(note);
    if (f.size() == 2 && f[0] == kScanNote) return std::string(f[1]);
  }
  return "";
}

Result<std::shared_ptr<SpanSource>> SpanSource::with_labels(std::vector<int64_t> labels) const {
  std::vector<SpanPart> parts;
  for (const Part& p : parts_) parts.push_back(p.part);
  SpanOptions options = options_;
  options.labels = std::move(labels);
  if (options.shard_sizes.empty() && !options.no_shards) options.shard_sizes = shard_sizes_;
  return create(std::move(parts), std::move(options));
}

Result<std::shared_ptr<SpanSource>> SpanSource::create(std::vector<SpanPart> parts, SpanOptions options) {
  if (parts.empty()) return invalid_argument("a span source needs at least one part");
  auto src = std::shared_ptr<SpanSource>(new SpanSource());
  for (SpanPart& p : parts) {
    const IndexView& index = p.index.view;
    if (p.file) {
      p.memory = p.file->bytes();
      if (p.name.empty()) p.name = p.file->path();
    }
    if (index.kind() != IndexKind::kSpan || index.shards().size() != 1 ||
        index.shards()[0].file_size != p.memory.size())
      return invalid_argument(p.name + ": its index does not describe its " + std::to_string(p.memory.size()) +
                              " bytes (a bug in the format's reader)");
    for (const std::string& note : index.classes()) {
      const auto f = fields(note);
      int64_t i = -1;
      if (f.size() != 3 || f[0] != kBadNote) continue;
      std::from_chars(f[1].data(), f[1].data() + f[1].size(), i);
      if (i >= 0 && static_cast<uint64_t>(i) < index.size()) src->bad_[src->total_ + i] = std::string(f[2]);
    }
    if (!options.no_shards && options.shard_sizes.empty())
      src->shard_sizes_.push_back(static_cast<int64_t>(index.size()));
    src->parts_.push_back({.part = std::move(p), .first = src->total_});
    src->total_ += static_cast<int64_t>(index.size());
  }
  if (!options.shard_sizes.empty()) {
    int64_t total = 0;
    for (int64_t n : options.shard_sizes) total += n;
    if (total != src->total_ || options.no_shards)
      return invalid_argument("span source: shards of " + std::to_string(total) + " samples for " +
                              std::to_string(src->total_) + " (a bug in the format's reader)");
    src->shard_sizes_ = options.shard_sizes;
  }
  if (!options.labels.empty() && static_cast<int64_t>(options.labels.size()) != src->total_)
    return invalid_argument(std::to_string(options.labels.size()) + " labels for " + std::to_string(src->total_) +
                            " samples");
  src->options_ = std::move(options);
  return src;
}

const SpanSource::Part& SpanSource::locate(int64_t index, uint64_t* local) const {
  auto it = std::upper_bound(parts_.begin(), parts_.end(), index, [](int64_t i, const Part& p) { return i < p.first; });
  const Part& p = *std::prev(it);
  *local = static_cast<uint64_t>(index - p.first);
  return p;
}

int64_t SpanSource::label(int64_t index) const {
  if (!options_.labels.empty()) return options_.labels[static_cast<size_t>(index)];
  uint64_t i;
  const Part& p = locate(index, &i);
  return p.part.index.view.entry(i).label;
}

std::string SpanSource::name(int64_t index) const {
  uint64_t i;
  const Part& p = locate(index, &i);
  const IndexView& v = p.part.index.view;
  return p.part.name + ":" + std::string(v.key(v.entry(i)));
}

std::string SpanSource::key(int64_t index) const {
  uint64_t i;
  const Part& p = locate(index, &i);
  const IndexView& v = p.part.index.view;
  const std::string key(v.key(v.entry(i)));
  if (parts_.size() == 1) return key;
  return std::filesystem::path(p.part.name).filename().string() + ":" + key;
}

uint64_t SpanSource::span_size(int64_t index) const {
  uint64_t i;
  const Part& p = locate(index, &i);
  return p.part.index.view.entry(i).payload_len;
}

std::vector<std::pair<int64_t, std::string>> SpanSource::bad_samples() const {
  std::vector<std::pair<int64_t, std::string>> out(bad_.begin(), bad_.end());
  std::sort(out.begin(), out.end());
  return out;
}

Status SpanSource::read(int64_t index, std::vector<uint8_t>& out) const {
  if (index < 0 || index >= total_) return invalid_argument("sample " + std::to_string(index) + " out of range");
  if (auto bad = bad_.find(index); bad != bad_.end()) return corrupt_data(bad->second);
  uint64_t i;
  const Part& p = locate(index, &i);
  const IndexEntry e = p.part.index.view.entry(i);
  // IndexView::parse checked offset + length against the indexed size, which create() matched to the bytes'.
  out.resize(e.payload_len);
  Status st;
  if (p.part.file)
    st = p.part.file->copy(e.offset, e.payload_len, out.data());
  else if (e.payload_len > 0)
    std::memcpy(out.data(), p.part.memory.data() + e.offset, e.payload_len);
  if (st.is_ok() && options_.unwrap) st = options_.unwrap(out);
  if (!st.is_ok()) return Status(st.code(), "at offset " + std::to_string(e.offset) + ": " + st.message());
  return st;
}

Status SpanSource::read_capped(int64_t index, std::vector<uint8_t>& out, uint64_t max_bytes) const {
  if (index >= 0 && index < total_) {
    const uint64_t len = span_size(index);
    if (len > max_bytes) return file_too_large(len, max_bytes);
  }
  return read(index, out);
}

}  // namespace chute
