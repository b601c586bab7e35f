#include "chute/io/packed_source.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "chute/remote/cache_key.h"
#include "chute/remote/object_fetch.h"

namespace chute {

std::string index_path_for(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    return (std::filesystem::path(path) / kIndexFileName).string();
  return path;
}

Result<std::shared_ptr<const MappedFile>> open_shard(const std::string& dir, const ShardInfo& info,
                                                     const std::string& index_path) {
  const std::string shard_path = dir + "/" + info.name;
  auto shard = MappedFile::open(shard_path);
  if (!shard.is_ok()) {
    if (shard.status().code() == StatusCode::kNotFound)
      return Status(StatusCode::kNotFound, index_path + " lists shard " + info.name + ", which is missing");
    return shard.status();
  }
  CHUTE_ASSIGN_OR_RETURN(ShardHeader header, parse_shard_header((*shard)->bytes(), shard_path));
  if (header.shard_id != info.shard_id || header.record_count != info.record_count ||
      header.file_size != info.file_size)
    return corrupt_data("the index disagrees with shard " + shard_path + ": the index expects " +
                        std::to_string(info.record_count) + " records in " + std::to_string(info.file_size) +
                        " bytes, the shard holds " + std::to_string(header.record_count) + " records in " +
                        std::to_string(header.file_size) + " bytes" +
                        (header.shard_id != info.shard_id ? " and was written by another pack" : ""));
  return shard;
}

Result<std::shared_ptr<PackedSource>> PackedSource::open(const std::string& path, PackedOptions options) {
  const std::string index_path = index_path_for(path);
  auto src = std::shared_ptr<PackedSource>(new PackedSource());
  src->options_ = options;
  const std::string dir = std::filesystem::path(index_path).parent_path().string();
  src->dir_ = dir.empty() ? std::string(".") : dir;
  auto mapped = MappedFile::open(index_path);
  if (!mapped.is_ok()) {
    if (mapped.status().code() != StatusCode::kNotFound) return mapped.status();
    return Status(StatusCode::kNotFound,
                  index_path +
                      " is missing: not a complete chute dataset (an interrupted `chute pack` writes no index; "
                      "a pack split with --parts needs its merge step, `chute merge DIR`)");
  }
  CHUTE_ASSIGN_OR_RETURN(src->index_, IndexView::parse((*mapped)->bytes(), index_path));
  src->index_owner_ = std::move(mapped).value();
  if (src->index_.kind() != IndexKind::kPacked)
    return invalid_argument(index_path + " indexes tar files, not chute shards: open the tar files instead");
  for (const ShardInfo& info : src->index_.shards()) {
    CHUTE_ASSIGN_OR_RETURN(auto shard, open_shard(src->dir_, info, index_path));
    src->shard_files_.push_back(std::make_shared<const ShardBytes>(std::move(shard)));
  }
  return src;
}

Result<std::shared_ptr<PackedSource>> PackedSource::open_remote(const std::string& url,
                                                                std::shared_ptr<ObjectStore> store,
                                                                std::shared_ptr<ShardCache> cache,
                                                                ShardStream::Options remote, PackedOptions options) {
  if (url.find_first_of("?#") != std::string::npos)
    return invalid_argument(redact_url(url) +
                            " has a query string: it names one object (a presigned URL names one tar, say), not a "
                            "packed dataset's prefix, under which the index and each shard are objects of their own");
  std::string base = url;
  if (base.size() >= std::strlen(kIndexFileName) && base.ends_with(kIndexFileName))
    base.resize(base.size() - std::strlen(kIndexFileName));
  if (!base.ends_with('/')) base += '/';
  const std::string index_url = base + kIndexFileName;
  auto info = store->stat(index_url);
  if (!info.is_ok()) {
    if (info.status().code() != StatusCode::kNotFound) return info.status();
    return Status(StatusCode::kNotFound, redact_url(index_url) +
                                             " is missing: not a chute dataset, or an incomplete one (`chute pack` "
                                             "writes the index last)");
  }
  auto src = std::shared_ptr<PackedSource>(new PackedSource());
  src->options_ = options;
  src->dir_ = base;
  // The index entry's key carries its ETag and size: a dataset repacked at the same URL is refetched.
  // In one version: an index replaced while it arrives is fetched again under its new key (object_fetch.h).
  CHUTE_ASSIGN_OR_RETURN(FetchedObject index,
                         fetch_object(*store, cache.get(), *info, cache_key(*info), [&](std::span<const uint8_t> b) {
                           return IndexView::parse(b, redact_url(index_url)).status();
                         }));
  const uint64_t index_size = index.version.size;
  auto owner = std::make_shared<const PageBuffer>(std::move(index.buffer));
  CHUTE_ASSIGN_OR_RETURN(src->index_,
                         IndexView::parse(std::span<const uint8_t>(owner->data(), index_size), redact_url(index_url)));
  src->index_owner_ = std::move(owner);
  if (src->index_.kind() != IndexKind::kPacked)
    return invalid_argument(redact_url(index_url) + " indexes tar files, not chute shards");
  // Each shard's key names its content (its id is the hash of its record headers), so a repacked dataset at
  // the same URL is never served from an old entry; a shard is checked against the index (its header: id,
  // record count, size) as it arrives, and every record's XXH3 on every read.
  std::vector<StreamedShard> shards;
  for (const ShardInfo& s : src->index_.shards()) {
    const std::string shard_url = base + s.name;
    shards.push_back(
        {.object = {.url = shard_url, .size = s.file_size, .etag = {}}, .key = cache_key(shard_url, s.shard_id)});
  }
  const PackedSource* self = src.get();
  auto check = [self](uint32_t i, std::span<const uint8_t> bytes) -> Status {
    const ShardInfo& want = self->index_.shards()[i];
    CHUTE_ASSIGN_OR_RETURN(ShardHeader header, parse_shard_header(bytes, want.name));
    if (header.shard_id != want.shard_id || header.record_count != want.record_count ||
        header.file_size != want.file_size)
      return corrupt_data("shard " + want.name + " is not the one its index lists (another pack's shard?)");
    return Status::ok();
  };
  CHUTE_ASSIGN_OR_RETURN(src->remote_,
                         ShardStream::create(std::move(store), std::move(cache), std::move(shards), check, remote));
  return src;
}

Result<std::shared_ptr<const ShardBytes>> PackedSource::shard_bytes(uint32_t shard) const {
  if (remote_) return remote_->get(shard);
  return shard_files_[shard];
}

void PackedSource::will_read(const EpochOrder& order, int64_t start) const {
  if (!remote_) return;
  remote_->plan(order, start, [this](int64_t i) { return index_.entry(static_cast<uint64_t>(i)).shard; });
}

SourceMemory PackedSource::memory_wanted(int64_t shard_window) const {
  return remote_ ? remote_->memory_wanted(shard_window) : SourceMemory{};
}

void PackedSource::set_memory(uint64_t bytes, int64_t shard_window) const {
  if (remote_) remote_->set_memory(bytes, shard_window);
}

std::string PackedSource::name(int64_t index) const { return std::string(index_.key(index_.entry(index))); }

Status PackedSource::check_record(int64_t index, bool verify, std::vector<uint8_t>& record,
                                  std::span<const uint8_t>* payload) const {
  if (index < 0 || index >= size()) return invalid_argument("record " + std::to_string(index) + " out of range");
  const IndexEntry e = index_.entry(static_cast<uint64_t>(index));
  CHUTE_ASSIGN_OR_RETURN(const auto shard_ptr, shard_bytes(e.shard));
  const ShardBytes& shard = *shard_ptr;
  const uint64_t shard_size = shard.bytes().size();
  auto fail = [&](const Status& st) {
    const std::string where =
        remote_ ? redact_url(remote_->shard(e.shard).object.url) : dir_ + "/" + index_.shards()[e.shard].name;
    return Status(st.code(),
                  "shard " + where + ", record " + std::to_string(index) + " (" + name(index) + "): " + st.message());
  };
  // The record as the index describes it, or what the shard holds from its offset when that is less
  // (parse_record_copy() then says what is wrong). Copied out under the mapping's SIGBUS guard: a shard
  // truncated while open is this sample's error, not a crash.
  const uint64_t wanted = kRecordHeaderSize + uint64_t{e.key_len} + e.payload_len;  // < 2^65: checked below
  const uint64_t available = e.offset <= shard_size ? shard_size - e.offset : 0;
  const size_t n = static_cast<size_t>(std::min(wanted < e.payload_len ? available : wanted, available));
  record.resize(n);
  CHUTE_RETURN_IF_ERROR([&] {
    Status st = shard.copy(std::min(e.offset, shard_size), n, record.data());
    return st.is_ok() ? st : fail(st);
  }());
  auto parsed = parse_record_copy(record, shard_size, e, verify);
  if (!parsed.is_ok()) return fail(parsed.status());
  *payload = *parsed;
  return Status::ok();
}

Status PackedSource::read(int64_t index, std::vector<uint8_t>& out) const {
  std::span<const uint8_t> payload;
  CHUTE_RETURN_IF_ERROR(check_record(index, options_.verify_checksums, out, &payload));
  // The payload follows the record's header and key in `out`: move it to the front.
  const size_t skip = static_cast<size_t>(payload.data() - out.data()), len = payload.size();
  std::memmove(out.data(), out.data() + skip, len);
  out.resize(len);
  return Status::ok();
}

Status PackedSource::read_capped(int64_t index, std::vector<uint8_t>& out, uint64_t max_bytes) const {
  if (index >= 0 && index < size() && payload_size(index) > max_bytes)
    return file_too_large(payload_size(index), max_bytes);
  return read(index, out);
}

std::vector<int64_t> PackedSource::shard_sizes() const {
  std::vector<int64_t> sizes;
  sizes.reserve(index_.shards().size());
  for (const ShardInfo& info : index_.shards()) sizes.push_back(static_cast<int64_t>(info.record_count));
  return sizes;
}

std::vector<std::pair<int64_t, Status>> PackedSource::verify(int64_t begin, int64_t end,
                                                             const std::function<bool(int64_t)>& progress) const {
  std::vector<std::pair<int64_t, Status>> bad;
  std::span<const uint8_t> payload;
  std::vector<uint8_t> record;
  for (int64_t i = begin; i < end; ++i) {
    Status st = check_record(i, /*verify=*/true, record, &payload);
    if (!st.is_ok()) bad.emplace_back(i, std::move(st));
    if (progress && (i - begin + 1) % 4096 == 0 && !progress(i - begin + 1)) break;
  }
  return bad;
}

}  // namespace chute
