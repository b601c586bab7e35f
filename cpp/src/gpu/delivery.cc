#include "chute/gpu/delivery.h"

#include <algorithm>

namespace chute {

void DeviceLoader::prepare(LoaderOptions& options, Device& device, const DeliveryOptions& delivery) {
  options.host_allocator = device.host_allocator();
  // One host batch per device slot can wait for its copy.
  options.extra_buffers = std::max(options.extra_buffers, delivery.device_prefetch + 1);
}

Result<std::unique_ptr<DeviceLoader>> DeviceLoader::create(std::shared_ptr<Device> device,
                                                           std::shared_ptr<Loader> loader, DeliveryOptions options) {
  if (device == nullptr || loader == nullptr) return invalid_argument("device and loader are required");
  const LoaderOptions& lo = loader->options();
  if (lo.host_allocator == nullptr || !lo.host_allocator->pinned())
    return invalid_argument(
        "the loader's batch buffers are not pinned memory: build it with options from "
        "DeviceLoader::prepare()");
  const size_t sample_bytes =
      static_cast<size_t>(loader->out_height()) * loader->out_width() * 3 * dtype_size(lo.output.dtype);
  CHUTE_ASSIGN_OR_RETURN(auto slots, DeviceSlots::create(device, sample_bytes, lo.batch_size, options));
  return std::unique_ptr<DeviceLoader>(new DeviceLoader(std::move(device), std::move(loader), std::move(slots)));
}

DeviceLoader::DeviceLoader(std::shared_ptr<Device> device, std::shared_ptr<Loader> loader,
                           std::unique_ptr<DeviceSlots> slots)
    : device_(std::move(device)), loader_(std::move(loader)), slots_(std::move(slots)) {}

DeviceLoader::~DeviceLoader() { close(); }

Status DeviceLoader::start_epoch(uint64_t epoch, int64_t start, const std::vector<EpochSplit>& splits) {
  if (closed_) return Status(StatusCode::kCancelled, "the loader is closed");
  slots_->drain();
  pending_error_.reset();
  host_done_ = false;
  active_ = false;
  CHUTE_RETURN_IF_ERROR(loader_->resume_epoch(epoch, splits, start));
  position_ = start;
  active_ = true;
  return Status::ok();
}

Status DeviceLoader::fill(std::optional<std::chrono::milliseconds> timeout) {
  while (!host_done_ && !pending_error_ && slots_->can_issue()) {
    // Wait for a host batch only when the consumer has nothing else to take.
    const bool block = slots_->waiting() == 0;
    auto host = loader_->next(block ? timeout : std::optional(std::chrono::milliseconds(0)));
    if (!host.is_ok()) {
      if (host.status().code() == StatusCode::kDeadlineExceeded) {
        if (block) return host.status();
        break;
      }
      pending_error_ = host.status();
      break;
    }
    if (*host == nullptr) {
      host_done_ = true;
      break;
    }
    const Batch& b = **host;
    Status st = slots_->issue(HostBatch{.images = b.images(),
                                        .labels = b.labels(),
                                        .count = b.size(),
                                        .keep = *host,  // back to the Loader's ring once copied
                                        .pinned = true,
                                        .tag = loader_->position()});
    if (!st.is_ok()) {
      pending_error_ = st;
      break;
    }
  }
  return Status::ok();
}

Result<std::shared_ptr<DeviceBatch>> DeviceLoader::next(StreamHandle consumer,
                                                        std::optional<std::chrono::milliseconds> timeout) {
  if (closed_) return Status(StatusCode::kCancelled, "the loader is closed");
  if (!active_) return std::shared_ptr<DeviceBatch>();
  slots_->reap();
  CHUTE_RETURN_IF_ERROR(fill(timeout));
  if (slots_->waiting() > 0) {
    CHUTE_ASSIGN_OR_RETURN(auto taken, slots_->take(consumer));
    position_ = taken.second;
    return std::move(taken.first);
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
  slots_->drain();
  return Status(StatusCode::kResourceExhausted,
                "all " + std::to_string(num_slots()) +
                    " device batch buffers are held by batches the consumer still references (e.g. stored in a "
                    "list); release them, keep copies (tensor.clone()), or raise device_prefetch");
}

void DeviceLoader::close() {
  if (closed_) return;
  closed_ = true;
  active_ = false;
  slots_->drain();
  loader_->close();
  slots_->close();
}

}  // namespace chute
