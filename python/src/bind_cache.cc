// chute._native.ShardCache: the node-local shard cache (shard_cache.h). Every call releases the GIL; a fill
// callback from Python takes it back while it runs (tests drive the cache through it).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>

#include "bindings.h"
#include "chute/base/buffer_pool.h"
#include "chute/remote/shard_cache.h"
#include "fs_path.h"

namespace chute::py {
namespace {

// An object as get() returned it: its bytes in memory of its own.
struct PyCachedShard {
  std::shared_ptr<const PageBuffer> buffer;
  uint64_t size = 0;
  bool from_cache = false;
};

// "ValueError: boom", for the Status that carries a Python callback's exception through the core.
std::string describe(const nb::python_error& e) {
  return nb::borrow<nb::str>(nb::handle(e.type()).attr("__name__")).c_str() + std::string(": ") +
         nb::str(e.value()).c_str();
}

PyCachedShard get(PyShardCache& self, const std::string& key, uint64_t size, nb::callable fill) {
  auto buffer = std::make_shared<PageBuffer>(unwrap(PageBuffer::allocate(size)));
  std::optional<nb::python_error> raised;  // the exception the callback raised; freed with the GIL held
  const ShardCache::Fill fill_fn = [&](std::span<uint8_t> dst) -> Status {
    nb::gil_scoped_acquire gil;
    // A writable view of the memory, released when the callback returns (the memory is not Python's).
    nb::object view = nb::steal(
        PyMemoryView_FromMemory(reinterpret_cast<char*>(dst.data()), static_cast<Py_ssize_t>(dst.size()), PyBUF_WRITE));
    try {
      fill(view);
      view.attr("release")();
      return Status::ok();
    } catch (nb::python_error& e) {
      view.attr("release")();
      raised.emplace(std::move(e));
      return io_error(describe(*raised));
    }
  };
  Result<ShardCache::Got> result = [&] {
    nb::gil_scoped_release release;
    return self.impl->get(key, buffer->span().first(size), fill_fn);
  }();
  if (result.is_ok()) return PyCachedShard{std::move(buffer), size, *result == ShardCache::Got::kHit};
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
      .def_prop_ro("from_cache", [](const PyCachedShard& s) { return s.from_cache; })
      .def("__len__", [](const PyCachedShard& s) { return s.size; })
      .def(
          "read",
          [](const PyCachedShard& s, uint64_t offset, std::optional<uint64_t> size) {
            if (offset > s.size) throw nb::value_error("offset past the end of the cached shard");
            const uint64_t n = size ? std::min(*size, s.size - offset) : s.size - offset;
            return nb::bytes(reinterpret_cast<const char*>(s.buffer->data()) + offset, n);
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
      .def("get", &get, nb::arg("key"), nb::arg("size"), nb::arg("fill"),
           "The object for `key` (`size` bytes), read from its entry (checked) or, on a miss, filled by "
           "fill(view) writing all of the writable memoryview `view` (once across processes), then written.")
      .def(
          "entry_path", [](const PyShardCache& c, const std::string& key) { return fs_str(c.impl->entry_path(key)); },
          nb::arg("key"))
      .def_static("entry_bytes", &ShardCache::entry_bytes, nb::arg("size"),
                  "Bytes an entry of `size` bytes takes on disk (its checksum trailer included).")
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
             d["damaged"] = s.damaged;
             d["write_errors"] = s.write_errors;
             return d;
           })
      .def_static(
          "recorded_limit", [](const FsPath& dir) { return ShardCache::recorded_limit(dir.value); }, nb::arg("dir"),
          "The limit_bytes recorded in `dir` by the last cache opened with one; 0 when none.");
}

}  // namespace chute::py
