#include "chute/engine/processor.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <new>

#include "chute/base/environment.h"
#include "chute/base/fork_gate.h"
#include "chute/decode/exif.h"

namespace chute {
namespace {
// Charges the time since the last mark to one stage; inert without a StageTimes.
class StageClock {
 public:
  explicit StageClock(StageTimes* times) : times_(times) {
    if (times_) last_ = std::chrono::steady_clock::now();
  }
  void charge(int64_t StageTimes::*stage) {
    if (!times_) return;
    const auto now = std::chrono::steady_clock::now();
    times_->*stage += std::chrono::duration_cast<std::chrono::nanoseconds>(now - last_).count();
    last_ = now;
  }
  ~StageClock() { charge(current_); }  // a failing stage is charged too
  void now_in(int64_t StageTimes::*stage) { current_ = stage; }

 private:
  StageTimes* times_;
  std::chrono::steady_clock::time_point last_;
  int64_t StageTimes::*current_ = &StageTimes::read_ns;
};
}  // namespace

SampleProcessor::SampleProcessor(const Source& source, const Pipeline& pipeline, const OutputWriter& writer,
                                 DecodeOptions decode)
    : source_(source), pipeline_(pipeline), writer_(writer), decode_(decode), decoder_(decode.max_pixels) {
  decoder_.set_accept_truncation(decode.accept_truncated);
}

size_t decode_scratch_bytes(const ImageInfo& info, bool png, size_t file_bytes, int window_width, int window_height,
                            bool reoriented, int out_width) {
  const size_t w = static_cast<size_t>(window_width), h = static_cast<size_t>(window_height);
  const size_t full_w = static_cast<size_t>(info.width), full_h = static_cast<size_t>(info.height);
  size_t bytes = file_bytes + (png ? full_w : w) * 3 * h;  // the window; a PNG's rows are decoded whole
  if (png) {
    bytes += full_w * 8 * (info.progressive ? h + 1 : 1);  // raw rows, up to 16-bit RGBA (Adam7 keeps them all)
  } else if (info.progressive) {
    bytes += full_w * full_h * static_cast<size_t>(std::max(info.components, 1)) * 2;  // DCT coefficients
  }
  if (reoriented) bytes += w * h * 3;
  bytes += h * static_cast<size_t>(out_width) * 3;  // between the passes (as rows first)
  return bytes;
}

void SampleProcessor::release_scratch() {
  std::vector<uint8_t>().swap(bytes_);
  std::vector<uint8_t>().swap(window_);
  std::vector<uint8_t>().swap(oriented_);
  std::vector<uint8_t>().swap(resized_);
  std::vector<uint8_t>().swap(padded_);
  std::vector<uint8_t>().swap(scratch_.between_passes);
  decoder_.release_scratch();
}

Status SampleProcessor::process(int64_t index, EpochKey key, void* dst, StageTimes* times) {
  return retry_environment([&] {
    const ForkGate::Work work;  // each attempt; the back-off between attempts sleeps outside (fork_gate.h)
    try {
      return process_once(index, key, dst, times);
    } catch (const std::bad_alloc&) {
      release_scratch();  // what this thread kept is the first memory to give back
      return out_of_memory("reading, decoding or resizing this sample");
    }
  });
}

Status SampleProcessor::process_once(int64_t index, EpochKey key, void* dst, StageTimes* times) {
  StageClock clock(times);  // each stage is charged when the next begins, the last on return
  const Status read = source_.read_capped(index, bytes_, decode_.max_file_bytes);
  if (times && read.is_ok()) times->bytes_read += static_cast<int64_t>(bytes_.size());
  CHUTE_RETURN_IF_ERROR(read);
  clock.charge(&StageTimes::read_ns);
  clock.now_in(&StageTimes::decode_ns);
  CHUTE_ASSIGN_OR_RETURN(const ImageInfo info, decoder_.read_info(bytes_));
  const int orientation = decode_.apply_exif_orientation ? ImageDecoder::orientation(bytes_) : 1;
  const bool swap = orientation_swaps_axes(orientation);
  SampleRng rng(key.seed, key.epoch, static_cast<uint64_t>(index));
  // Transforms see the image as displayed; the decoder reads the stored rectangle that holds it.
  const int max_reduction = decode_.mode == DecodeMode::kReduced ? ImageDecoder::max_reduction(bytes_) : 1;
  CHUTE_ASSIGN_OR_RETURN(const SamplePlan plan,
                         pipeline_.plan(swap ? info.height : info.width, swap ? info.width : info.height, rng,
                                        max_reduction, decode_.reducing_gap));
  // The stored image as the decoder outputs it: reduced, sizes rounded up like libjpeg's.
  const int d = plan.reduction;
  const int stored_w = (info.width + d - 1) / d, stored_h = (info.height + d - 1) / d;
  const Window displayed{plan.window_x, plan.window_y, plan.window_width, plan.window_height};
  const Window stored = stored_window(displayed, orientation, stored_w, stored_h);
  // validate_full: decode the whole stored image and use the window's part of it. Decoders give a window
  // the pixels of a full decode, so the output does not change.
  const Window decoded = decode_.validate_full ? Window{0, 0, stored_w, stored_h} : stored;
  // A large decode waits for its memory; its scratch is freed before the lease returns it (declared in
  // this order, the guard runs first on every return).
  DecodeBudget::Lease lease;
  // A PNG decodes whole rows; a raw record's rows [0, window bottom) are decompressed, whole rows too.
  const ImageFormat format = detect_format(bytes_);
  const bool whole_rows = format == ImageFormat::kPng || format == ImageFormat::kRaw;
  const int rows = format == ImageFormat::kRaw ? decoded.y + decoded.height : decoded.height;
  const size_t scratch =
      decode_scratch_bytes(info, whole_rows, bytes_.size(), decoded.width, rows, orientation != 1, plan.xs.out_size);
  if (decode_.budget && scratch > kUnchargedDecodeBytes) lease = decode_.budget->acquire(scratch);
  struct FreeAfterLargeDecode {
    SampleProcessor* self;
    bool large;
    ~FreeAfterLargeDecode() {
      if (large) self->release_scratch();
    }
  } free_after{this, scratch > kUnchargedDecodeBytes};
  CHUTE_ASSIGN_OR_RETURN(ImageView window, decoder_.decode(bytes_, decoded, window_, kResampleInputPadding, d));
  if (decode_.validate_full)
    window.pixels += static_cast<size_t>(stored.y) * window.pitch + 3 * static_cast<size_t>(stored.x);
  if (orientation != 1) {
    oriented_.resize(static_cast<size_t>(displayed.width) * displayed.height * 3 + kResampleInputPadding);
    reorient(window.pixels, window.pitch, displayed, orientation, stored_w, stored_h, oriented_.data());
    window = {oriented_.data(), static_cast<size_t>(displayed.width) * 3};
  }
  clock.charge(&StageTimes::decode_ns);
  clock.now_in(&StageTimes::transform_ns);
  resized_.resize(static_cast<size_t>(plan.xs.out_size) * plan.ys.out_size * 3);
  resample_rgb(window.pixels, window.pitch, plan.xs, plan.ys, resized_.data(), scratch_);
  if (plan.pad_left + plan.pad_top + plan.pad_right + plan.pad_bottom > 0) {
    pad_zeros(plan);
    writer_.write(padded_.data(), plan.flip, dst);
  } else {
    writer_.write(resized_.data(), plan.flip, dst);
  }
  return Status::ok();
}

void SampleProcessor::pad_zeros(const SamplePlan& plan) {
  const size_t w = static_cast<size_t>(plan.xs.out_size), h = static_cast<size_t>(plan.ys.out_size);
  const size_t out_w = plan.pad_left + w + plan.pad_right, out_h = plan.pad_top + h + plan.pad_bottom;
  padded_.assign(out_w * out_h * 3, 0);
  for (size_t row = 0; row < h; ++row)
    std::memcpy(padded_.data() + ((plan.pad_top + row) * out_w + plan.pad_left) * 3, resized_.data() + row * w * 3,
                w * 3);
}

}  // namespace chute
