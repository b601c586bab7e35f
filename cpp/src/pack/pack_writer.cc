#include "chute/pack/pack_writer.h"

#include "chute/base/cores.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>

#include "chute/base/atomic_file.h"
#include "chute/base/environment.h"
#include "chute/base/fork_gate.h"
#include "chute/base/thread.h"
#include "chute/io/packed_format.h"
#include "chute/io/packed_source.h"
#include "pack/detail/pack_destination.h"

namespace chute {

namespace {

constexpr const char* kRejectedHint =
    " (the loader could not decode it; skip_bad / `chute pack --skip-bad` leaves such files out)";

// A sample read and checksummed by a reader thread, waiting for the writer.
struct Slot {
  std::vector<uint8_t> payload;
  std::vector<uint8_t> header;
  std::string key;
  int64_t label = 0;
  IndexEntry meta;  // source_bytes, kind, width and height of the record
  Status status;
  bool rejected = false;  // status is the image check's verdict, not a read error
  bool ready = false;
};

// Failures of ImageDecoder::check that are the file's own: PackOptions::skip_bad leaves those samples out.
bool is_bad_image(const Status& st) {
  return st.code() == StatusCode::kCorruptData || st.code() == StatusCode::kUnsupported ||
         st.code() == StatusCode::kResourceExhausted;
}

// Removes what earlier runs left in dst (pack_destination.h), saying so on stderr: those are files in the
// user's directory, and a user who wonders where they went should find out.
Status remove_leftovers(const detail::PackDestination& destination, const std::string& dst, const char* who) {
  CHUTE_ASSIGN_OR_RETURN(const int removed, destination.remove_leftovers());
  if (removed > 0)
    std::fprintf(stderr, "%s: removed %d file%s an earlier, unfinished run left in %s\n", who, removed,
                 removed == 1 ? "" : "s", dst.c_str());
  return Status::ok();
}

}  // namespace

std::string shard_file_name(int part, int parts, int number) {
  char name[64];
  if (parts == 1)
    std::snprintf(name, sizeof name, "shard-%05d%s", number, kShardExtension);
  else
    std::snprintf(name, sizeof name, "part-%05d-shard-%05d%s", part, number, kShardExtension);
  return name;
}

std::string part_index_name(int part, int parts) {
  char name[64];
  std::snprintf(name, sizeof name, "part-%05d-of-%05d.chidx", part, parts);
  return name;
}

bool is_shard_file_name(const std::string& name) {
  int part = 0, number = 0;
  if (std::sscanf(name.c_str(), "part-%d-shard-%d", &part, &number) == 2)
    return part >= 0 && number >= 0 && name == shard_file_name(part, 2, number);
  return std::sscanf(name.c_str(), "shard-%d", &number) == 1 && number >= 0 && name == shard_file_name(0, 1, number);
}

bool parse_part_index_name(const std::string& name, int& part, int& parts) {
  return std::sscanf(name.c_str(), "part-%d-of-%d.chidx", &part, &parts) == 2 && part >= 0 && parts > part &&
         name == part_index_name(part, parts);
}

namespace {
Result<PackSummary> pack_or_throw(const Source& source, const std::vector<std::string>& classes, const PackOptions& o,
                                  const std::function<bool(const PackProgress&)>& progress);
}  // namespace

Result<PackSummary> pack(const Source& source, const std::vector<std::string>& classes, const PackOptions& o,
                         const std::function<bool(const PackProgress&)>& progress) {
  try {
    return pack_or_throw(source, classes, o, progress);  // its files are removed as the exception unwinds
  } catch (const std::bad_alloc&) {
    return out_of_memory("while packing to " + o.dst);
  }
}

namespace {
Result<PackSummary> pack_or_throw(const Source& source, const std::vector<std::string>& classes, const PackOptions& o,
                                  const std::function<bool(const PackProgress&)>& progress) {
  if (o.parts < 1 || o.part < 0 || o.part >= o.parts)
    return invalid_argument("part must be in [0, parts), got part " + std::to_string(o.part) + " of " +
                            std::to_string(o.parts));
  if (o.shard_size < 4096) return invalid_argument("shard_size must be at least 4096 bytes");
  const int64_t n = source.size();
  if (n == 0) return invalid_argument("nothing to pack: the source is empty");
  CHUTE_RETURN_IF_ERROR(o.store.validate());
  if (o.store.active() && o.check == ImageCheck::kNone)
    return invalid_argument("storing less (resize, re-encode, raw) decodes every image: it needs an image check");
  const int64_t begin = n * o.part / o.parts, end = n * (o.part + 1) / o.parts;
  std::error_code ec;
  std::filesystem::create_directories(o.dst, ec);
  if (ec) return io_error("cannot create " + o.dst + ": " + ec.message());
  const std::string index_path =
      o.dst + "/" + (o.parts == 1 ? std::string(kIndexFileName) : part_index_name(o.part, o.parts));
  // Held until the pack returns: a second pack into dst is refused, naming this one.
  CHUTE_ASSIGN_OR_RETURN(
      detail::PackDestination destination,
      detail::PackDestination::lock(
          o.dst, o.parts == 1 ? detail::PackDestination::Role::kWholePack : detail::PackDestination::Role::kPart,
          o.parts == 1 ? "chute pack"
                       : "chute pack part " + std::to_string(o.part) + " of " + std::to_string(o.parts)));
  if (std::filesystem::exists(index_path))
    return invalid_argument(o.dst + " already holds a packed dataset (" + index_path +
                            "); remove it or pack elsewhere");
  // A whole pack is alone in dst: what killed runs left there goes first. Parts run side by side, so none of
  // them can tell a dead run's files from a live part's; merge_parts() removes them once all are done.
  if (destination.exclusive()) CHUTE_RETURN_IF_ERROR(remove_leftovers(destination, o.dst, "chute pack"));
  const int threads = o.num_threads > 0 ? o.num_threads : available_cores();
  const int64_t window = std::max<int64_t>(16, 8 * threads);

  std::vector<Slot> slots(static_cast<size_t>(window));
  std::mutex mu;
  std::condition_variable ready_cv, space_cv;
  int64_t written = begin;  // guarded by mu: the next sample the writer appends
  bool stop = false;        // guarded by mu
  std::atomic<int64_t> next{begin};
  // The record's kind and stored size in s.meta; under o.store, its payload replaced by what is stored.
  auto describe_or_transform = [&](Slot& s, ImageDecoder& decoder, RecordTransformer& transformer,
                                   std::vector<uint8_t>& stored) -> Status {
    s.meta = IndexEntry{.source_bytes = s.payload.size(), .kind = original_kind(s.payload)};
    if (o.store.active()) {
      Result<bool> transformed = transformer.transform(s.payload, o.store, stored, &s.meta);
      if (!transformed.is_ok()) {
        s.rejected = transformed.status().code() != StatusCode::kEnvironment;  // the image's fault
        return transformed.status();
      }
      if (transformed.value()) s.payload.swap(stored);
    } else if (o.check != ImageCheck::kNone) {
      CHUTE_ASSIGN_OR_RETURN(const ImageInfo info, decoder.read_info(s.payload));
      s.meta.width = static_cast<uint32_t>(info.width);
      s.meta.height = static_cast<uint32_t>(info.height);
    }
    return Status::ok();
  };
  auto reader = [&] {
    ImageDecoder decoder(o.max_pixels);  // one per thread
    RecordTransformer transformer(o.max_pixels);
    std::vector<uint8_t> pixels;  // a kFull check's output, reused
    std::vector<uint8_t> stored;  // a transformed record's payload
    for (;;) {
      const int64_t i = next.fetch_add(1);
      if (i >= end) return;
      {
        std::unique_lock lock(mu);
        space_cv.wait(lock, [&] { return stop || i < written + window; });
        if (stop) return;
      }
      Slot& s = slots[static_cast<size_t>((i - begin) % window)];  // ours until marked ready
      s.rejected = false;
      s.status = retry_environment([&] {
        const ForkGate::Work work;  // each attempt (fork_gate.h)
        try {
          s.rejected = false;
          Status st = source.read_capped(i, s.payload, o.max_file_bytes);
          if (st.is_ok()) {
            st = decoder.check(s.payload, o.check, pixels);
            s.rejected = !st.is_ok();
          }
          if (st.is_ok()) st = describe_or_transform(s, decoder, transformer, stored);
          if (st.is_ok()) {
            s.key = o.key ? o.key(i) : source.name(i);
            s.label = source.label(i);
            if (s.key.size() > UINT32_MAX)
              st = invalid_argument("key longer than 4 GiB");
            else
              s.header = encode_record_header(s.key, s.payload, s.label);
          }
          return st;
        } catch (const std::bad_alloc&) {  // a reader thread must not terminate the process
          std::vector<uint8_t>().swap(s.payload);
          std::vector<uint8_t>().swap(pixels);
          std::vector<uint8_t>().swap(stored);
          return out_of_memory("reading this sample for packing");
        }
      });
      {
        std::lock_guard lock(mu);
        s.ready = true;
      }
      ready_cv.notify_one();
    }
  };
  std::vector<std::jthread> pool;
  // Declared after the pool, so it runs first on every return: stop the readers, then the pool joins.
  struct Stopper {
    std::mutex& mu;
    bool& stop;
    std::condition_variable& cv;
    ~Stopper() {
      {
        std::lock_guard lock(mu);
        stop = true;
      }
      cv.notify_all();
    }
  };
  // With fewer reader threads than asked (a pids limit, ulimit -u or -v) the pack is only slower; with none
  // it fails, naming the limit: the machine's, not the data's (chute.ResourceError).
  if (Status st = start_threads<std::jthread>(
          "chute-pack", 0, threads, [&](int) { reader(); }, pool);
      !st.is_ok()) {
    if (pool.empty())
      return Status(StatusCode::kEnvironment, "cannot start a reader thread to pack " + o.dst + ": " + st.message());
    std::fprintf(stderr, "chute pack: reading on %zu of %d threads: %s\n", pool.size(), threads, st.message().c_str());
  }
  Stopper stopper{mu, stop, space_cv};

  std::vector<std::unique_ptr<AtomicFile>> shards;
  std::vector<ShardInfo> infos;
  std::vector<IndexEntry> entries;
  std::string keys;
  std::vector<PackSkipped> skipped;
  PackProgress state{0, 0, end - begin};
  uint64_t source_bytes = 0;
  static constexpr uint8_t kZeros[kAlignment] = {};
  std::vector<uint8_t> record_headers;  // the open shard's, for its id
  auto close_shard = [&]() -> Status {
    AtomicFile& f = *shards.back();
    ShardInfo& info = infos.back();
    info.file_size = f.size();
    // The id is the shard's content (its records' headers, each holding its record's checksum): a shard
    // from another pack is still refused, and packing the same source twice gives the same bytes.
    info.shard_id = checksum(record_headers);
    ShardHeader h{.shard_id = info.shard_id,
                  .record_count = info.record_count,
                  .file_size = info.file_size,
                  .part = static_cast<uint32_t>(o.part),
                  .number = static_cast<uint32_t>(shards.size() - 1)};
    CHUTE_RETURN_IF_ERROR(f.write_at(0, encode_shard_header(h)));
    return f.finish();
  };
  // Hands sample i's slot back to the readers.
  auto release = [&](Slot& s, int64_t i) {
    {
      std::lock_guard lock(mu);
      s.ready = false;
      written = i + 1;
    }
    space_cv.notify_all();
  };
  auto last_report = std::chrono::steady_clock::now();
  for (int64_t i = begin; i < end; ++i) {
    Slot& s = slots[static_cast<size_t>((i - begin) % window)];
    for (;;) {
      {
        std::unique_lock lock(mu);
        if (ready_cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return s.ready; })) break;
      }
      if (progress && !progress(state)) return Status(StatusCode::kCancelled, "pack cancelled");
      last_report = std::chrono::steady_clock::now();
    }
    if (!s.status.is_ok()) {
      if (!o.skip_bad || !s.rejected || !is_bad_image(s.status))
        return Status(s.status.code(), "sample " + std::to_string(i) + " (" + source.name(i) +
                                           "): " + s.status.message() + (s.rejected ? kRejectedHint : ""));
      skipped.push_back({i, source.name(i), s.status});
      release(s, i);
      continue;
    }
    const size_t rec = record_size(s.key.size(), s.payload.size());
    if (shards.empty() || (infos.back().record_count > 0 && shards.back()->size() + rec > o.shard_size)) {
      if (!shards.empty()) CHUTE_RETURN_IF_ERROR(close_shard());
      const std::string name = shard_file_name(o.part, o.parts, static_cast<int>(shards.size()));
      CHUTE_ASSIGN_OR_RETURN(auto file, AtomicFile::create(o.dst + "/" + name));
      CHUTE_RETURN_IF_ERROR(file->append(std::vector<uint8_t>(kShardHeaderSize, 0)));  // written at close
      shards.push_back(std::move(file));
      infos.push_back({.name = name, .first_sample = entries.size()});
      record_headers.clear();
    }
    AtomicFile& f = *shards.back();
    entries.push_back({.offset = f.size(),
                       .payload_len = s.payload.size(),
                       .label = s.label,
                       .key_offset = keys.size(),
                       .shard = static_cast<uint32_t>(shards.size() - 1),
                       .key_len = static_cast<uint32_t>(s.key.size()),
                       .source_bytes = s.meta.source_bytes,
                       .kind = s.meta.kind,
                       .width = s.meta.width,
                       .height = s.meta.height});
    source_bytes += s.meta.source_bytes;
    keys += s.key;
    CHUTE_RETURN_IF_ERROR(f.append(s.header));
    record_headers.insert(record_headers.end(), s.header.begin(), s.header.end());
    CHUTE_RETURN_IF_ERROR(f.append({reinterpret_cast<const uint8_t*>(s.key.data()), s.key.size()}));
    CHUTE_RETURN_IF_ERROR(f.append(s.payload));
    CHUTE_RETURN_IF_ERROR(f.append({kZeros, rec - kRecordHeaderSize - s.key.size() - s.payload.size()}));
    ++infos.back().record_count;
    ++state.samples;
    state.bytes += s.payload.size();
    release(s, i);
    if (progress && std::chrono::steady_clock::now() - last_report > std::chrono::milliseconds(100)) {
      if (!progress(state)) return Status(StatusCode::kCancelled, "pack cancelled");
      last_report = std::chrono::steady_clock::now();
    }
  }
  if (!shards.empty()) CHUTE_RETURN_IF_ERROR(close_shard());
  // The last report comes before anything is renamed into place, so a cancel there still cancels.
  if (progress && !progress(state)) return Status(StatusCode::kCancelled, "pack cancelled");
  if (state.samples == 0 && !skipped.empty())
    return invalid_argument("nothing to pack: all " + std::to_string(skipped.size()) +
                            " samples failed the image check, e.g. sample " + std::to_string(skipped.front().index) +
                            " (" + skipped.front().name + "): " + skipped.front().status.message());
  PackSummary summary{state.samples, state.bytes, source_bytes, 0, static_cast<int>(shards.size()), std::move(skipped)};
  for (auto& f : shards) {
    CHUTE_RETURN_IF_ERROR(f->rename_into_place());
    summary.file_bytes += f->size();
  }
  const std::vector<uint8_t> index = encode_index(IndexKind::kPacked, infos, entries, keys, classes);
  CHUTE_RETURN_IF_ERROR(write_file_atomically(index_path, index));
  for (auto& f : shards) f->keep();
  summary.file_bytes += index.size();
  CHUTE_RETURN_IF_ERROR(sync_directory(o.dst));
  return summary;
}
}  // namespace

namespace {
Result<PackSummary> merge_locked(const std::string& dst);
}  // namespace

Result<PackSummary> merge_parts(const std::string& dst) {
  if (!std::filesystem::is_directory(dst)) return Status(StatusCode::kNotFound, dst + " is not a directory");
  // Shared with the parts (a retried part may still be writing the same bytes); a whole pack is refused.
  CHUTE_ASSIGN_OR_RETURN(detail::PackDestination destination,
                         detail::PackDestination::lock(dst, detail::PackDestination::Role::kPart, "chute merge"));
  Result<PackSummary> merged = merge_locked(dst);
  // Alone in dst (no part still writing), the lock file goes on release, and after a merge, the temporaries
  // and shards that killed attempts left.
  if (destination.try_exclusive() && merged.is_ok())
    CHUTE_RETURN_IF_ERROR(remove_leftovers(destination, dst, "chute merge"));
  return merged;
}

namespace {
Result<PackSummary> merge_locked(const std::string& dst) {
  const std::string index_path = dst + "/" + kIndexFileName;
  if (std::filesystem::exists(index_path))
    return invalid_argument(dst + " already holds a merged index (" + index_path + ")");
  std::map<int, std::string> found;
  int parts = -1;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dst, ec)) {
    int part = 0, of = 0;
    if (!parse_part_index_name(entry.path().filename().string(), part, of)) continue;
    if (parts != -1 && of != parts)
      return invalid_argument(dst + " holds part indexes of different packs (of " + std::to_string(parts) + " and of " +
                              std::to_string(of) + " parts)");
    parts = of;
    found[part] = entry.path().string();
  }
  if (ec) return io_error("cannot list " + dst + ": " + ec.message());
  if (parts < 1) return Status(StatusCode::kNotFound, dst + " holds no part index (part-*-of-*.chidx) to merge");
  for (int p = 0; p < parts; ++p)
    if (!found.count(p))
      return Status(StatusCode::kNotFound, "part " + std::to_string(p) + " of " + std::to_string(parts) +
                                               " is missing in " + dst + " (its packer has not finished)");

  std::vector<ShardInfo> infos;
  std::vector<IndexEntry> entries;
  std::string keys;
  std::vector<std::string> classes;
  PackSummary summary;
  for (int p = 0; p < parts; ++p) {
    CHUTE_ASSIGN_OR_RETURN(auto file, MappedFile::open(found[p]));
    CHUTE_ASSIGN_OR_RETURN(IndexView view, IndexView::parse(file->bytes(), found[p]));
    if (view.kind() != IndexKind::kPacked) return corrupt_data(found[p] + " is not a chute part index");
    if (p == 0)
      classes = view.classes();
    else if (view.classes() != classes)
      return corrupt_data(found[p] + " lists other classes than part 0: its packer read another source");
    const uint64_t first = entries.size();
    const uint32_t shard_base = static_cast<uint32_t>(infos.size());
    for (ShardInfo info : view.shards()) {
      CHUTE_RETURN_IF_ERROR(open_shard(dst, info, found[p]).status());
      info.first_sample += first;
      summary.file_bytes += info.file_size;
      infos.push_back(std::move(info));
    }
    for (uint64_t i = 0; i < view.size(); ++i) {
      IndexEntry e = view.entry(i);
      const std::string_view key = view.key(e);
      e.key_offset = keys.size();
      e.shard += shard_base;
      keys += key;
      summary.payload_bytes += e.payload_len;
      summary.source_bytes += e.source_bytes;
      entries.push_back(e);
    }
  }
  const std::vector<uint8_t> index = encode_index(IndexKind::kPacked, infos, entries, keys, classes);
  CHUTE_RETURN_IF_ERROR(write_file_atomically(index_path, index));
  CHUTE_RETURN_IF_ERROR(sync_directory(dst));
  for (const auto& [p, path] : found) ::unlink(path.c_str());
  summary.samples = static_cast<int64_t>(entries.size());
  summary.file_bytes += index.size();
  summary.shards = static_cast<int>(infos.size());
  return summary;
}
}  // namespace

}  // namespace chute
