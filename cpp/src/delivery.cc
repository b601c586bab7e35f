#include "chute/delivery.h"

#include <cstdio>
#include <mutex>
#include <vector>

namespace chute {

// What the DeviceLoader and the device batches it handed out share: device memory, events, free list.
// Batches keep it alive, so a batch released after the DeviceLoader is gone still finds its slot.
struct DeviceRing {
  struct Slot {
    void* images = nullptr;  // one allocation: images, then labels
    int64_t* labels = nullptr;
    std::unique_ptr<DeviceEvent> copied;    // recorded on the transfer stream after the slot's copy
    std::unique_ptr<DeviceEvent> released;  // recorded on the consumer's stream at release
    std::shared_ptr<Batch> host;            // the source of the last copy, until it is known complete
  };

  std::shared_ptr<Device> device;  // first member: destroyed last, after every event and buffer
  size_t slot_bytes = 0;
  std::vector<Slot> slots;  // fixed after construction; `host` is the consumer thread's
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

void DeviceLoader::prepare(LoaderOptions& options, Device& device, const DeliveryOptions& delivery) {
  options.host_allocator = device.host_allocator();
  // One host batch per device slot can wait for its copy.
  options.extra_buffers = std::max(options.extra_buffers, delivery.device_prefetch + 1);
}

Result<std::unique_ptr<DeviceLoader>> DeviceLoader::create(std::shared_ptr<Device> device,
                                                           std::shared_ptr<Loader> loader, DeliveryOptions options) {
  if (device == nullptr || loader == nullptr) return invalid_argument("device and loader are required");
  CHUTE_RETURN_IF_ERROR(options.validate());
  const LoaderOptions& lo = loader->options();
  if (lo.host_allocator == nullptr || !lo.host_allocator->pinned())
    return invalid_argument(
        "the loader's batch buffers are not pinned memory: build it with options from "
        "DeviceLoader::prepare()");
  const size_t sample_bytes =
      static_cast<size_t>(loader->out_height()) * loader->out_width() * 3 * dtype_size(lo.output.dtype);
  const size_t image_bytes = round_up(sample_bytes * lo.batch_size, kLabelAlignment);
  const size_t slot_bytes = image_bytes + sizeof(int64_t) * lo.batch_size;
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
  auto d =
      std::unique_ptr<DeviceLoader>(new DeviceLoader(std::move(device), std::move(loader), std::move(ring), options));
  d->sample_bytes_ = sample_bytes;
  return d;
}

DeviceLoader::DeviceLoader(std::shared_ptr<Device> device, std::shared_ptr<Loader> loader,
                           std::shared_ptr<DeviceRing> ring, DeliveryOptions options)
    : device_(std::move(device)), loader_(std::move(loader)), ring_(std::move(ring)), options_(options) {}

DeviceLoader::~DeviceLoader() { close(); }

int DeviceLoader::num_slots() const { return static_cast<int>(ring_->slots.size()); }

void DeviceLoader::reap() {
  for (DeviceRing::Slot& s : ring_->slots) {
    if (s.host == nullptr) continue;
    auto done = device_->query(*s.copied);
    if (done.is_ok() && *done) s.host.reset();  // back to the Loader's ring
  }
}

void DeviceLoader::drain() {
  for (DeviceRing::Slot& s : ring_->slots) {
    if (s.host == nullptr) continue;
    // On failure the device is unusable; the host batch is kept (leaked to the ring's end) rather than
    // refilled under a copy that may still read it.
    if (device_->synchronize(*s.copied).is_ok()) s.host.reset();
  }
  std::lock_guard<std::mutex> lock(ring_->mu);
  for (const Ready& r : ready_) ring_->free.push_back(r.slot);  // never delivered: no consumer use
  ready_.clear();
}

Status DeviceLoader::start_epoch(uint64_t epoch, int64_t start) {
  if (closed_) return Status(StatusCode::kCancelled, "the loader is closed");
  drain();
  pending_error_.reset();
  host_done_ = false;
  active_ = false;
  CHUTE_RETURN_IF_ERROR(loader_->start_epoch(epoch, start));
  position_ = start;
  active_ = true;
  return Status::ok();
}

Status DeviceLoader::issue(int slot, std::shared_ptr<Batch> host) {
  DeviceRing::Slot& s = ring_->slots[slot];
  if (s.host != nullptr) {  // the slot's previous copy: its source goes back once it has completed
    CHUTE_RETURN_IF_ERROR(device_->synchronize(*s.copied));
    s.host.reset();
  }
  // The consumer's use of the slot, up to its release, comes before this copy (a no-op if never released).
  CHUTE_RETURN_IF_ERROR(device_->transfer_wait(*s.released));
  const int64_t n = host->size();
  s.host = host;  // from here on, until `copied` completes, the host batch must stay
  CHUTE_RETURN_IF_ERROR(device_->copy_async(s.images, host->images(), static_cast<size_t>(n) * sample_bytes_));
  CHUTE_RETURN_IF_ERROR(device_->copy_async(s.labels, host->labels(), static_cast<size_t>(n) * sizeof(int64_t)));
  CHUTE_RETURN_IF_ERROR(device_->record_transfer(*s.copied));
  ready_.push_back({slot, n, loader_->position()});
  return Status::ok();
}

Status DeviceLoader::fill(std::optional<std::chrono::milliseconds> timeout) {
  while (!host_done_ && !pending_error_ && static_cast<int>(ready_.size()) < options_.device_prefetch) {
    int slot = -1;
    {
      std::lock_guard<std::mutex> lock(ring_->mu);
      if (ring_->free.empty()) break;
      slot = ring_->free.back();
      ring_->free.pop_back();
    }
    auto give_back = [&] {
      std::lock_guard<std::mutex> lock(ring_->mu);
      ring_->free.push_back(slot);
    };
    // Wait for a host batch only when the consumer has nothing else to take.
    const bool block = ready_.empty();
    auto host = loader_->next(block ? timeout : std::optional(std::chrono::milliseconds(0)));
    if (!host.is_ok()) {
      give_back();
      if (host.status().code() == StatusCode::kDeadlineExceeded) {
        if (block) return host.status();
        break;
      }
      pending_error_ = host.status();
      break;
    }
    if (*host == nullptr) {
      give_back();
      host_done_ = true;
      break;
    }
    Status st = issue(slot, std::move(*host));
    if (!st.is_ok()) {
      give_back();
      pending_error_ = Status(st.code(), "copy to " + device_->name() + " failed: " + st.message());
      break;
    }
  }
  return Status::ok();
}

Result<std::shared_ptr<DeviceBatch>> DeviceLoader::next(StreamHandle consumer,
                                                        std::optional<std::chrono::milliseconds> timeout) {
  if (closed_) return Status(StatusCode::kCancelled, "the loader is closed");
  if (!active_) return std::shared_ptr<DeviceBatch>();
  reap();
  CHUTE_RETURN_IF_ERROR(fill(timeout));
  if (!ready_.empty()) {
    const Ready r = ready_.front();
    ready_.pop_front();
    // From here on the consumer holds the slot: the batch object returns it even if the wait fails.
    auto batch = std::make_shared<DeviceBatch>(ring_, r.slot, r.count, consumer);
    CHUTE_RETURN_IF_ERROR(device_->consumer_wait(consumer, *ring_->slots[r.slot].copied));
    position_ = r.next_position;
    return batch;
  }
  if (pending_error_) {
    Status st = std::move(*pending_error_);
    pending_error_.reset();
    // A sample error (kRaise) takes its batch's place and the epoch goes on (loader.h); others end it.
    if (!loader_->failed_sample()) active_ = false;
    return st;
  }
  if (host_done_) {
    active_ = false;
    return std::shared_ptr<DeviceBatch>();
  }
  // Nothing ready and no device slot to copy into: the consumer holds every one.
  active_ = false;
  drain();
  return Status(StatusCode::kResourceExhausted,
                "all " + std::to_string(num_slots()) +
                    " device batch buffers are held by batches the consumer still references (e.g. stored in a "
                    "list); release them, keep copies (tensor.clone()), or raise device_prefetch");
}

void DeviceLoader::close() {
  if (closed_) return;
  closed_ = true;
  active_ = false;
  drain();
  loader_->close();
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
}

}  // namespace chute
