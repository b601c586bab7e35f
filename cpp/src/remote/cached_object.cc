#include "chute/remote/cached_object.h"

#include "chute/remote/cache_key.h"

namespace chute {

Result<CachedObject> cache_object(const ObjectStore& store, ShardCache& cache, std::string_view url,
                                  const ShardCache::Verify& verify) {
  const int budget = store.engine() != nullptr ? store.engine()->options().max_retries : 0;
  for (int attempt = 0;; ++attempt) {
    CHUTE_ASSIGN_OR_RETURN(ObjectInfo info, store.stat(url));
    bool changed = false;
    Result<std::shared_ptr<const MappedFile>> file = cache.get(
        cache_key(info), info.size, [&](int fd) { return store.download(info, fd, &changed); }, verify);
    if (file.is_ok()) return CachedObject{std::move(info), std::move(file).value()};
    if (!changed) return file.status();
    if (attempt >= budget) {
      return environment_error(object_display_name(url) + " changed " + std::to_string(attempt + 1) +
                               " times while it was fetched: " + file.status().message());
    }
  }
}

}  // namespace chute
