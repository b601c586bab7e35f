// DeviceLoader: the delivery stage. It takes the Loader's host batches (decoded straight into pinned
// buffers) and hands the consumer device batches:
//
//   Loader ring (pinned host slot) --copy_async on the transfer stream, event `copied`-->
//   device slot --consumer stream waits on `copied`--> consumer --release: event `released` recorded on
//   the consumer stream--> device slot free again
//
// The protocol, which simulated_device.h checks as it runs:
//   - a host slot returns to the Loader's ring only once its `copied` event has completed (queried at
//     each next(); waited for when its device slot is needed again, at start_epoch() and close());
//   - the consumer never waits on the host: its stream waits on `copied` (cudaStreamWaitEvent);
//   - a device slot is written again only after the consumer released it, and after the work its stream
//     had issued up to the release: the transfer stream waits on `released` before the next copy.
//
// Copies are issued by the consumer's own thread inside next(), up to `device_prefetch` batches ahead
// of the one it returns: the transfer stream runs them while the consumer's GPU work runs, and no
// extra thread calls into the Loader, whose contract is a single consumer thread.
//
// Device memory is chute's own: device_prefetch + 1 slots (one for the batch the consumer holds while it
// asks for the next), allocated once, within max_device_memory. A consumer that keeps every device
// batch alive gets an error that says so, never a slot that is still referenced. The slots and the copy
// protocol are DeviceSlots' (device_slots.h), which chute.ray also feeds with host batches of its own.
//
// Thread-safety: one consumer thread calls start_epoch()/next()/position()/close(). DeviceBatch objects
// may be released on any thread, also after the DeviceLoader is gone.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "chute/engine/loader.h"
#include "chute/gpu/device.h"
#include "chute/gpu/device_slots.h"

namespace chute {

class DeviceLoader {
 public:
  // Sets what a Loader needs for delivery through `device`: pinned ring buffers, and ring room for the
  // host batches whose copies are in flight.
  static void prepare(LoaderOptions& options, Device& device, const DeliveryOptions& delivery);
  // `loader` must have been built with options from prepare(). The DeviceLoader drives it from now on
  // (start_epoch/next/close go through the DeviceLoader).
  static Result<std::unique_ptr<DeviceLoader>> create(std::shared_ptr<Device> device, std::shared_ptr<Loader> loader,
                                                      DeliveryOptions options = {});
  ~DeviceLoader();
  DeviceLoader(const DeviceLoader&) = delete;
  DeviceLoader& operator=(const DeviceLoader&) = delete;

  // `splits`: the rest of an interrupted epoch (Loader::resume_epoch).
  Status start_epoch(uint64_t epoch, int64_t start = 0, const std::vector<EpochSplit>& splits = {});
  // The next device batch, ready for work issued to `consumer` from now on; nullptr after the epoch's
  // last; or the Loader's error, after every batch before it. kDeadlineExceeded as Loader::next().
  Result<std::shared_ptr<DeviceBatch>> next(StreamHandle consumer,
                                            std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  // The epoch position after the last sample the consumer received (not those copied ahead).
  int64_t position() const { return position_; }
  // Waits for the copies in flight, returns their host batches, and closes the Loader. Device batches
  // still held stay valid. Idempotent.
  void close();

  Loader& loader() { return *loader_; }
  Device& device() { return *device_; }
  int num_slots() const { return slots_->num_slots(); }

 private:
  DeviceLoader(std::shared_ptr<Device> device, std::shared_ptr<Loader> loader, std::unique_ptr<DeviceSlots> slots);
  Status fill(std::optional<std::chrono::milliseconds> timeout);

  std::shared_ptr<Device> device_;
  std::shared_ptr<Loader> loader_;
  std::unique_ptr<DeviceSlots> slots_;
  bool active_ = false;                  // an epoch is running
  bool host_done_ = false;               // the Loader delivered its last batch of the epoch
  std::optional<Status> pending_error_;  // the Loader's (or a copy's) error, after the batches before it
  int64_t position_ = 0;
  bool closed_ = false;
};

}  // namespace chute
