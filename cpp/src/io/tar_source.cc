#include "chute/io/tar_source.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <mutex>

#include "chute/base/atomic_file.h"
#include "chute/io/index_cache.h"
#include "chute/io/remote_tars.h"
#include "chute/remote/cache_key.h"

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

std::vector<uint8_t> encode_tar_index(const IndexedFile& file, const TarScan& scan) {
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

void TarSource::add(Tar t) {
  for (TarSkipped& s : decode_skipped(t.index.classes())) {
    for (std::string& e : s.examples) e = t.name + ":" + e;
    auto it = std::find_if(skipped_.begin(), skipped_.end(), [&](const TarSkipped& o) { return o.reason == s.reason; });
    if (it == skipped_.end()) {
      skipped_.push_back(std::move(s));
      continue;
    }
    it->count += s.count;
    for (std::string& e : s.examples)
      if (it->examples.size() < kMaxSkipExamples) it->examples.push_back(std::move(e));
  }
  t.first = total_;
  total_ += static_cast<int64_t>(t.index.size());
  tars_.push_back(std::move(t));
}

Status TarSource::finish(const std::string& first_name) {
  if (total_ == 0) {
    std::string why;
    for (const TarSkipped& s : skipped_)
      why += (why.empty() ? "; skipped: " : ", ") + std::to_string(s.count) + " " + s.reason +
             (s.examples.empty() ? "" : " (" + s.examples[0] + ")");
    return invalid_argument("no image sample in " + first_name + (tars_.size() > 1 ? " and the other tars" : "") + why);
  }
  label_by_folder();
  return Status::ok();
}

Result<std::shared_ptr<TarSource>> TarSource::open(const std::vector<std::string>& paths, TarOptions options) {
  if (paths.empty()) return invalid_argument("no tar file to open");
  auto src = std::shared_ptr<TarSource>(new TarSource());
  for (const std::string& path : paths) {
    CHUTE_ASSIGN_OR_RETURN(std::shared_ptr<const MappedFile> file, MappedFile::open(path));
    const IndexRequest request{.kind = IndexKind::kTar,
                               .cache_dir = options.cache_dir,
                               .subdir = "tar-index",
                               .variant = "",
                               .header = kHeaderBlock,
                               .beside = {path + ".chidx"},
                               .matches = {}};
    CHUTE_ASSIGN_OR_RETURN(CachedIndex index, load_file_index(*file, request, [&]() -> Result<std::vector<uint8_t>> {
                             CHUTE_ASSIGN_OR_RETURN(TarScan scan, scan_tar(file->bytes(), path));
                             return encode_tar_index(indexed_file(*file), scan);
                           }));
    src->add(Tar{.name = path,
                 .file = std::make_shared<const ShardBytes>(std::move(file)),
                 .index_owner = std::move(index.owner),
                 .index = std::move(index.view),
                 .index_path = std::move(index.path)});
  }
  CHUTE_RETURN_IF_ERROR(src->finish(paths.front()));
  return src;
}

Result<std::shared_ptr<TarSource>> TarSource::open_remote(std::vector<ObjectInfo> tars,
                                                          std::shared_ptr<ObjectStore> store,
                                                          std::shared_ptr<ShardCache> cache, TarOptions options,
                                                          ShardStream::Options stream) {
  if (tars.empty()) return invalid_argument("no tar file to open");
  CHUTE_ASSIGN_OR_RETURN(std::vector<std::optional<CachedIndex>> found,
                         find_tar_indexes(*store, tars, options.cache_dir));
  // The indexes the stream checks each tar's bytes against as they arrive: a tar rewritten since it was
  // indexed (its content fingerprint differs) is never read through an index of its old members. A tar
  // being indexed from its bytes has none yet.
  struct Known {
    std::mutex mu;
    std::vector<std::shared_ptr<const CachedIndex>> index;
  };
  auto known = std::make_shared<Known>();
  known->index.resize(tars.size());
  for (size_t t = 0; t < tars.size(); ++t)
    if (found[t]) known->index[t] = std::make_shared<const CachedIndex>(*found[t]);
  auto check = [known](uint32_t t, std::span<const uint8_t> bytes) -> Status {
    std::shared_ptr<const CachedIndex> index;
    {
      std::lock_guard<std::mutex> lock(known->mu);
      index = known->index[t];
    }
    if (!index || index_fingerprint(index->view, bytes, kHeaderBlock) == index->view.tar_identity().fingerprint)
      return Status::ok();
    return corrupt_data("its index (" + (index->path.empty() ? std::string("learned at open") : index->path) +
                        ") does not describe these bytes: the tar was rewritten since it was indexed (run `chute "
                        "index` on it again, or empty the node's cache: `chute cache clear`)");
  };
  std::vector<StreamedShard> shards;
  for (const ObjectInfo& tar : tars) shards.push_back({.object = tar, .key = cache_key(tar)});
  auto src = std::shared_ptr<TarSource>(new TarSource());
  CHUTE_ASSIGN_OR_RETURN(src->stream_, ShardStream::create(store, cache, std::move(shards), check, stream));
  std::vector<uint32_t> missing;
  for (size_t t = 0; t < tars.size(); ++t)
    if (!found[t]) missing.push_back(static_cast<uint32_t>(t));
  if (!missing.empty()) {
    std::fprintf(stderr,
                 "chute: %zu of the %zu tars have no index (a <tar>.chidx beside it, or one this node learned): "
                 "streaming them once to count their samples (`chute index` writes the sidecars; docs/REMOTE.md)\n",
                 missing.size(), tars.size());
    src->stream_->plan_shards(missing);  // fetched ahead, in this order, while each is indexed
    for (uint32_t t : missing) {
      // Cancelled with this thread's scope (Ctrl-C): the read, or its wait for the prefetch, ends kCancelled.
      CHUTE_ASSIGN_OR_RETURN(std::shared_ptr<const ShardBytes> bytes, src->stream_->get(t));
      // Keyed by the version that arrived (a tar replaced meanwhile is fetched anew: object_fetch.h).
      CHUTE_ASSIGN_OR_RETURN(found[t], index_streamed_tar(src->stream_->version(t), bytes->bytes(), options.cache_dir));
      std::lock_guard<std::mutex> lock(known->mu);
      known->index[t] = std::make_shared<const CachedIndex>(*found[t]);
    }
  }
  for (size_t t = 0; t < tars.size(); ++t)
    src->add(Tar{.name = object_display_name(tars[t].url),
                 .file = nullptr,
                 .index_owner = std::move(found[t]->owner),
                 .index = std::move(found[t]->view),
                 .index_path = std::move(found[t]->path)});
  CHUTE_RETURN_IF_ERROR(src->finish(src->tars_.front().name));
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
  return t.name + ":" + std::string(t.index.key(t.index.entry(i)));
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
  CHUTE_ASSIGN_OR_RETURN(std::shared_ptr<const ShardBytes> bytes, tar_bytes(t, static_cast<size_t>(&t - tars_.data())));
  // IndexView::parse checked offset + length against the indexed size, which equals the tar's (a mapping's,
  // or a stream's object's). Copied under a mapping's SIGBUS guard: a local tar truncated while open is
  // this sample's error, not a crash.
  out.resize(e.payload_len);
  return bytes->copy(e.offset, e.payload_len, out.data());
}

Result<std::shared_ptr<const ShardBytes>> TarSource::tar_bytes(const Tar& t, size_t i) const {
  if (t.file) return t.file;
  return stream_->get(static_cast<uint32_t>(i));
}

void TarSource::will_read(const EpochOrder& order, int64_t start) const {
  if (!stream_) return;
  stream_->plan(order, start, [this](int64_t index) {
    uint64_t local;
    return static_cast<uint32_t>(&locate(index, &local) - tars_.data());
  });
}

SourceMemory TarSource::memory_wanted(int64_t shard_window) const {
  return stream_ ? stream_->memory_wanted(shard_window) : SourceMemory{};
}

void TarSource::set_memory(uint64_t bytes, int64_t shard_window) const {
  if (stream_) stream_->set_memory(bytes, shard_window);
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
    CHUTE_RETURN_IF_ERROR(write_file_atomically(path + ".chidx", encode_tar_index(indexed_file(*tar), scan)));
  }
  return Status::ok();
}

}  // namespace chute
