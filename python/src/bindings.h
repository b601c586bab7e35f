// Shared by the binding files: one register_<area>() per file, and the translation of a core Status into
// the Python exception a PyTorch user expects.
#pragma once

#include <nanobind/nanobind.h>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "chute/base/cancel.h"
#include "chute/base/status.h"
#include "chute/base/thread.h"
#include "chute/engine/loader.h"
#include "chute/engine/stats.h"
#include "chute/gpu/device.h"
#include "chute/io/source.h"
#include "chute/remote/http_engine.h"
#include "chute/transform/transforms.h"

namespace chute {
class ObjectStore;
class ShardCache;
}  // namespace chute

namespace chute::py {

namespace nb = nanobind;

// InvalidArgument -> ValueError, NotFound -> FileNotFoundError, IoError -> OSError,
// Unsupported -> ValueError, Environment -> chute.ResourceError (an OSError and a RuntimeError),
// everything else -> RuntimeError.
[[noreturn]] void throw_status(const Status& status);

// A sample's error (ErrorPolicy::kRaise), as the engine recorded it. Thrown under a binding, it is raised
// in Python as chute.SampleError(index, path, reason, epoch) (the translator in module.cc): the one Python
// class for a bad sample. Nothing else becomes a SampleError; std::invalid_argument stays a ValueError.
class SampleException : public std::exception {
 public:
  explicit SampleException(FailedSample sample) : sample_(std::move(sample)) {}
  const FailedSample& sample() const { return sample_; }
  const char* what() const noexcept override { return "a sample failed"; }

 private:
  FailedSample sample_;
};

// The error a loader's next() returned, raised: SampleException when it is the sample's fault (the loader
// names it in failed_sample()), chute.ResourceError for the machine (kEnvironment), else as throw_status.
[[noreturn]] void throw_next_error(const Status& status, const Loader& loader);

// Calls `wait(timeout)` (a Result that is kDeadlineExceeded while nothing is ready) in slices without the
// GIL; between slices Python handles signals, so Ctrl-C interrupts a wait for a batch.
template <typename Wait>
auto wait_interruptibly(Wait&& wait) -> decltype(wait(std::chrono::milliseconds(0))) {
  constexpr std::chrono::milliseconds kSlice(50);
  for (;;) {
    auto result = [&] {
      nb::gil_scoped_release release;
      return wait(kSlice);
    }();
    if (result.is_ok() || result.status().code() != StatusCode::kDeadlineExceeded) return result;
    if (PyErr_CheckSignals() != 0) throw nb::python_error();
  }
}

// Whether the calling thread is Python's main thread: the one that runs signal handlers (and finalizes).
inline bool on_main_thread() {
  const nb::object main = nb::module_::import_("threading").attr("main_thread")();
  return nb::cast<unsigned long>(main.attr("ident")) == PyThread_get_thread_ident();
}

// Runs `work()` (a Status, a Result or another value; it must not touch Python) without the GIL. On the
// main thread it runs on a thread of its own in a CancelScope, while the main thread waits for it in
// slices and handles signals between them: a Python exception from a signal handler (Ctrl-C's
// KeyboardInterrupt) cancels the work's token (the HTTP engine then ends its requests, retries and backoff
// within ~0.1 s; chute/base/cancel.h), waits for the work to end, and is raised. Other threads never see a
// signal: the work runs on them directly, once, without the GIL (a daemon thread that took the GIL back
// slice after slice could be ended inside that, at exit). Without a thread (the kernel refused one) the
// work runs here, uninterruptible.
template <typename Work>
auto call_interruptibly(Work&& work) -> decltype(work()) {
  if (!on_main_thread()) {
    nb::gil_scoped_release release;
    return work();
  }
  using R = decltype(work());
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::optional<R> result;
    std::exception_ptr error;
  };
  auto shared = std::make_shared<Shared>();
  auto token = CancelToken::make();
  // The work may refer to this frame: it returns only once the thread has ended.
  Result<std::thread> thread = start_thread("chute-call", [&work, shared, token] {
    CancelScope scope(token);
    std::optional<R> result;
    std::exception_ptr error;
    try {
      result.emplace(work());
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(shared->mu);
    shared->result = std::move(result);
    shared->error = error;
    shared->done = true;
    shared->cv.notify_all();
  });
  if (!thread.is_ok()) {
    nb::gil_scoped_release release;
    return work();
  }
  constexpr std::chrono::milliseconds kSlice(50);
  std::optional<nb::python_error> interrupted;
  for (;;) {
    bool done = false;
    {
      nb::gil_scoped_release release;
      std::unique_lock<std::mutex> lock(shared->mu);
      done = shared->cv.wait_for(lock, kSlice, [&] { return shared->done; });
    }
    if (done) break;
    if (PyErr_CheckSignals() != 0) {
      interrupted.emplace();  // takes the exception the handler raised
      token->cancel();
      break;
    }
  }
  {
    nb::gil_scoped_release release;
    thread->join();
  }
  if (interrupted) throw std::move(*interrupted);
  if (shared->error) std::rethrow_exception(shared->error);
  return std::move(*shared->result);
}

template <typename T>
T unwrap(Result<T> result) {
  if (!result.is_ok()) throw_status(result.status());
  return std::move(result).value();
}

// An interrupted epoch's splits (order/remainder.h) as Python gives them: [(world_size, [received per rank]), ...].
using PySplits = std::vector<std::pair<int64_t, std::vector<int64_t>>>;
std::vector<EpochSplit> to_splits(const PySplits& splits);

// Opens a source (a static T::open returning Result<shared_ptr<T>>) without the GIL: scans and mmaps can
// take a while, and other Python threads should run meanwhile.
template <typename T, typename F>
std::shared_ptr<T> open_without_gil(F&& open) {
  Result<std::shared_ptr<T>> result = [&] {
    nb::gil_scoped_release release;
    return open();
  }();
  return unwrap(std::move(result));
}

// The index, or IndexError when it is outside the source (bind_sources.cc).
int64_t checked_index(const Source& s, int64_t index);

// The pixel stage's options from their Python names: interpolation 'nearest' | 'bilinear', backend 'pil' |
// 'tensor', api 'v1' | 'v2' (ValueError otherwise).
PolicyOptions policy_options(const std::string& interpolation, const Fill& fill, const std::string& backend,
                             const std::string& api);

// A native transform object (chute.RandomResizedCrop()._to_native(), ...) as the core's Transform; a
// TypeError for anything else.
Transform native_transform(nb::handle t);
// A Pipeline from a list of native transform objects.
Pipeline make_pipeline(const nb::list& transforms);

// The Python objects over the engine. The loader is shared: a DeviceLoader (bind_device.cc) drives it.
struct PyLoader {
  std::shared_ptr<Loader> impl;
};
struct PyDevice {
  std::shared_ptr<Device> impl;
};
// Pinned blocks lent by torch's host allocator for the ring to fill and hand over (host_allocator.h).
struct PyBlockPool {
  std::shared_ptr<BlockPool> impl;
};

// (images, labels) as torch tensors over a batch's memory (DLPack, no copy), each holding `owner` (a
// capsule keeping the batch alive). Images are NCHW-shaped, with channels-last strides for NHWC.
// `copy_labels` (host memory only): the labels get their own small allocation instead, so that a label
// tensor kept by the caller (targets.append(y)) does not pin the batch's image buffer.
nb::tuple batch_tensors(void* images, int64_t* labels, int64_t size, const Loader& loader, DType dtype,
                        const std::function<nb::capsule()>& owner, int device_type, int device_id,
                        bool copy_labels = false);

// A batch transform's draws as (kind, lam, label_lam, (x1, y1, x2, y2)) (bind_batch_mix.cc).
nb::tuple mix_tuple(const MixParams& params);

// A loader's statistics as a flat dict of plain numbers, with the verdict (bind_stats.cc);
// chute.LoaderStats presents them.
nb::dict stats_dict(const LoaderStats& s);

void register_options(nb::module_& m);
void register_sources(nb::module_& m);
void register_transforms(nb::module_& m);
void register_augment(nb::module_& m);
void register_batch_mix(nb::module_& m);
void register_loader(nb::module_& m);
void register_reference(nb::module_& m);
void register_packed(nb::module_& m);
void register_formats(nb::module_& m);
void register_device(nb::module_& m);
void register_gather(nb::module_& m);
void register_stats(nb::module_& m);
void register_sampler(nb::module_& m);
// Python handles of the object store and the shard cache, shared by their bindings and the remote source's.
struct PyObjectStore {
  std::shared_ptr<ObjectStore> impl;
};
struct PyShardCache {
  std::shared_ptr<ShardCache> impl;
};
nb::dict http_stats_dict(const HttpStats& s);

void register_remote(nb::module_& m);
void register_object_store(nb::module_& m);
void register_cache(nb::module_& m);

}  // namespace chute::py
