#include "chute/processor.h"

namespace chute {

SampleProcessor::SampleProcessor(const Source& source, const Pipeline& pipeline, const OutputWriter& writer,
                                 uint64_t seed)
    : source_(source), pipeline_(pipeline), writer_(writer), seed_(seed) {}

Status SampleProcessor::process(int64_t index, uint64_t epoch, void* dst) {
  CHUTE_RETURN_IF_ERROR(source_.read(index, bytes_));
  CHUTE_ASSIGN_OR_RETURN(const ImageInfo info, decoder_.read_info(bytes_));
  SampleRng rng(seed_, epoch, static_cast<uint64_t>(index));
  CHUTE_ASSIGN_OR_RETURN(const SamplePlan plan, pipeline_.plan(info.width, info.height, rng));
  CHUTE_ASSIGN_OR_RETURN(
      const JpegDecoder::View window,
      decoder_.decode(bytes_, {plan.window_x, plan.window_y, plan.window_width, plan.window_height}, window_,
                      kResampleInputPadding));
  resized_.resize(static_cast<size_t>(plan.xs.out_size) * plan.ys.out_size * 3);
  resample_rgb(window.pixels, window.pitch, plan.xs, plan.ys, resized_.data(), scratch_);
  writer_.write(resized_.data(), plan.flip, dst);
  return Status::ok();
}

}  // namespace chute
