#include "chute/remote/object_fetch.h"

#include "chute/remote/cache_key.h"

namespace chute {
namespace {

// Memory for `size` bytes of the object: the caller's buffer, or one of its own.
using BufferFor = std::function<Result<std::span<uint8_t>>(const ObjectInfo& object)>;

// One try in `object`'s version; *changed: the object no longer has it (stat() it again).
Result<FetchedFrom> fetch_version(const ObjectStore& store, ShardCache* cache, const ObjectInfo& object,
                                  const std::string& key, std::span<uint8_t> dst, const ObjectCheck& check,
                                  const ObjectReady& ready, bool* changed) {
  const auto receive = [&](std::span<uint8_t> into) -> Status {
    CHUTE_RETURN_IF_ERROR(store.receive(object, into, changed));
    if (!check) return Status::ok();
    const Status st = check(into);
    return st.is_ok() ? st : Status(st.code(), object_display_name(object.url) + ": " + st.message());
  };
  if (cache == nullptr) {
    CHUTE_RETURN_IF_ERROR(receive(dst));
    if (ready) ready(FetchedFrom::kStorage, object);
    return FetchedFrom::kStorage;
  }
  CHUTE_ASSIGN_OR_RETURN(ShardCache::Got got, cache->get(key, dst, receive, [&] {
    if (ready) ready(FetchedFrom::kStorage, object);
  }));
  if (got == ShardCache::Got::kFilled) return FetchedFrom::kStorage;
  if (ready) ready(FetchedFrom::kCache, object);
  return FetchedFrom::kCache;
}

// fetch_version() until a try finds the object in one version (see the header).
Result<FetchedFrom> fetch_one_version(const ObjectStore& store, ShardCache* cache, ObjectInfo& object, std::string key,
                                      const BufferFor& buffer_for, const ObjectCheck& check, const ObjectReady& ready) {
  const int budget = store.engine() != nullptr ? store.engine()->options().max_retries : 0;
  for (int attempt = 0;; ++attempt) {
    CHUTE_ASSIGN_OR_RETURN(std::span<uint8_t> dst, buffer_for(object));
    bool changed = false;
    Result<FetchedFrom> got = fetch_version(store, cache, object, key, dst, check, ready, &changed);
    if (got.is_ok() || !changed) return got;
    if (attempt >= budget) {
      return environment_error(object_display_name(object.url) + " changed " + std::to_string(attempt + 1) +
                               " times while it was fetched: " + got.status().message());
    }
    CHUTE_ASSIGN_OR_RETURN(object, store.stat(object.url));  // the version there now, under its own key
    key = cache_key(object);
  }
}

}  // namespace

Result<FetchedFrom> fetch_object(const ObjectStore& store, ShardCache* cache, const ObjectInfo& object,
                                 const std::string& key, std::span<uint8_t> dst, const ObjectCheck& check,
                                 const ObjectReady& ready) {
  ObjectInfo version = object;
  const BufferFor into_dst = [&](const ObjectInfo& now) -> Result<std::span<uint8_t>> {
    if (dst.size() == now.size) return dst;
    if (now.size != object.size)
      return io_error(object_display_name(now.url) + " changed while it was fetched, and has " +
                      std::to_string(now.size) + " bytes now, not the " + std::to_string(object.size) +
                      " it had when listed: open the dataset again");
    return invalid_argument("fetch_object: a buffer of " + std::to_string(dst.size()) + " bytes for " +
                            object_display_name(object.url) + ", which has " + std::to_string(object.size));
  };
  return fetch_one_version(store, cache, version, key, into_dst, check, ready);
}

Result<FetchedObject> fetch_object(const ObjectStore& store, ShardCache* cache, const ObjectInfo& object,
                                   const std::string& key, const ObjectCheck& check) {
  FetchedObject out{.buffer = {}, .version = object};
  const BufferFor own = [&](const ObjectInfo& now) -> Result<std::span<uint8_t>> {
    if (out.buffer.data() == nullptr || out.buffer.capacity() < now.size) {
      CHUTE_ASSIGN_OR_RETURN(out.buffer, PageBuffer::allocate(now.size));
    }
    return out.buffer.span().first(now.size);
  };
  CHUTE_RETURN_IF_ERROR(fetch_one_version(store, cache, out.version, key, own, check, {}).status());
  return out;
}

}  // namespace chute
