#include "chute/remote/object_fetch.h"

namespace chute {

Result<FetchedFrom> fetch_object(const ObjectStore& store, ShardCache* cache, const ObjectInfo& object,
                                 const std::string& key, std::span<uint8_t> dst, const ObjectCheck& check,
                                 const ObjectReady& ready) {
  if (dst.size() != object.size)
    return invalid_argument("fetch_object: a buffer of " + std::to_string(dst.size()) + " bytes for " +
                            object_display_name(object.url) + ", which has " + std::to_string(object.size));
  const auto receive = [&](std::span<uint8_t> into) -> Status {
    CHUTE_RETURN_IF_ERROR(store.receive(object, into));
    if (!check) return Status::ok();
    const Status st = check(into);
    return st.is_ok() ? st : Status(st.code(), object_display_name(object.url) + ": " + st.message());
  };
  if (cache == nullptr) {
    CHUTE_RETURN_IF_ERROR(receive(dst));
    if (ready) ready(FetchedFrom::kStorage);
    return FetchedFrom::kStorage;
  }
  CHUTE_ASSIGN_OR_RETURN(ShardCache::Got got, cache->get(key, dst, receive, [&] {
    if (ready) ready(FetchedFrom::kStorage);
  }));
  if (got == ShardCache::Got::kFilled) return FetchedFrom::kStorage;
  if (ready) ready(FetchedFrom::kCache);
  return FetchedFrom::kCache;
}

Result<PageBuffer> fetch_object(const ObjectStore& store, ShardCache* cache, const ObjectInfo& object,
                                const std::string& key, const ObjectCheck& check) {
  CHUTE_ASSIGN_OR_RETURN(PageBuffer buffer, PageBuffer::allocate(object.size));
  CHUTE_RETURN_IF_ERROR(fetch_object(store, cache, object, key, buffer.span().first(object.size), check).status());
  return buffer;
}

}  // namespace chute
