// chute._native.ShardCache: the node-local shard cache (shard_cache.h), and cache_objects(): objects fetched
// whole into it (object_fetch.h). Every call releases the GIL; fill and verify callbacks from Python take it
// back while they run (tests drive the cache through them).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>

#include "bindings.h"
#include "chute/remote/object_fetch.h"
#include "chute/remote/shard_cache.h"
#include "fs_path.h"

namespace chute::py {
namespace {

// An entry as get() or peek() returned it: its mapping stays valid (and readable) even after eviction.
struct PyCachedShard {
  std::shared_ptr<const MappedFile> file;
};

nb::object cached_shard(std::shared_ptr<const MappedFile> file) {
  if (!file) return nb::none();
  return nb::cast(PyCachedShard{std::move(file)});
}

// "ValueError: boom", for the Status that carries a Python callback's exception through the core.
std::string describe(const nb::python_error& e) {
  return nb::borrow<nb::str>(nb::handle(e.type()).attr("__name__")).c_str() + std::string(": ") +
         nb::str(e.value()).c_str();
}

nb::object get(PyShardCache& self, const std::string& key, uint64_t size, nb::callable fill,
               std::optional<nb::callable> verify) {
  std::optional<nb::python_error> raised;  // the last exception a callback raised; freed with the GIL held
  const ShardCache::Fill fill_fn = [&](int fd) -> Status {
    nb::gil_scoped_acquire gil;
    try {
      fill(fd);
      return Status::ok();
    } catch (nb::python_error& e) {
      raised.emplace(std::move(e));
      return io_error(describe(*raised));
    }
  };
  ShardCache::Verify verify_fn;
  if (verify) {
    verify_fn = [&](const MappedFile& file) -> Status {
      nb::gil_scoped_acquire gil;
      try {
        // A copy: a view of the mapping could outlive it in Python.
        (*verify)(nb::bytes(reinterpret_cast<const char*>(file.bytes().data()), file.bytes().size()));
        return Status::ok();
      } catch (nb::python_error& e) {
        raised.emplace(std::move(e));
        return corrupt_data(describe(*raised));
      }
    };
  }
  Result<std::shared_ptr<const MappedFile>> result = [&] {
    nb::gil_scoped_release release;
    return self.impl->get(key, size, fill_fn, verify_fn);
  }();
  if (result.is_ok()) return cached_shard(std::move(result).value());
  if (raised) {
    // Ctrl-C and SystemExit inside a callback stay what they are; other exceptions become the cache's
    // error (naming the key, typed as throw_status() types it), raised from them.
    if (!raised->matches(PyExc_Exception)) {
      raised->restore();
      throw nb::python_error();
    }
    try {
      throw_status(result.status());
    } catch (nb::python_error& mapped) {
      PyException_SetCause(mapped.value().ptr(), raised->value().inc_ref().ptr());  // steals the reference
      throw;
    }
  }
  throw_status(result.status());
}

nb::dict entry_dict(const CacheEntry& e) {
  nb::dict d;
  d["key"] = fs_str(e.key);
  d["path"] = fs_str(e.path);
  d["size"] = e.size;
  d["last_used_ns"] = e.last_used_ns;
  return d;
}

}  // namespace

void register_cache(nb::module_& m) {
  nb::class_<PyCachedShard>(m, "CachedShard")
      .def_prop_ro("path", [](const PyCachedShard& s) { return fs_str(s.file->path()); })
      .def("__len__", [](const PyCachedShard& s) { return s.file->bytes().size(); })
      .def(
          "read",
          [](const PyCachedShard& s, uint64_t offset, std::optional<uint64_t> size) {
            const uint64_t total = s.file->bytes().size();
            if (offset > total) throw nb::value_error("offset past the end of the cached shard");
            const uint64_t n = size ? std::min(*size, total - offset) : total - offset;
            std::string out(n, '\0');
            Status st;
            {
              nb::gil_scoped_release release;
              st = s.file->copy(offset, n, reinterpret_cast<uint8_t*>(out.data()));
            }
            if (!st.is_ok()) throw_status(st);
            return nb::bytes(out.data(), out.size());
          },
          nb::arg("offset") = 0, nb::arg("size") = nb::none(),
          "The bytes at [offset, offset + size) (default: to the end).");

  nb::class_<PyShardCache>(m, "ShardCache")
      .def(
          "__init__",
          [](PyShardCache* self, const FsPath& dir, uint64_t limit_bytes) {
            auto cache = open_without_gil<ShardCache>(
                [&] { return ShardCache::open({.dir = dir.value, .limit_bytes = limit_bytes}); });
            new (self) PyShardCache{std::move(cache)};
          },
          nb::arg("dir"), nb::arg("limit_bytes") = 0)
      .def_prop_ro("dir", [](const PyShardCache& c) { return fs_str(c.impl->options().dir); })
      .def_prop_ro("limit_bytes", [](const PyShardCache& c) { return c.impl->options().limit_bytes; })
      .def("get", &get, nb::arg("key"), nb::arg("size"), nb::arg("fill"), nb::arg("verify") = nb::none(),
           "The cached shard for `key` (`size` bytes); on a miss fill(fd) writes it (once across processes). "
           "verify(bytes) raises when the bytes are bad.")
      .def(
          "peek",
          [](PyShardCache& c, const std::string& key, uint64_t size) {
            Result<std::shared_ptr<const MappedFile>> r = [&] {
              nb::gil_scoped_release release;
              return c.impl->peek(key, size);
            }();
            return cached_shard(unwrap(std::move(r)));
          },
          nb::arg("key"), nb::arg("size"))
      .def("list",
           [](const PyShardCache& c) {
             std::vector<CacheEntry> entries;
             {
               nb::gil_scoped_release release;
               entries = c.impl->list();
             }
             nb::list out;
             for (const CacheEntry& e : entries) out.append(entry_dict(e));
             return out;
           })
      .def("clear",
           [](PyShardCache& c) {
             Status st;
             {
               nb::gil_scoped_release release;
               st = c.impl->clear();
             }
             if (!st.is_ok()) throw_status(st);
           })
      .def("bytes",
           [](const PyShardCache& c) {
             nb::gil_scoped_release release;
             return c.impl->bytes();
           })
      .def("stats",
           [](const PyShardCache& c) {
             const CacheStats s = c.impl->stats();
             nb::dict d;
             d["hits"] = s.hits;
             d["misses"] = s.misses;
             d["evictions"] = s.evictions;
             d["bytes_fetched"] = s.bytes_fetched;
             d["waits"] = s.waits;
             return d;
           })
      .def_static(
          "recorded_limit", [](const FsPath& dir) { return ShardCache::recorded_limit(dir.value); }, nb::arg("dir"),
          "The limit_bytes recorded in `dir` by the last cache opened with one; 0 when none.");

  m.def(
      "cache_objects",
      [](const PyObjectStore& store, const PyShardCache& cache, std::vector<std::string> urls) {
        std::unique_ptr<ObjectFetch> fetch =
            unwrap(ObjectFetch::start(store.impl, cache.impl, std::move(urls), ObjectFetch::Options{}));
        // However the wait ends (Ctrl-C included), the fetch is cancelled and its downloads in flight are
        // waited for without the GIL.
        struct Cancel {
          std::unique_ptr<ObjectFetch>& fetch;
          ~Cancel() {
            nb::gil_scoped_release release;
            fetch.reset();
          }
        } cancel{fetch};
        return unwrap(wait_interruptibly([&](std::chrono::milliseconds slice) { return fetch->wait(slice); }));
      },
      nb::arg("store"), nb::arg("cache"), nb::arg("urls"),
      "Each object whole in the shard cache (ObjectFetch): their local paths, in order. Ctrl-C cancels.");
}

}  // namespace chute::py
