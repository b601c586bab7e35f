#include "chute/io/packed_source.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "chute/remote/cached_object.h"

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
  src->index_file_ = std::move(mapped).value();
  CHUTE_ASSIGN_OR_RETURN(src->index_, IndexView::parse(src->index_file_->bytes(), index_path));
  if (src->index_.kind() != IndexKind::kPacked)
    return invalid_argument(index_path + " indexes tar files, not chute shards: open the tar files instead");
  for (const ShardInfo& info : src->index_.shards()) {
    CHUTE_ASSIGN_OR_RETURN(auto shard, open_shard(src->dir_, info, index_path));
    src->shard_files_.push_back(std::move(shard));
  }
  return src;
}

Result<std::shared_ptr<PackedSource>> PackedSource::open_remote(const std::string& url,
                                                                std::shared_ptr<ObjectStore> store,
                                                                std::shared_ptr<ShardCache> cache,
                                                                RemoteShards::Options remote, PackedOptions options) {
  std::string base = url;
  if (base.size() >= std::strlen(kIndexFileName) && base.ends_with(kIndexFileName))
    base.resize(base.size() - std::strlen(kIndexFileName));
  if (!base.ends_with('/')) base += '/';
  const std::string index_url = base + kIndexFileName;
  // The index entry's key carries its ETag and size: a dataset repacked at the same URL is refetched.
  auto index = cache_object(*store, *cache, index_url, [&](const MappedFile& f) {
    return IndexView::parse(f.bytes(), redact_url(index_url)).status();
  });
  if (!index.is_ok()) {
    if (index.status().code() != StatusCode::kNotFound) return index.status();
    return Status(StatusCode::kNotFound, redact_url(index_url) +
                                             " is missing: not a chute dataset, or an incomplete one (`chute pack` "
                                             "writes the index last)");
  }
  auto src = std::shared_ptr<PackedSource>(new PackedSource());
  src->options_ = options;
  src->dir_ = base;
  src->index_file_ = std::move(index->file);
  CHUTE_ASSIGN_OR_RETURN(src->index_, IndexView::parse(src->index_file_->bytes(), redact_url(index_url)));
  if (src->index_.kind() != IndexKind::kPacked)
    return invalid_argument(redact_url(index_url) + " indexes tar files, not chute shards");
  CHUTE_ASSIGN_OR_RETURN(src->remote_,
                         RemoteShards::create(std::move(store), std::move(cache), base, src->index_.shards(), remote));
  return src;
}

Result<std::shared_ptr<const MappedFile>> PackedSource::shard_file(uint32_t shard) const {
  if (remote_) return remote_->get(shard);
  return shard_files_[shard];
}

void PackedSource::will_read(const EpochOrder& order, int64_t start) const {
  if (!remote_) return;
  remote_->plan(order, start, [this](int64_t i) { return index_.entry(static_cast<uint64_t>(i)).shard; });
}

std::string PackedSource::name(int64_t index) const { return std::string(index_.key(index_.entry(index))); }

Status PackedSource::check_record(int64_t index, bool verify, std::vector<uint8_t>& record,
                                  std::span<const uint8_t>* payload) const {
  if (index < 0 || index >= size()) return invalid_argument("record " + std::to_string(index) + " out of range");
  const IndexEntry e = index_.entry(static_cast<uint64_t>(index));
  CHUTE_ASSIGN_OR_RETURN(const auto shard_ptr, shard_file(e.shard));
  const MappedFile& shard = *shard_ptr;
  const uint64_t shard_size = shard.bytes().size();
  auto fail = [&](const Status& st) {
    const std::string where = remote_ ? redact_url(remote_->shard_url(e.shard)) : shard.path();
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
