// TFRecord files of tf.train.Example records as a Source: a SpanSource (io/span_source.h) whose spans are
// the records (data and CRC) in each file's own mapping, and whose unwrap checks the record's CRC-32C and
// returns its image feature's bytes. A one-time scan per file (tfrecord.h's framing, each Example parsed
// for its label) builds the index, cached like a tar's (index_cache.h: never beside the data).
//
// Feature names: `image_key` (a bytes feature) and `label_key` (an int64 feature), else detected from the
// first record: "image/encoded" then "image", and "image/class/label" then "label" (the ImageNet scripts of
// TF's model garden, and TFDS). Labels are returned as stored: the model garden's start from 1. A record
// without the label feature is labelled -1; without a label feature in the first record, every sample is.
// Thread-safety: open() is a plain function; the source is a SpanSource.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chute/io/span_source.h"

namespace chute {

struct TfRecordOptions {
  std::string image_key;  // "": detect
  std::string label_key;  // "": detect; a label feature may be absent (labels -1)
  std::string cache_dir;  // "": indexes in memory only
  bool verify = true;     // check each record's CRC-32C on every read
};

struct TfRecordLayout {
  std::string image_key, label_key;                           // the features read ("" label_key: none, labels -1)
  std::vector<std::pair<std::string, std::string>> features;  // the first record's: (name, kind)
};

// `paths`: TFRecord files, in the order their samples are numbered (one shard each). Errors name the file,
// the record and its offset (framing), or list the first record's features (a feature not found).
Result<std::pair<std::shared_ptr<SpanSource>, TfRecordLayout>> open_tfrecord(const std::vector<std::string>& paths,
                                                                             const TfRecordOptions& options);

}  // namespace chute
