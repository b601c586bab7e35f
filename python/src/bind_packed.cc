#include <algorithm>
#include <chrono>
#include <numeric>
#include <optional>
#include <random>
#include <thread>

#include <nanobind/stl/function.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "chute/file_list.h"
#include "chute/image_folder.h"
#include "chute/pack_writer.h"
#include "chute/packed_source.h"
#include "chute/tar_source.h"
#include "chute/thread.h"

namespace chute::py {
namespace {




template <typename S>
std::vector<uint64_t> payload_sizes_of(const S& s) {
  std::vector<uint64_t> out(static_cast<size_t>(s.size()));
  for (int64_t i = 0; i < s.size(); ++i) out[static_cast<size_t>(i)] = s.payload_size(i);
  return out;
}

// The key stored with each packed record: a path relative to the source's root, or the tar member.
std::function<std::string(int64_t)> key_function(const std::shared_ptr<Source>& source) {
  auto strip = [](std::string root) {
    return [root = root + "/"](const std::string& name) {
      return name.starts_with(root) ? name.substr(root.size()) : name;
    };
  };
  if (auto folder = std::dynamic_pointer_cast<ImageFolder>(source))
    return [folder, f = strip(folder->root())](int64_t i) { return f(folder->name(i)); };
  if (auto list = std::dynamic_pointer_cast<FileList>(source))
    return [list, f = strip(list->root())](int64_t i) { return f(list->name(i)); };
  if (auto tar = std::dynamic_pointer_cast<TarSource>(source)) return [tar](int64_t i) { return tar->member(i); };
  return [source](int64_t i) { return source->name(i); };
}

nb::dict summary_dict(const PackSummary& s) {
  nb::dict d;
  d["samples"] = s.samples;
  d["payload_bytes"] = s.payload_bytes;
  d["file_bytes"] = s.file_bytes;
  d["shards"] = s.shards;
  return d;
}

}  // namespace

void register_packed(nb::module_& m) {
  m.attr("FORMAT_VERSION") = kFormatVersion;
  m.def(
      "checksum", [](nb::bytes data) { return checksum({static_cast<const uint8_t*>(data.data()), data.size()}); },
      nb::arg("data"), "XXH3-64 of the bytes: the checksum of the packed format's records, headers and index.");

  nb::class_<PackedSource, Source>(m, "PackedSource")
      .def_static(
          "open",
          [](const std::string& path, bool verify) {
            return open_without_gil<PackedSource>([&] { return PackedSource::open(path, {.verify_checksums = verify}); });
          },
          nb::arg("path"), nb::arg("verify") = true)
      .def_prop_ro("classes", &PackedSource::classes)
      .def_prop_ro("directory", &PackedSource::directory)
      .def("payload_sizes", &payload_sizes_of<PackedSource>)
      .def("shards",
           [](const PackedSource& p) {
             std::vector<std::tuple<std::string, uint64_t, uint64_t, uint64_t>> out;
             for (const ShardInfo& s : p.shards()) out.emplace_back(s.name, s.record_count, s.file_size, s.first_sample);
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
            std::vector<std::pair<int64_t, std::string>> out;
            for (auto& [i, st] : bad) out.emplace_back(i, st.message());
            return out;
          },
          nb::arg("begin"), nb::arg("end"));

  nb::class_<TarSource, Source>(m, "TarSource")
      .def_static(
          "open",
          [](const std::vector<std::string>& paths, bool write_index) {
            return open_without_gil<TarSource>([&] { return TarSource::open(paths, {.write_index = write_index}); });
          },
          nb::arg("paths"), nb::arg("write_index") = true)
      .def_prop_ro("classes", &TarSource::classes)
      .def("payload_sizes", &payload_sizes_of<TarSource>)
      .def(
          "member", [](const TarSource& t, int64_t i) { return t.member(checked_index(t, i)); }, nb::arg("index"))
      .def("tar_paths", [](const TarSource& t) {
        std::vector<std::string> out;
        for (size_t i = 0; i < t.num_tars(); ++i) out.push_back(t.tar_path(i));
        return out;
      });

  nb::class_<FileList, Source>(m, "FileList")
      .def_static(
          "open", [](const std::string& path) { return open_without_gil<FileList>([&] { return FileList::open(path); }); },
          nb::arg("path"))
      .def_prop_ro("root", &FileList::root);

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
      "read_all",
      [](const std::shared_ptr<Source>& source, int num_threads, bool shuffle) {
        // Reads every sample once on `num_threads` threads (no decode): the source's own throughput. With
        // `shuffle`, in a fixed random order, as a shuffled epoch reads them.
        nb::gil_scoped_release release;
        std::vector<int64_t> order(static_cast<size_t>(source->size()));
        std::iota(order.begin(), order.end(), 0);
        if (shuffle) std::shuffle(order.begin(), order.end(), std::mt19937_64(0));
        std::atomic<int64_t> next{0}, bytes{0}, failed{0};
        const auto start = std::chrono::steady_clock::now();
        Status started;
        {
          std::vector<std::jthread> pool;
          started = start_threads<std::jthread>("chute-read", 0, std::max(1, num_threads), [&](int) {
            std::vector<uint8_t> out;
            for (int64_t k; (k = next.fetch_add(1)) < source->size();) {
              if (source->read(order[static_cast<size_t>(k)], out).is_ok()) bytes += static_cast<int64_t>(out.size());
              else ++failed;
            }
          }, pool);
          if (pool.empty()) {
            nb::gil_scoped_acquire acquire;
            throw_status(started);
          }
        }
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        return std::make_tuple(seconds, bytes.load(), failed.load());
      },
      nb::arg("source"), nb::arg("num_threads"), nb::arg("shuffle") = false);

  m.def(
      "pack",
      [](const std::shared_ptr<Source>& source, const std::vector<std::string>& classes, const std::string& dst,
         uint64_t shard_size, int num_threads, int part, int parts, nb::object progress) {
        PackOptions o;
        o.dst = dst;
        o.shard_size = shard_size;
        o.num_threads = num_threads;
        o.part = part;
        o.parts = parts;
        o.key = key_function(source);
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
      nb::arg("part"), nb::arg("parts"), nb::arg("progress").none());

  m.def(
      "merge_parts",
      [](const std::string& dst) {
        Result<PackSummary> result = [&] {
          nb::gil_scoped_release release;
          return merge_parts(dst);
        }();
        return summary_dict(unwrap(std::move(result)));
      },
      nb::arg("dst"));

  m.def(
      "write_tar_indexes",
      [](const std::vector<std::string>& paths) {
        Status st;
        {
          nb::gil_scoped_release release;
          st = write_tar_indexes(paths);
        }
        if (!st.is_ok()) throw_status(st);
      },
      nb::arg("paths"));
}

}  // namespace chute::py
