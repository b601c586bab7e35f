#include "chute/io/remote_tars.h"

#include <cstdio>
#include <filesystem>
#include <future>
#include <memory>

#include "chute/base/atomic_file.h"
#include "chute/io/tar_scan.h"
#include "chute/io/tar_source.h"
#include "chute/remote/cache_key.h"

namespace chute {
namespace {

// Where the node keeps the index learned for `tar` (its URL, ETag and size: cache_key).
std::string learned_path(const ObjectInfo& tar, const std::string& index_dir) {
  const std::string key = cache_key(tar);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(checksum({reinterpret_cast<const uint8_t*>(key.data()), key.size()})));
  return index_dir + "/tar-index/remote-" + hex + ".chidx";
}

// `bytes` parsed as an index of `tar`, when they are one that describes it.
std::optional<CachedIndex> describing(const ObjectInfo& tar, std::shared_ptr<const std::vector<uint8_t>> bytes,
                                      const std::string& what) {
  auto view = IndexView::parse(*bytes, what);
  if (!view.is_ok() || view->kind() != IndexKind::kTar || view->shards().size() != 1) return std::nullopt;
  const ShardInfo& shard = view->shards()[0];
  if (shard.file_size != tar.size || shard.name != tar_object_name(tar.url)) return std::nullopt;
  return CachedIndex{std::move(bytes), std::move(view).value(), what};
}

// Keeps an index in the node's cache for the next open (best effort: a directory that cannot be written
// leaves it in memory).
std::string keep(const ObjectInfo& tar, const std::vector<uint8_t>& bytes, const std::string& index_dir) {
  if (index_dir.empty()) return {};
  const std::string path = learned_path(tar, index_dir);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  return write_file_atomically(path, bytes).is_ok() ? path : std::string();
}

}  // namespace

std::string tar_object_name(const std::string& url) {
  const std::string path = url.substr(0, url.find_first_of("?#"));
  return path.substr(path.rfind('/') + 1);
}

Result<std::vector<std::optional<CachedIndex>>> find_tar_indexes(const ObjectStore& store,
                                                                 const std::vector<ObjectInfo>& tars,
                                                                 const std::string& index_dir) {
  std::vector<std::optional<CachedIndex>> found(tars.size());
  std::vector<std::future<Result<HttpResponse>>> sidecars(tars.size());  // invalid: not asked
  for (size_t i = 0; i < tars.size(); ++i) {
    if (!index_dir.empty()) {
      const std::string path = learned_path(tars[i], index_dir);
      if (auto mapped = MappedFile::open(path); mapped.is_ok()) {
        auto bytes = std::make_shared<const std::vector<uint8_t>>((*mapped)->bytes().begin(), (*mapped)->bytes().end());
        if ((found[i] = describing(tars[i], std::move(bytes), path))) continue;
      }
    }
    const std::string& url = tars[i].url;
    if (url.find_first_of("?#") != std::string::npos) continue;  // presigned: no sidecar is signed
    const std::string sidecar = url + ".chidx";
    if (!parse_object_url(url)->remote()) {  // a local path (file://): read it when it is there
      if (auto mapped = MappedFile::open(parse_object_url(sidecar)->path); mapped.is_ok()) {
        auto bytes = std::make_shared<const std::vector<uint8_t>>((*mapped)->bytes().begin(), (*mapped)->bytes().end());
        found[i] = describing(tars[i], std::move(bytes), sidecar);
      }
      continue;
    }
    if (store.engine() == nullptr) continue;
    CHUTE_ASSIGN_OR_RETURN(HttpRequest request, store.request_for(sidecar));
    // All in flight together: a thousand tars cost a few round trips, not a thousand.
    auto promise = std::make_shared<std::promise<Result<HttpResponse>>>();
    sidecars[i] = promise->get_future();
    store.engine()->submit(std::move(request), [promise](Result<HttpResponse> r) { promise->set_value(std::move(r)); });
  }
  for (size_t i = 0; i < tars.size(); ++i) {
    if (!sidecars[i].valid()) continue;
    Result<HttpResponse> response = sidecars[i].get();
    const std::string what = object_display_name(tars[i].url + ".chidx");
    if (!response.is_ok()) {
      // None there (404), or none this reader may see (S3 answers 403 for a missing key without ListBucket).
      const StatusCode code = response.status().code();
      if (code == StatusCode::kNotFound || code == StatusCode::kIoError) continue;
      return Status(code, what + ": " + response.status().message());
    }
    auto bytes = std::make_shared<const std::vector<uint8_t>>(std::move(response->body));
    found[i] = describing(tars[i], bytes, what);
    if (found[i]) {
      if (std::string kept = keep(tars[i], *bytes, index_dir); !kept.empty()) found[i]->path = kept;
    }
  }
  return found;
}

Result<CachedIndex> index_streamed_tar(const ObjectInfo& tar, std::span<const uint8_t> bytes,
                                       const std::string& index_dir) {
  const std::string what = object_display_name(tar.url);
  CHUTE_ASSIGN_OR_RETURN(TarScan scan, scan_tar(bytes, what));
  auto index = std::make_shared<const std::vector<uint8_t>>(
      encode_tar_index(IndexedFile{.name = tar_object_name(tar.url), .bytes = bytes}, scan));
  const std::string kept = keep(tar, *index, index_dir);
  CHUTE_ASSIGN_OR_RETURN(IndexView view, IndexView::parse(*index, what + " (index)"));
  return CachedIndex{std::move(index), std::move(view), kept};
}

}  // namespace chute
