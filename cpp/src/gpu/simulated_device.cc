#include "chute/gpu/simulated_device.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <variant>

#include "chute/base/thread.h"

namespace chute {

struct SimulatedDevice::EventState {
  uint64_t recorded = 0;   // tickets handed out by record_*(), guarded by the device's mu_
  uint64_t completed = 0;  // the last ticket reached
};

namespace {
struct SimEvent final : DeviceEvent {
  std::shared_ptr<SimulatedDevice::EventState> state = std::make_shared<SimulatedDevice::EventState>();
};

SimulatedDevice::EventState& state_of(DeviceEvent& e) { return *static_cast<SimEvent&>(e).state; }

uint64_t fnv1a(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

constexpr uint8_t kPoison = 0xDB;

class SimHostAllocator final : public HostAllocator {
 public:
  explicit SimHostAllocator(std::shared_ptr<SimulatedDevice> d) : device_(std::move(d)) {}
  void* allocate(size_t bytes) override {
    auto p = device_->allocate_host(bytes);
    if (!p.is_ok()) throw std::bad_alloc();
    return *p;
  }
  void deallocate(void* p, size_t bytes) noexcept override { device_->free_host(p, bytes); }
  bool pinned() const override { return true; }
  std::string name() const override { return "simulated pinned"; }

 private:
  std::shared_ptr<SimulatedDevice> device_;
};
}  // namespace

struct SimulatedDevice::Op {
  struct Copy {
    void* dst;
    const void* src;
    size_t bytes;
    uint64_t hash;  // of the source when the copy was issued
  };
  struct Record {
    std::shared_ptr<EventState> event;
    uint64_t ticket;
  };
  struct Wait {
    std::shared_ptr<EventState> event;
    uint64_t ticket;
  };
  std::variant<Copy, Record, Wait> what;
};

// A stream: its queue, run in order by a thread of its own.
struct SimulatedDevice::Stream {
  std::deque<Op> queue;
  std::mt19937_64 rng;
  int min_delay_us, max_delay_us;
  std::thread thread;
};

// A block of the consumer's caching host allocator.
struct SimulatedDevice::Block {
  size_t bytes = 0;
  bool lent = false;
  std::vector<int> streams;                                              // that copied from it while lent
  std::vector<std::pair<std::shared_ptr<EventState>, uint64_t>> events;  // recorded when it was freed
};

Result<std::shared_ptr<SimulatedDevice>> SimulatedDevice::create(uint64_t seed, int max_delay_us, int min_delay_us) {
  auto d = std::shared_ptr<SimulatedDevice>(new SimulatedDevice(seed, max_delay_us, min_delay_us));
  std::lock_guard<std::mutex> lock(d->mu_);
  CHUTE_RETURN_IF_ERROR(d->start_stream(d->min_delay_us_, d->max_delay_us_));
  return d;
}

SimulatedDevice::SimulatedDevice(uint64_t seed, int max_delay_us, int min_delay_us)
    : min_delay_us_(std::clamp(min_delay_us, 0, std::max(0, max_delay_us))),
      max_delay_us_(std::max(0, max_delay_us)),
      seed_(seed) {}

Status SimulatedDevice::start_stream(int min_delay_us, int max_delay_us) {
  auto s = std::make_unique<Stream>();
  s->rng.seed(seed_ + streams_.size());
  s->max_delay_us = std::max(0, max_delay_us);
  s->min_delay_us = std::clamp(min_delay_us, 0, s->max_delay_us);
  Stream* raw = s.get();
  CHUTE_ASSIGN_OR_RETURN(raw->thread, start_thread("chute-simdev", [this, raw] { run(*raw); }));
  streams_.push_back(std::move(s));
  return Status::ok();
}

SimulatedDevice::~SimulatedDevice() {
  if (fork_mark_.in_child()) {  // the stream threads are the parent's: no join, no wait (fork.h)
    for (auto& stream : streams_) new std::thread(std::move(stream->thread));  // NOLINT: leaked on purpose
    new (&cv_) std::condition_variable();
    new (&mu_) std::mutex();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;  // the threads drain their queues first
  }
  cv_.notify_all();
  for (auto& s : streams_)
    if (s->thread.joinable()) s->thread.join();
  for (auto& [p, n] : host_) std::free(reinterpret_cast<void*>(p));  // leaked by the caller: tests check
  for (auto& [p, n] : device_) std::free(reinterpret_cast<void*>(p));
}

void SimulatedDevice::violation(std::string what) {
  if (violations_++ == 0) first_violation_ = std::move(what);
}

bool SimulatedDevice::live(const std::map<uintptr_t, size_t>& allocations, const void* p, size_t bytes) const {
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = allocations.upper_bound(a);
  if (it == allocations.begin()) return false;
  --it;
  return a + bytes <= it->first + it->second;
}

const SimulatedDevice::Registration* SimulatedDevice::registration(const void* p, size_t bytes) const {
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = registered_.upper_bound(a);
  if (it == registered_.begin()) return nullptr;
  --it;
  return a + bytes <= it->first + it->second.bytes ? &it->second : nullptr;
}

bool SimulatedDevice::pinned(const void* p, size_t bytes) const {
  return live(host_, p, bytes) || registration(p, bytes) != nullptr;
}

Result<void*> SimulatedDevice::allocate(std::map<uintptr_t, size_t>& allocations, size_t bytes) {
  constexpr size_t kPage = 4096;
  void* p = std::aligned_alloc(kPage, (std::max<size_t>(bytes, 1) + kPage - 1) / kPage * kPage);
  if (p == nullptr) return Status(StatusCode::kResourceExhausted, "simulated device: out of memory");
  std::memset(p, 0xAB, bytes);  // not zero: a read of memory never written shows
  std::lock_guard<std::mutex> lock(mu_);
  allocations[reinterpret_cast<uintptr_t>(p)] = bytes;
  return p;
}

void SimulatedDevice::release(std::map<uintptr_t, size_t>& allocations, void* p, size_t bytes,
                              const char* what) noexcept {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);  // held while poisoning: the transfer thread never reads freed memory
  auto it = allocations.find(reinterpret_cast<uintptr_t>(p));
  if (it == allocations.end() || it->second != bytes) {
    violation(std::string("free of ") + what + " memory that was not allocated here, or freed twice");
    return;
  }
  allocations.erase(it);
  std::memset(p, kPoison, bytes);
  std::free(p);
}

Result<void*> SimulatedDevice::allocate_host(size_t bytes) { return allocate(host_, bytes); }
void SimulatedDevice::free_host(void* p, size_t bytes) noexcept { release(host_, p, bytes, "host"); }
Status SimulatedDevice::register_host(void* p, size_t bytes) {
  auto mapping = mapping_of(p);  // as cudaHostRegister, which fails on unmapped memory
  if (!mapping.is_ok()) return invalid_argument("simulated device: register_host of unmapped memory");
  std::lock_guard<std::mutex> lock(mu_);
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto next = registered_.lower_bound(a);
  const bool overlaps = (next != registered_.end() && next->first < a + bytes) ||
                        (next != registered_.begin() && std::prev(next)->first + std::prev(next)->second.bytes > a);
  if (p == nullptr || bytes == 0 || overlaps)  // as cudaHostRegister: cudaErrorHostMemoryAlreadyRegistered
    return invalid_argument("simulated device: register_host of an empty or already registered range");
  registered_[a] = {bytes, std::move(mapping).value()};
  return Status::ok();
}

void SimulatedDevice::unregister_host(void* p, size_t bytes) noexcept {
  auto now = mapping_of(p);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = registered_.find(reinterpret_cast<uintptr_t>(p));
  if (it == registered_.end() || it->second.bytes != bytes) {
    violation("unregister_host of a range that is not registered");
    return;
  }
  if (!now.is_ok() || !it->second.mapping.same_memory_at(*now, it->first)) ++outlived_;
  registered_.erase(it);  // a copy still queued from it finds it gone: a violation (run())
}

Result<void*> SimulatedDevice::allocate_device(size_t bytes) { return allocate(device_, bytes); }
void SimulatedDevice::free_device(void* p, size_t bytes) noexcept { release(device_, p, bytes, "device"); }

std::shared_ptr<HostAllocator> SimulatedDevice::host_allocator() {
  return std::make_shared<SimHostAllocator>(shared_from_this());
}

Result<std::unique_ptr<DeviceEvent>> SimulatedDevice::create_event() {
  return std::unique_ptr<DeviceEvent>(std::make_unique<SimEvent>());
}

Status SimulatedDevice::copy_async(void* dst, const void* src, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (const Registration* r = registration(src, bytes); r != nullptr && !live(host_, src, bytes)) {
    const auto a = reinterpret_cast<uintptr_t>(src);
    auto now = mapping_of(src);
    if (!now.is_ok() || now->end < a + bytes || !r->mapping.same_memory_at(*now, a))
      violation(
          "copy_async from a registered range whose memory was unmapped or replaced since it was "
          "registered: CUDA would read the pages pinned then, not the memory mapped there now");
  }
  if (!pinned(src, bytes)) {
    violation("copy_async from memory that is not live pinned memory of this device");
    return Status(StatusCode::kInvalidArgument, "simulated device: copy source is not pinned memory");
  }
  if (!live(device_, dst, bytes)) {
    violation("copy_async into memory that is not live device memory");
    return Status(StatusCode::kInvalidArgument, "simulated device: copy destination is not device memory");
  }
  streams_[0]->queue.push_back(Op{Op::Copy{dst, src, bytes, fnv1a(src, bytes)}});
  cv_.notify_all();
  return Status::ok();
}

Status SimulatedDevice::record_transfer(DeviceEvent& event) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& state = static_cast<SimEvent&>(event).state;
  streams_[0]->queue.push_back(Op{Op::Record{state, ++state->recorded}});
  cv_.notify_all();
  return Status::ok();
}

Status SimulatedDevice::record_consumer(DeviceEvent& event, StreamHandle) {
  std::lock_guard<std::mutex> lock(mu_);
  EventState& s = state_of(event);
  s.completed = ++s.recorded;  // the consumer (the host) is done with what it did before
  cv_.notify_all();
  return Status::ok();
}

Status SimulatedDevice::transfer_wait(DeviceEvent& event) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& state = static_cast<SimEvent&>(event).state;
  streams_[0]->queue.push_back(Op{Op::Wait{state, state->recorded}});
  cv_.notify_all();
  return Status::ok();
}

Status SimulatedDevice::consumer_wait(StreamHandle, DeviceEvent& event) { return synchronize(event); }

Result<bool> SimulatedDevice::query(DeviceEvent& event) {
  std::lock_guard<std::mutex> lock(mu_);
  const EventState& s = state_of(event);
  return s.completed >= s.recorded;
}

Status SimulatedDevice::synchronize(DeviceEvent& event) {
  std::unique_lock<std::mutex> lock(mu_);
  const EventState& s = state_of(event);
  const uint64_t ticket = s.recorded;
  cv_.wait(lock, [&] { return s.completed >= ticket; });
  return Status::ok();
}

void SimulatedDevice::run(Stream& stream) {
  std::unique_lock<std::mutex> lock(mu_);
  std::uniform_int_distribution<int> delay(stream.min_delay_us, stream.max_delay_us);
  auto& rng = stream.rng;
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !stream.queue.empty(); });
    if (stream.queue.empty()) return;  // stop_, and drained
    Op op = std::move(stream.queue.front());
    stream.queue.pop_front();
    if (auto* c = std::get_if<Op::Copy>(&op.what)) {
      // Two halves with a pause before each: a consumer that reads before the copy's event completed
      // sees a half-written batch, and a producer that refills the source meanwhile changes its hash.
      const size_t half = c->bytes / 2;
      const size_t parts[2][2] = {{0, half}, {half, c->bytes - half}};
      bool ok = true;
      for (const auto& [offset, n] : parts) {
        const int us = delay(rng);
        lock.unlock();
        std::this_thread::sleep_for(std::chrono::microseconds(us));
        lock.lock();
        if (!pinned(c->src, c->bytes) || !live(device_, c->dst, c->bytes)) {
          violation("memory freed while a copy from or into it was in flight");
          ok = false;
          break;
        }
        std::memcpy(static_cast<uint8_t*>(c->dst) + offset, static_cast<const uint8_t*>(c->src) + offset, n);
      }
      if (ok && fnv1a(c->src, c->bytes) != c->hash)
        violation("a host buffer changed while its copy to the device was in flight (reused too early)");
      ++copies_;
      cv_.notify_all();
    } else if (auto* r = std::get_if<Op::Record>(&op.what)) {
      r->event->completed = std::max(r->event->completed, r->ticket);
      cv_.notify_all();
    } else {
      auto& w = std::get<Op::Wait>(op.what);
      cv_.wait(lock, [&] { return w.event->completed >= w.ticket; });
    }
  }
}

Result<int> SimulatedDevice::create_stream(int min_delay_us, int max_delay_us) {
  std::lock_guard<std::mutex> lock(mu_);
  CHUTE_RETURN_IF_ERROR(start_stream(min_delay_us, max_delay_us));
  return static_cast<int>(streams_.size()) - 1;
}

Result<void*> SimulatedDevice::allocate_block(size_t bytes) {
  bytes = std::bit_ceil(bytes);  // as torch's CachingHostAllocator: size classes of powers of two
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [p, b] : blocks_) {
      if (b.lent || b.bytes != bytes) continue;
      const bool done =
          std::all_of(b.events.begin(), b.events.end(), [](const auto& e) { return e.first->completed >= e.second; });
      if (!done) continue;  // a copy out of it may still be running
      b.lent = true;
      b.events.clear();
      return reinterpret_cast<void*>(p);
    }
  }
  CHUTE_ASSIGN_OR_RETURN(void* p, allocate(host_, bytes));
  std::lock_guard<std::mutex> lock(mu_);
  Block& b = blocks_[reinterpret_cast<uintptr_t>(p)];
  b.bytes = bytes;
  b.lent = true;
  return p;
}

void SimulatedDevice::free_block(void* p) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(reinterpret_cast<uintptr_t>(p));
  if (it == blocks_.end() || !it->second.lent) {
    violation("free_block of a block that is not lent");
    return;
  }
  Block& b = it->second;
  for (int s : b.streams) {
    auto event = std::make_shared<EventState>();
    streams_[s]->queue.push_back(Op{Op::Record{event, ++event->recorded}});
    b.events.emplace_back(event, event->recorded);
  }
  b.streams.clear();
  b.lent = false;
  cv_.notify_all();
}

Result<void*> SimulatedDevice::copy_to_device(const void* src, size_t bytes, int stream) {
  CHUTE_ASSIGN_OR_RETURN(void* dst, allocate(device_, bytes));
  std::lock_guard<std::mutex> lock(mu_);
  if (stream < 1 || stream >= static_cast<int>(streams_.size())) {
    violation("copy_to_device on a stream that does not exist");
    return invalid_argument("no simulated stream " + std::to_string(stream));
  }
  if (!pinned(src, bytes)) {
    violation("copy_to_device from memory that is not live pinned memory of this device");
    return invalid_argument("simulated device: copy source is not pinned memory");
  }
  // Like torch's CachingHostAllocator_recordEvent: the block the source lies in learns the stream.
  const auto a = reinterpret_cast<uintptr_t>(src);
  if (auto it = blocks_.upper_bound(a); it != blocks_.begin()) {
    --it;
    if (a < it->first + it->second.bytes && it->second.lent) it->second.streams.push_back(stream);
  }
  streams_[stream]->queue.push_back(Op{Op::Copy{dst, src, bytes, fnv1a(src, bytes)}});
  cv_.notify_all();
  return dst;
}

Status SimulatedDevice::synchronize_stream(int stream) {
  std::unique_lock<std::mutex> lock(mu_);
  if (stream < 0 || stream >= static_cast<int>(streams_.size()))
    return invalid_argument("no simulated stream " + std::to_string(stream));
  auto event = std::make_shared<EventState>();
  const uint64_t ticket = ++event->recorded;
  streams_[stream]->queue.push_back(Op{Op::Record{event, ticket}});
  cv_.notify_all();
  cv_.wait(lock, [&] { return event->completed >= ticket; });
  return Status::ok();
}

int64_t SimulatedDevice::violations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return violations_;
}

std::string SimulatedDevice::first_violation() const {
  std::lock_guard<std::mutex> lock(mu_);
  return first_violation_;
}

int64_t SimulatedDevice::outlived_registrations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return outlived_;
}

int64_t SimulatedDevice::copies() const {
  std::lock_guard<std::mutex> lock(mu_);
  return copies_;
}

size_t SimulatedDevice::live_host_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (auto& [p, b] : host_) n += b;
  return n;
}

size_t SimulatedDevice::live_device_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (auto& [p, b] : device_) n += b;
  return n;
}

}  // namespace chute
