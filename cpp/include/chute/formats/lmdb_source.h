// An LMDB environment of image records as a Source: a SpanSource (io/span_source.h) whose spans are the
// images inside the values of data.mdb, in data.mdb's own mapping. A one-time scan (lmdb_file.h walks the
// B+tree; pickle_span.h and caffe_datum.h find the image inside each value) builds the index, cached like a
// tar's (index_cache.h: never beside the data). The reader then copies each image from the file by offset:
// no liblmdb, no Python, no unpickling per sample.
//
// Record layouts, detected from the first records (all of the first 8 must agree):
//   kPickle   a pickled `(image_bytes, label, ...)` tuple, or a dict `{image_key: image_bytes, label_key: label}`
//             ("image" and "label" unless named), pickle protocol 2 to 5;
//   kDatum    a Caffe Datum with `encoded` set (convert_imageset --encoded): data and label;
//   kRaw      the image file's bytes (JPEG, PNG, WebP), unlabelled (-1) until labels are given from outside
//             (SpanSource::with_labels: a callable on the key, a label file).
// Sample order: the pickled list of keys in the `__keys__` record when there is one (the folder2lmdb
// scripts write it, with `__len__`, and their datasets index it), else the keys in LMDB's order, leaving out
// `__keys__` and `__len__`. A record whose value does not hold the layout is a bad sample (its read fails
// with why), not a failed open; a layout that is none of these fails the open, naming the key.
// Shards (order='shards'): runs of about 256 MiB of consecutive samples, when the samples lie in the file
// in about their order (90% of them at most 1 MiB before their predecessor: written in order by one
// writer); else none.
// Thread-safety: open() is a plain function; the source is a SpanSource.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "chute/io/span_source.h"

namespace chute {

enum class LmdbLayout { kPickleTuple, kPickleDict, kDatum, kRaw };
// "pickled tuple", "pickled dict", "Caffe Datum", "raw image".
const char* lmdb_layout_name(LmdbLayout layout);

struct LmdbOptions {
  std::string image_key = "image";  // a dict layout's keys
  std::string label_key = "label";
  std::string cache_dir;  // "": the index in memory only
};

struct LmdbInfo {
  LmdbLayout layout = LmdbLayout::kRaw;
  bool keys_record = false;  // the order came from `__keys__`
  std::string data_file;     // the data.mdb read
};

// `path`: the environment's directory (holding data.mdb), or its data file (an environment opened with
// subdir=False).
Result<std::pair<std::shared_ptr<SpanSource>, LmdbInfo>> open_lmdb(const std::string& path, const LmdbOptions& options);

}  // namespace chute
