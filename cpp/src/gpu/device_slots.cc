#include "chute/gpu/device_slots.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace chute {

// What DeviceSlots and the device batches it handed out share: device memory, events, free list.
// Batches keep it alive, so a batch released after the DeviceSlots are gone still finds its slot.
struct DeviceRing {
  struct Slot {
    void* images = nullptr;  // one allocation: images, then labels
    int64_t* labels = nullptr;
    std::unique_ptr<DeviceEvent> copied;    // recorded on the transfer stream after the slot's copy
    std::unique_ptr<DeviceEvent> released;  // recorded on the consumer's stream at release
    std::shared_ptr<const void> host;       // the owner of the last copy's source, until it is known complete
    void* staging = nullptr;                // pinned host memory for sources that are not (allocated lazily)
  };

  std::shared_ptr<Device> device;  // first member: destroyed last, after every event and buffer
  size_t slot_bytes = 0;
  size_t image_bytes = 0;   // the images' part of a slot; the labels follow
  std::vector<Slot> slots;  // fixed after construction; `host` and `staging` are the consumer thread's
  std::mutex mu;
  std::vector<int> free;  // guarded by mu
  bool closed = false;    // guarded by mu: released slots are not reused, their memory goes with the ring
  bool warned = false;    // guarded by mu

  ~DeviceRing() {
    for (Slot& s : slots) {
      // Nothing may still read or write the memory: the last copy, and the consumer's last use.
      if (s.copied) (void)device->synchronize(*s.copied);
      if (s.released) (void)device->synchronize(*s.released);
      s.host.reset();
      s.copied.reset();
      s.released.reset();
      if (s.images != nullptr) device->free_device(s.images, slot_bytes);
      if (s.staging != nullptr) device->free_host(s.staging, slot_bytes);
    }
  }
};

namespace {
constexpr size_t kLabelAlignment = 256;
size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }
}  // namespace

DeviceBatch::DeviceBatch(std::shared_ptr<DeviceRing> ring, int slot, int64_t size, StreamHandle stream)
    : ring_(std::move(ring)),
      slot_(slot),
      size_(size),
      stream_(stream),
      images_(ring_->slots[slot].images),
      labels_(ring_->slots[slot].labels) {}

DeviceBatch::~DeviceBatch() {
  DeviceRing::Slot& s = ring_->slots[slot_];
  const Status st = ring_->device->record_consumer(*s.released, stream_);
  std::lock_guard<std::mutex> lock(ring_->mu);
  if (ring_->closed) return;  // its memory goes with the ring
  if (st.is_ok()) {
    ring_->free.push_back(slot_);
  } else if (!ring_->warned) {
    // Without the event nothing says when the consumer's stream is done with the slot: it is not reused.
    ring_->warned = true;
    std::fprintf(stderr, "chute: could not record the release of a device batch (%s); its buffer is not reused\n",
                 st.to_string().c_str());
  }
}

Status DeliveryOptions::validate() const {
  CHUTE_RETURN_IF_ERROR(kDevicePrefetch.check(device_prefetch));
  return kMaxDeviceMemory.check(max_device_memory);
}

Result<std::unique_ptr<DeviceSlots>> DeviceSlots::create(std::shared_ptr<Device> device, size_t sample_bytes,
                                                         int64_t batch_size, DeliveryOptions options) {
  if (device == nullptr) return invalid_argument("a device is required");
  if (sample_bytes == 0 || batch_size < 1) return invalid_argument("device slots need a sample size and batch size");
  CHUTE_RETURN_IF_ERROR(options.validate());
  const size_t image_bytes = round_up(sample_bytes * static_cast<size_t>(batch_size), kLabelAlignment);
  const size_t slot_bytes = image_bytes + sizeof(int64_t) * static_cast<size_t>(batch_size);
  // device_prefetch + 1 slots, fewer if the budget says so, never fewer than 2 (one held, one filling).
  const int wanted = options.device_prefetch + 1;
  const int fit = static_cast<int>(std::min<size_t>(wanted, options.max_device_memory / slot_bytes));
  if (fit < 2)
    return invalid_argument("max_device_memory of " + std::to_string(options.max_device_memory >> 20) +
                            " MiB holds fewer than 2 device batches of " + std::to_string(slot_bytes >> 20) +
                            " MiB: raise max_device_memory or lower batch_size");
  auto ring = std::make_shared<DeviceRing>();
  ring->device = device;
  ring->slot_bytes = slot_bytes;
  ring->image_bytes = image_bytes;
  ring->slots.resize(fit);
  for (int i = 0; i < fit; ++i) {
    DeviceRing::Slot& s = ring->slots[i];
    CHUTE_ASSIGN_OR_RETURN(s.images, device->allocate_device(slot_bytes));
    s.labels = reinterpret_cast<int64_t*>(static_cast<uint8_t*>(s.images) + image_bytes);
    CHUTE_ASSIGN_OR_RETURN(s.copied, device->create_event());
    CHUTE_ASSIGN_OR_RETURN(s.released, device->create_event());
    ring->free.push_back(fit - 1 - i);  // slot 0 first
  }
  options.device_prefetch = fit - 1;
  return std::unique_ptr<DeviceSlots>(new DeviceSlots(std::move(device), std::move(ring), sample_bytes, options));
}

DeviceSlots::DeviceSlots(std::shared_ptr<Device> device, std::shared_ptr<DeviceRing> ring, size_t sample_bytes,
                         DeliveryOptions options)
    : device_(std::move(device)), ring_(std::move(ring)), sample_bytes_(sample_bytes), options_(options) {}

DeviceSlots::~DeviceSlots() { close(); }

int DeviceSlots::num_slots() const { return static_cast<int>(ring_->slots.size()); }

Status DeviceSlots::register_host(void* p, size_t bytes) {
  if (closed_) return Status(StatusCode::kCancelled, "the device slots are closed");
  if (p == nullptr || bytes == 0) return invalid_argument("register_host of an empty range");
  CHUTE_ASSIGN_OR_RETURN(Mapping mapping, mapping_of(p));
  if (reinterpret_cast<uintptr_t>(p) + bytes > mapping.end)
    return invalid_argument("register_host: the range runs past the mapping that holds its start (" + mapping.path +
                            ")");
  CHUTE_RETURN_IF_ERROR(device_->register_host(p, bytes));
  registered_[reinterpret_cast<uintptr_t>(p)] = {bytes, std::move(mapping)};
  return Status::ok();
}

bool DeviceSlots::registered(const void* p, size_t bytes) const {
  auto a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t end = a + bytes;
  while (a < end) {
    auto it = registered_.upper_bound(a);
    if (it == registered_.begin()) return false;
    --it;
    if (a >= it->first + it->second.bytes) return false;
    a = it->first + it->second.bytes;  // the next range must start here
  }
  return true;
}

bool DeviceSlots::wait_for_copies() {
  bool done = true;
  for (DeviceRing::Slot& s : ring_->slots)
    if (s.copied && !device_->synchronize(*s.copied).is_ok()) done = false;
  return done;
}

void DeviceSlots::unregister_where(uintptr_t lo, uintptr_t hi) {
  auto it = registered_.upper_bound(lo);
  if (it != registered_.begin() && std::prev(it)->first + std::prev(it)->second.bytes > lo) --it;
  while (it != registered_.end() && it->first < hi) {
    device_->unregister_host(reinterpret_cast<void*>(it->first), it->second.bytes);
    it = registered_.erase(it);
  }
}

void DeviceSlots::unregister_host(const void* p, size_t bytes) {
  // Only once no copy reads the ranges. A device that cannot say so has failed: its ranges stay
  // registered (to the process's end) rather than unpinned under a copy.
  if (!wait_for_copies()) return;
  const auto lo = reinterpret_cast<uintptr_t>(p);
  unregister_where(lo, bytes > UINTPTR_MAX - lo ? UINTPTR_MAX : lo + bytes);
}

Status DeviceSlots::forget_stale(const void* p, size_t bytes) {
  // Whether the part [a, b) of a range is still, byte for byte, the memory registered.
  auto same = [](const Registered& r, uintptr_t a, uintptr_t b) {
    auto now = mapping_of(reinterpret_cast<const void*>(a));
    return now.is_ok() && now->end >= b && r.mapping.same_memory_at(*now, a);
  };
  const auto lo = reinterpret_cast<uintptr_t>(p), hi = lo + bytes;
  auto it = registered_.upper_bound(lo);
  if (it != registered_.begin() && std::prev(it)->first + std::prev(it)->second.bytes > lo) --it;
  bool any = false;
  for (; it != registered_.end() && it->first < hi && !any; ++it)
    any = !same(it->second, std::max(lo, it->first), std::min(hi, it->first + it->second.bytes));
  if (!any) return Status::ok();
  // One range went: its neighbours (windows of the same mapping) likely did too. Every range is looked
  // at once now, so that no stale range is left to overlap a new registration.
  std::vector<std::pair<uintptr_t, uintptr_t>> stale;
  for (const auto& [start, r] : registered_)
    if (!same(r, start, start + r.bytes)) stale.emplace_back(start, start + r.bytes);
  if (!wait_for_copies()) return Status(StatusCode::kEnvironment, "the device failed while copies were in flight");
  for (auto [start, end] : stale) unregister_where(start, end);
  stale_ranges_ += static_cast<int64_t>(stale.size());
  return Status::ok();
}

Status DeviceSlots::copy(void* dst, const void* src, size_t bytes, bool whole) {
  if (whole) return device_->copy_async(dst, src, bytes);
  auto* out = static_cast<uint8_t*>(dst);
  auto a = reinterpret_cast<uintptr_t>(src);
  while (bytes > 0) {  // registered(): every byte lies in a range
    auto it = std::prev(registered_.upper_bound(a));
    const size_t piece = std::min<size_t>(bytes, it->first + it->second.bytes - a);
    CHUTE_RETURN_IF_ERROR(device_->copy_async(out, reinterpret_cast<const void*>(a), piece));
    out += piece, a += piece, bytes -= piece;
  }
  return Status::ok();
}

bool DeviceSlots::can_issue() const {
  if (closed_ || waiting() >= options_.device_prefetch) return false;
  std::lock_guard<std::mutex> lock(ring_->mu);
  return !ring_->free.empty();
}

Status DeviceSlots::issue(HostBatch b) {
  if (closed_) return Status(StatusCode::kCancelled, "the device slots are closed");
  const size_t image_bytes = static_cast<size_t>(b.count) * sample_bytes_;
  const size_t label_bytes = static_cast<size_t>(b.count) * sizeof(int64_t);
  if (b.count < 1 || image_bytes > ring_->image_bytes)
    return invalid_argument("a host batch of " + std::to_string(b.count) + " samples does not fit the device slots");
  if (!b.pinned && !registered_.empty()) {  // registered memory still mapped, or staged
    CHUTE_RETURN_IF_ERROR(forget_stale(b.images, image_bytes));
    CHUTE_RETURN_IF_ERROR(forget_stale(b.labels, label_bytes));
  }
  int slot = -1;
  {
    std::lock_guard<std::mutex> lock(ring_->mu);
    if (!ring_->free.empty()) slot = ring_->free.back(), ring_->free.pop_back();
  }
  if (slot < 0)
    return Status(StatusCode::kResourceExhausted,
                  "all " + std::to_string(num_slots()) +
                      " device batch buffers are held by batches the consumer still references (e.g. stored in a "
                      "list); release them, keep copies (tensor.clone()), or raise device_prefetch");
  DeviceRing::Slot& s = ring_->slots[slot];
  auto st = [&]() -> Status {
    // The slot's previous copy is complete before its source goes, or its staging buffer is written.
    CHUTE_RETURN_IF_ERROR(device_->synchronize(*s.copied));
    s.host.reset();
    // The consumer's use of the slot, up to its release, comes before this copy (a no-op if never released).
    CHUTE_RETURN_IF_ERROR(device_->transfer_wait(*s.released));
    const void* images = b.images;
    const void* labels = b.labels;
    // One copy from the device's own pinned memory (a Loader ring, the staging buffer); copies split at
    // the boundaries of registered ranges otherwise.
    bool whole = b.pinned;
    if (!whole && !(registered(images, image_bytes) && registered(labels, label_bytes))) {
      // Pageable memory: through the slot's pinned staging buffer; the owner can go now.
      if (s.staging == nullptr) {
        CHUTE_ASSIGN_OR_RETURN(s.staging, device_->allocate_host(ring_->slot_bytes));
      }
      auto* staging = static_cast<uint8_t*>(s.staging);
      std::memcpy(staging, images, image_bytes);
      std::memcpy(staging + ring_->image_bytes, labels, label_bytes);
      images = staging, labels = staging + ring_->image_bytes;
      whole = true;
      b.keep.reset();
    }
    s.host = std::move(b.keep);  // from here on, until `copied` completes, the source must stay
    CHUTE_RETURN_IF_ERROR(copy(s.images, images, image_bytes, whole));
    CHUTE_RETURN_IF_ERROR(copy(s.labels, labels, label_bytes, whole));
    return device_->record_transfer(*s.copied);
  }();
  if (!st.is_ok()) {
    // The slot goes back; its source is kept (to the ring's end) rather than freed under a copy that
    // may have been queued.
    std::lock_guard<std::mutex> lock(ring_->mu);
    ring_->free.push_back(slot);
    return Status(st.code(), "copy to " + device_->name() + " failed: " + st.message());
  }
  ready_.push_back({slot, b.count, b.tag});
  return Status::ok();
}

Result<std::pair<std::shared_ptr<DeviceBatch>, int64_t>> DeviceSlots::take(StreamHandle consumer) {
  if (ready_.empty()) return Status(StatusCode::kInvalidArgument, "take(): no batch was issued to the device slots");
  const Ready r = ready_.front();
  ready_.pop_front();
  // From here on the consumer holds the slot: the batch object returns it even if the wait fails.
  auto batch = std::make_shared<DeviceBatch>(ring_, r.slot, r.count, consumer);
  CHUTE_RETURN_IF_ERROR(device_->consumer_wait(consumer, *ring_->slots[r.slot].copied));
  return std::make_pair(std::move(batch), r.tag);
}

void DeviceSlots::reap() {
  for (DeviceRing::Slot& s : ring_->slots) {
    if (s.host == nullptr) continue;
    auto done = device_->query(*s.copied);
    if (done.is_ok() && *done) s.host.reset();  // back to its owner
  }
}

void DeviceSlots::drain() {
  for (DeviceRing::Slot& s : ring_->slots) {
    if (s.host == nullptr) continue;
    // On failure the device is unusable; the source is kept (leaked to the ring's end) rather than
    // refilled under a copy that may still read it.
    if (device_->synchronize(*s.copied).is_ok()) s.host.reset();
  }
  std::lock_guard<std::mutex> lock(ring_->mu);
  for (const Ready& r : ready_) ring_->free.push_back(r.slot);  // never delivered: no consumer use
  ready_.clear();
}

void DeviceSlots::close() {
  if (closed_) return;
  drain();
  closed_ = true;
  // Device memory is scarce: free the slots no batch holds now, not when the last held batch goes.
  std::vector<int> unused;
  {
    std::lock_guard<std::mutex> lock(ring_->mu);
    ring_->closed = true;
    unused.swap(ring_->free);
  }
  for (int slot : unused) {
    DeviceRing::Slot& s = ring_->slots[slot];
    if (!device_->synchronize(*s.released).is_ok() || !device_->synchronize(*s.copied).is_ok()) continue;
    device_->free_device(s.images, ring_->slot_bytes);
    s.images = nullptr;
  }
  unregister_host(nullptr, UINTPTR_MAX);  // every range, once no copy reads it any more
}

}  // namespace chute
