#include <algorithm>
#include <cstring>
#include <optional>

#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "chute/decode/image_decoder.h"
#include "chute/io/file_list.h"
#include "chute/io/image_folder.h"
#include "chute/io/packed_source.h"
#include "chute/io/tar_source.h"
#include "chute/pack/pack_writer.h"
#include "fs_path.h"

namespace chute::py {
namespace {

template <typename S>
std::vector<uint64_t> payload_sizes_of(const S& s) {
  std::vector<uint64_t> out(static_cast<size_t>(s.size()));
  for (int64_t i = 0; i < s.size(); ++i) out[static_cast<size_t>(i)] = s.payload_size(i);
  return out;
}

nb::dict summary_dict(const PackSummary& s) {
  nb::dict d;
  d["samples"] = s.samples;
  d["payload_bytes"] = s.payload_bytes;
  d["source_bytes"] = s.source_bytes;
  d["file_bytes"] = s.file_bytes;
  d["shards"] = s.shards;
  nb::list skipped;
  for (const PackSkipped& k : s.skipped)
    skipped.append(nb::make_tuple(k.index, fs_str(k.name), fs_str(k.status.to_string())));
  d["skipped"] = skipped;
  return d;
}

ImageCheck image_check(const std::string& level) {
  if (level == "none") return ImageCheck::kNone;
  if (level == "header") return ImageCheck::kHeader;
  if (level == "full") return ImageCheck::kFull;
  throw nb::value_error(("validate must be 'header', 'full' or 'none', got '" + level + "'").c_str());
}

StoreOptions store_options(int max_side, int max_shorter_side, int quality, const std::string& subsampling,
                           bool keep_original, bool raw, int64_t raw_below, const std::string& raw_compression) {
  StoreOptions o{.max_side = max_side,
                 .max_shorter_side = max_shorter_side,
                 .quality = quality,
                 .keep_original = keep_original,
                 .raw = raw,
                 .raw_below = raw_below};
  if (subsampling == "420")
    o.subsampling = ChromaSubsampling::k420;
  else if (subsampling == "444")
    o.subsampling = ChromaSubsampling::k444;
  else
    throw nb::value_error(("subsampling must be '420' or '444', got '" + subsampling + "'").c_str());
  if (raw_compression == "zstd")
    o.raw_compression = RawCompression::kZstd;
  else if (raw_compression == "none")
    o.raw_compression = RawCompression::kNone;
  else
    throw nb::value_error(("raw_compression must be 'zstd' or 'none', got '" + raw_compression + "'").c_str());
  if (Status st = o.validate(); !st.is_ok()) throw nb::value_error(st.message().c_str());
  return o;
}

// A remote source's stream figures (shard_stream.h), or None for a local source.
nb::object remote_stats_dict(const ShardStream* stream) {
  if (stream == nullptr) return nb::none();
  const RemoteStats r = stream->stats();
  nb::dict d;
  d["shard_fetches"] = r.shard_fetches;
  d["cache_hits"] = r.cache_hits;
  d["reader_waits"] = r.reader_waits;
  d["reader_wait_s"] = r.reader_wait_s;
  d["bytes_received"] = r.bytes_received;
  d["buffers"] = r.buffers;
  d["memory_limit"] = r.memory_limit;
  d["damaged"] = r.damaged;
  d["cache"] = cache_policy_name(stream->cache_policy());
  return d;
}

}  // namespace

void register_packed(nb::module_& m) {
  m.attr("FORMAT_VERSION") = kFormatVersion;
  {
    nb::list kinds;  // RECORD_KINDS[k]: the name of record kind k
    for (uint32_t k = 0; k <= kLastRecordKind; ++k) kinds.append(record_kind_name(static_cast<RecordKind>(k)));
    m.attr("RECORD_KINDS") = kinds;
  }
  m.def(
      "checksum",
      [](nb::bytes data) {
        return checksum({static_cast<const uint8_t*>(data.data()), data.size()});
      },
      nb::arg("data"), "XXH3-64 of the bytes: the checksum of the packed format's records, headers and index.");

  nb::class_<PackedSource, Source>(m, "PackedSource")
      .def_static(
          "open",
          [](const FsPath& path, bool verify) {
            return open_without_gil<PackedSource>(
                [&] { return PackedSource::open(path.value, {.verify_checksums = verify}); });
          },
          nb::arg("path"), nb::arg("verify") = true)
      .def_static(
          "open_remote",
          [](const std::string& url, const PyObjectStore& store, std::optional<PyShardCache> cache, bool verify,
             int fetch_threads) {
            // The index is fetched here: Ctrl-C cancels it.
            return unwrap(call_interruptibly([&] {
              return PackedSource::open_remote(url, store.impl, cache ? cache->impl : nullptr,
                                               {.fetch_threads = fetch_threads}, {.verify_checksums = verify});
            }));
          },
          nb::arg("url"), nb::arg("store"), nb::arg("cache").none(), nb::arg("verify") = true,
          nb::arg("fetch_threads") = ShardStream::Options{}.fetch_threads,
          "A packed dataset in object storage; `cache` None: nothing on disk (cache='none').")
      .def("remote_stats", [](const PackedSource& p) { return remote_stats_dict(p.remote()); })
      .def_prop_ro("classes", [](const PackedSource& p) { return fs_list(p.classes()); })
      .def_prop_ro("directory", [](const PackedSource& p) { return fs_str(p.directory()); })
      .def("payload_sizes", &payload_sizes_of<PackedSource>)
      .def_prop_ro("format_version", &PackedSource::format_version)
      .def("records",
           [](const PackedSource& p) {
             // Per record, as the index records it: kind (an index into RECORD_KINDS), stored width and
             // height (0 when not recorded) and the source file's bytes.
             std::vector<uint32_t> kind, width, height;
             std::vector<uint64_t> source_bytes;
             for (int64_t i = 0; i < p.size(); ++i) {
               const IndexEntry e = p.entry(i);
               kind.push_back(static_cast<uint32_t>(e.kind));
               width.push_back(e.width);
               height.push_back(e.height);
               source_bytes.push_back(e.source_bytes);
             }
             return nb::make_tuple(kind, width, height, source_bytes);
           })
      .def("shards",
           [](const PackedSource& p) {
             nb::list out;
             for (const ShardInfo& s : p.shards())
               out.append(nb::make_tuple(fs_str(s.name), s.record_count, s.file_size, s.first_sample));
             return out;
           })
      .def(
          "verify",
          [](const PackedSource& p, int64_t begin, int64_t end) {
            std::vector<std::pair<int64_t, Status>> bad;
            {
              nb::gil_scoped_release release;
              bad = p.verify(begin, end);
            }
            nb::list out;
            for (auto& [i, st] : bad) out.append(nb::make_tuple(i, fs_str(st.message())));
            return out;
          },
          nb::arg("begin"), nb::arg("end"));

  nb::class_<TarSource, Source>(m, "TarSource")
      .def_static(
          "open",
          [](const std::vector<FsPath>& paths, const FsPath& cache_dir) {
            return open_without_gil<TarSource>(
                [&] { return TarSource::open(fs_values(paths), {.cache_dir = cache_dir.value}); });
          },
          nb::arg("paths"), nb::arg("cache_dir"))
      .def_static(
          "open_remote",
          [](const PyObjectStore& store, std::vector<std::string> urls, std::optional<PyShardCache> cache,
             const FsPath& cache_dir, int fetch_threads) {
            // Expanded and opened interruptibly: Ctrl-C cancels the listing, and the streams of tars without an
            // index.
            return unwrap(call_interruptibly([&]() -> Result<std::shared_ptr<TarSource>> {
              std::vector<ObjectInfo> tars;
              for (const std::string& url : urls) {
                CHUTE_ASSIGN_OR_RETURN(std::vector<ObjectInfo> found, store.impl->expand(url));
                tars.insert(tars.end(), found.begin(), found.end());
              }
              return TarSource::open_remote(tars, store.impl, cache ? cache->impl : nullptr,
                                            {.cache_dir = cache_dir.value}, {.fetch_threads = fetch_threads});
            }));
          },
          nb::arg("store"), nb::arg("urls"), nb::arg("cache").none(), nb::arg("cache_dir"),
          nb::arg("fetch_threads") = ShardStream::Options{}.fetch_threads,
          "Tar shards in object storage (URL patterns, expanded in order); `cache` None: nothing on disk, and "
          "`cache_dir` '' keeps learned indexes in memory.")
      .def("remote_stats", [](const TarSource& t) { return remote_stats_dict(t.remote()); })
      .def_prop_ro("classes", [](const TarSource& t) { return fs_list(t.classes()); })
      .def("payload_sizes", &payload_sizes_of<TarSource>)
      .def(
          "member", [](const TarSource& t, int64_t i) { return fs_str(t.member(checked_index(t, i))); },
          nb::arg("index"))
      .def("tar_paths",
           [](const TarSource& t) {
             nb::list out;
             for (size_t i = 0; i < t.num_tars(); ++i) out.append(fs_str(t.tar_path(i)));
             return out;
           })
      .def("index_paths",
           [](const TarSource& t) {
             nb::list out;
             for (size_t i = 0; i < t.num_tars(); ++i) out.append(fs_str(t.index_path(i)));
             return out;
           })
      .def("skipped", [](const TarSource& t) {
        nb::list out;
        for (const TarSkipped& s : t.skipped())
          out.append(nb::make_tuple(fs_str(s.reason), s.count, fs_list(s.examples)));
        return out;
      });

  nb::class_<FileList, Source>(m, "FileList")
      .def_static(
          "open",
          [](const FsPath& path) { return open_without_gil<FileList>([&] { return FileList::open(path.value); }); },
          nb::arg("path"))
      .def_static(
          "from_entries",
          [](const std::vector<FsPath>& paths, std::vector<int64_t> labels, const FsPath& root) {
            // The samples in memory (chute.DataLoader's folder path): no text file to write and parse back.
            return open_without_gil<FileList>(
                [&] { return FileList::from_entries(root.value, fs_values(paths), std::move(labels)); });
          },
          nb::arg("paths"), nb::arg("labels"), nb::arg("root"))
      .def_prop_ro("root", [](const FileList& f) { return fs_str(f.root()); });

  m.def(
      "read_sample",
      [](const std::shared_ptr<Source>& source, int64_t index) {
        checked_index(*source, index);
        std::vector<uint8_t> out;
        Status st;
        {
          nb::gil_scoped_release release;
          st = source->read(index, out);
        }
        if (!st.is_ok()) throw_status(st);
        return nb::bytes(reinterpret_cast<const char*>(out.data()), out.size());
      },
      nb::arg("source"), nb::arg("index"), "The sample's encoded bytes, as read() gives them to the decoder.");

  m.def(
      "pack",
      [](const std::shared_ptr<Source>& source, const std::vector<FsPath>& class_names, const FsPath& dst,
         uint64_t shard_size, int num_threads, int part, int parts, nb::object progress, const std::string& validate,
         int64_t max_pixels, bool skip_bad, uint64_t max_file_bytes, int max_side, int max_shorter_side, int quality,
         const std::string& subsampling, bool keep_original, bool raw, int64_t raw_below,
         const std::string& raw_compression) {
        const std::vector<std::string> classes = fs_values(class_names);
        PackOptions o;
        o.store = store_options(max_side, max_shorter_side, quality, subsampling, keep_original, raw, raw_below,
                                raw_compression);
        o.check = image_check(validate);
        o.max_pixels = max_pixels;
        o.skip_bad = skip_bad;
        o.dst = dst.value;
        o.shard_size = shard_size;
        o.num_threads = num_threads;
        o.part = part;
        o.parts = parts;
        o.key = [source](int64_t i) { return source->key(i); };
        o.max_file_bytes = max_file_bytes;
        std::optional<nb::python_error> raised;
        // Runs on this thread with the GIL taken back: Ctrl-C and exceptions in the callback cancel.
        auto on_progress = [&](const PackProgress& p) {
          nb::gil_scoped_acquire acquire;
          try {
            if (PyErr_CheckSignals() != 0) throw nb::python_error();
            if (!progress.is_none()) progress(p.samples, p.bytes, p.total_samples);
            return true;
          } catch (nb::python_error& e) {
            raised.emplace(std::move(e));
            return false;
          }
        };
        Result<PackSummary> result = [&] {
          nb::gil_scoped_release release;
          return pack(*source, classes, o, on_progress);
        }();
        if (raised) throw std::move(*raised);
        return summary_dict(unwrap(std::move(result)));
      },
      nb::arg("source"), nb::arg("classes"), nb::arg("dst"), nb::arg("shard_size"), nb::arg("num_threads"),
      nb::arg("part"), nb::arg("parts"), nb::arg("progress").none(), nb::arg("validate") = "header",
      nb::arg("max_pixels") = kDefaultMaxPixels, nb::arg("skip_bad") = false,
      nb::arg("max_file_bytes") = kDefaultMaxFileBytes, nb::arg("max_side") = 0, nb::arg("max_shorter_side") = 0,
      nb::arg("quality") = 90, nb::arg("subsampling") = "420", nb::arg("keep_original") = true, nb::arg("raw") = false,
      nb::arg("raw_below") = 0, nb::arg("raw_compression") = "zstd");

  m.def(
      "check_images",
      [](const std::shared_ptr<Source>& source, int64_t begin, int64_t end, const std::string& validate,
         int64_t max_pixels) {
        // What the loader would refuse among samples [begin, end): (index, reason) for each, in order.
        const ImageCheck level = image_check(validate);
        if (begin < 0 || end > source->size() || begin > end) throw nb::index_error("sample range outside the source");
        std::vector<std::pair<int64_t, std::string>> bad;
        {
          nb::gil_scoped_release release;
          ImageDecoder decoder(max_pixels);
          std::vector<uint8_t> bytes, pixels;
          for (int64_t i = begin; i < end; ++i) {
            Status st = source->read(i, bytes);
            if (st.is_ok()) st = decoder.check(bytes, level, pixels);
            if (!st.is_ok()) bad.emplace_back(i, source->name(i) + ": " + st.to_string());
          }
        }
        nb::list out;  // names as os.fsdecode gives them (not UTF-8 everywhere)
        for (const auto& [index, reason] : bad) out.append(nb::make_tuple(index, fs_str(reason)));
        return out;
      },
      nb::arg("source"), nb::arg("begin"), nb::arg("end"), nb::arg("validate") = "full",
      nb::arg("max_pixels") = kDefaultMaxPixels);

  m.def(
      "decode_rgb",
      [](nb::bytes data, int64_t max_pixels) {
        // The whole image as the loader decodes it (any format chute reads, raw records included), as
        // (RGB bytes, width, height): what `chute inspect` compares against the source's pixels.
        const std::span<const uint8_t> bytes(static_cast<const uint8_t*>(data.data()), data.size());
        std::string rgb;
        ImageInfo info;
        const Status st = [&]() -> Status {
          nb::gil_scoped_release release;
          ImageDecoder decoder(max_pixels);
          std::vector<uint8_t> buffer;
          CHUTE_ASSIGN_OR_RETURN(info, decoder.read_info(bytes));
          CHUTE_ASSIGN_OR_RETURN(const ImageView view,
                                 decoder.decode(bytes, Window{0, 0, info.width, info.height}, buffer));
          const size_t row = static_cast<size_t>(info.width) * 3;
          rgb.resize(row * static_cast<size_t>(info.height));
          for (int y = 0; y < info.height; ++y) std::memcpy(rgb.data() + y * row, view.pixels + y * view.pitch, row);
          return Status::ok();
        }();
        if (!st.is_ok()) throw_status(st);
        return nb::make_tuple(nb::bytes(rgb.data(), rgb.size()), info.width, info.height);
      },
      nb::arg("data"), nb::arg("max_pixels") = kDefaultMaxPixels);

  m.def(
      "merge_parts",
      [](const FsPath& dst) {
        Result<PackSummary> result = [&] {
          nb::gil_scoped_release release;
          return merge_parts(dst.value);
        }();
        return summary_dict(unwrap(std::move(result)));
      },
      nb::arg("dst"));

  m.def(
      "write_tar_indexes",
      [](const std::vector<FsPath>& paths) {
        Status st;
        {
          nb::gil_scoped_release release;
          st = write_tar_indexes(fs_values(paths));
        }
        if (!st.is_ok()) throw_status(st);
      },
      nb::arg("paths"));
}

}  // namespace chute::py
