// pack(): writes a Source as a packed dataset (docs/FORMAT.md), in the source's order.
//
// Reader threads read and checksum samples ahead of the calling thread, which appends them in order to
// the current shard; a bounded window of samples in flight bounds memory. Shards and index are written
// under temporary names (".tmp" appended), flushed to disk and renamed into place only when everything
// is written, the index last: a pack killed halfway leaves no index, so nothing that opens as a dataset.
// With `parts` > 1, part `part` writes the samples [part*N/parts, (part+1)*N/parts) and a part index;
// merge_parts() then writes the dataset's index from all the part indexes.
// The destination is locked for the run (a second whole pack into it is refused, naming the first; parts
// and merge_parts() share the lock), and a whole pack first removes what killed runs left there: their
// temporaries and the shards no index lists (pack/detail/pack_destination.h, docs/FORMAT.md).
// Thread-safety: pack() may run concurrently for different destinations or parts.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "chute/decode/image_decoder.h"
#include "chute/io/source.h"
#include "chute/pack/pack_transform.h"

namespace chute {

struct PackOptions {
  std::string dst;                          // output directory, created if missing
  uint64_t shard_size = uint64_t{1} << 30;  // a shard is closed before a record would take it past this size
  int num_threads = 0;                      // reader threads; 0: all cores
  int part = 0;
  int parts = 1;
  // The key stored with sample i (default: source.name(i)).
  std::function<std::string(int64_t)> key;
  // What each image must pass to be packed (ImageDecoder::check): by default its header (a format the
  // loader decodes, dimensions, at most max_pixels), so that the loader can decode what pack writes.
  ImageCheck check = ImageCheck::kHeader;
  int64_t max_pixels = kDefaultMaxPixels;
  // A sample that fails the check is left out and listed in PackSummary::skipped, instead of failing the
  // pack. Read errors (I/O, the environment) fail the pack either way.
  bool skip_bad = false;
  // A sample file larger than this stops the pack with an error naming it (Source::read_capped).
  uint64_t max_file_bytes = kDefaultMaxFileBytes;
  // Store less (pack_transform.h): resize to a cap, re-encode, or store raw pixels. Needs a check other
  // than kNone (the images are decoded anyway; a failed decode is the image's error, as a failed check).
  StoreOptions store;
};

struct PackProgress {
  int64_t samples = 0;        // written so far
  uint64_t bytes = 0;         // payload bytes written so far
  int64_t total_samples = 0;  // in this part
};

// A sample pack() left out (PackOptions::skip_bad): its index in the source, name, and why.
struct PackSkipped {
  int64_t index = 0;
  std::string name;
  Status status;
};

struct PackSummary {
  int64_t samples = 0;
  uint64_t payload_bytes = 0;
  uint64_t source_bytes = 0;  // the packed samples' source files (payload_bytes when nothing was transformed)
  uint64_t file_bytes = 0;    // shards + index
  int shards = 0;
  std::vector<PackSkipped> skipped;  // in source order
};

// `progress` is called on the calling thread about every 100 ms and at the end; returning false cancels
// the pack (its temporary files are removed, and the result is a Cancelled status). Every failure removes
// the temporary files (an exception unwinding included; the directory stays). A
// failure of the machine (out of memory, descriptors, or threads for the readers) is retried like the
// loader's (environment.h), then returned as kEnvironment naming the limit; when fewer reader threads
// than asked for can be started, the pack runs on those it got and says so once on stderr.
Result<PackSummary> pack(const Source& source, const std::vector<std::string>& classes, const PackOptions& options,
                         const std::function<bool(const PackProgress&)>& progress = {});

// Writes DST/index.chidx from DST/part-*-of-N.chidx once all N parts are there, checking each part's
// shards; the part indexes are removed afterwards.
Result<PackSummary> merge_parts(const std::string& dst);

// The shard and part-index file names pack() uses, and whether a name is one of them (exactly as these
// functions write it).
std::string shard_file_name(int part, int parts, int number);
std::string part_index_name(int part, int parts);
bool is_shard_file_name(const std::string& name);
bool parse_part_index_name(const std::string& name, int& part, int& parts);

}  // namespace chute
