#include "chute/io/index_cache.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "chute/base/atomic_file.h"

namespace chute {
namespace {

constexpr size_t kFingerprintEdge = 64 << 10;
constexpr size_t kFingerprintHeaders = 64;

std::string file_name(const std::string& path) { return std::filesystem::path(path).filename().string(); }

// The index at `path` when it is one and describes `file` as it is now.
std::optional<CachedIndex> matching_index(const MappedFile& file, const std::string& path,
                                          const IndexRequest& request) {
  auto mapped = MappedFile::open(path);
  if (!mapped.is_ok()) return std::nullopt;
  auto parsed = IndexView::parse((*mapped)->bytes(), path);
  if (!parsed.is_ok() || parsed->kind() != request.kind || parsed->shards().size() != 1) return std::nullopt;
  const ShardInfo& shard = parsed->shards()[0];
  if (shard.file_size != file.bytes().size() || shard.mtime_ns != file.mtime_ns() ||
      shard.name != file_name(file.path()))
    return std::nullopt;
  if (request.matches && !request.matches(*parsed)) return std::nullopt;
  const TarIdentity now{.inode = file.inode(),
                        .ctime_ns = file.ctime_ns(),
                        .fingerprint = index_fingerprint(*parsed, file.bytes(), request.header)};
  if (!(parsed->tar_identity() == now)) return std::nullopt;
  return CachedIndex{std::move(mapped).value(), std::move(parsed).value(), path};
}

std::string cache_path(const IndexRequest& request, const std::string& data_path) {
  std::string key = std::filesystem::absolute(data_path).lexically_normal().string();
  if (!request.variant.empty()) key += '\0' + request.variant;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(checksum({reinterpret_cast<const uint8_t*>(key.data()), key.size()})));
  return request.cache_dir + "/" + request.subdir + "/" + hex + ".chidx";
}

}  // namespace

uint64_t content_fingerprint(std::span<const uint8_t> file, const std::vector<uint64_t>& offsets, size_t header) {
  std::vector<uint8_t> bytes;
  const size_t edge = std::min(file.size(), kFingerprintEdge);
  bytes.insert(bytes.end(), file.begin(), file.begin() + static_cast<ptrdiff_t>(edge));
  bytes.insert(bytes.end(), file.end() - static_cast<ptrdiff_t>(edge), file.end());
  const size_t n = offsets.size(), picks = std::min(n, kFingerprintHeaders);
  for (size_t k = 0; k < picks; ++k) {
    const uint64_t offset = offsets[k * n / picks];
    if (offset < header || offset > file.size()) continue;
    const auto before = file.subspan(offset - header, header);
    bytes.insert(bytes.end(), before.begin(), before.end());
  }
  return checksum(bytes);
}

IndexedFile indexed_file(const MappedFile& file) {
  return {.name = file_name(file.path()),
          .bytes = file.bytes(),
          .mtime_ns = file.mtime_ns(),
          .inode = file.inode(),
          .ctime_ns = file.ctime_ns()};
}

uint64_t index_fingerprint(const IndexView& view, std::span<const uint8_t> file, size_t header) {
  std::vector<uint64_t> offsets(view.size());
  for (uint64_t i = 0; i < view.size(); ++i) offsets[i] = view.entry(i).offset;
  return content_fingerprint(file, offsets, header);
}

std::vector<uint8_t> encode_file_index(IndexKind kind, const IndexedFile& file, const std::vector<IndexEntry>& entries,
                                       std::string_view keys, const std::vector<std::string>& notes, size_t header) {
  std::vector<uint64_t> offsets;
  offsets.reserve(entries.size());
  for (const IndexEntry& e : entries) offsets.push_back(e.offset);
  const ShardInfo info{.name = file.name,
                       .shard_id = 0,
                       .file_size = file.bytes.size(),
                       .record_count = entries.size(),
                       .first_sample = 0,
                       .mtime_ns = file.mtime_ns};
  return encode_index(kind, {info}, entries, keys, notes,
                      {.inode = file.inode,
                       .ctime_ns = file.ctime_ns,
                       .fingerprint = content_fingerprint(file.bytes, offsets, header)});
}

Result<CachedIndex> load_file_index(const MappedFile& file, const IndexRequest& request,
                                    const std::function<Result<std::vector<uint8_t>>()>& build) {
  for (const std::string& path : request.beside)
    if (auto found = matching_index(file, path, request)) return std::move(*found);
  const std::string cached = request.cache_dir.empty() ? std::string() : cache_path(request, file.path());
  if (!cached.empty())
    if (auto hit = matching_index(file, cached, request)) return std::move(*hit);
  CHUTE_ASSIGN_OR_RETURN(std::vector<uint8_t> built, build());
  auto bytes = std::make_shared<const std::vector<uint8_t>>(std::move(built));
  CachedIndex out;
  if (!cached.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(cached).parent_path(), ec);
    if (write_file_atomically(cached, *bytes).is_ok()) out.path = cached;  // best effort: else in memory
  }
  CHUTE_ASSIGN_OR_RETURN(out.view, IndexView::parse(*bytes, file.path() + " (index)"));
  out.owner = std::move(bytes);
  return out;
}

}  // namespace chute
