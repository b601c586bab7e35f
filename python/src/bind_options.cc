// The options structs (LoaderOptions, DecodeOptions, DeliveryOptions) as Python classes constructed by
// keyword: chute._native.LoaderOptions(batch_size=256, shuffle=True, decode=DecodeOptions(...)). Each
// keyword sets the struct's field; one left out keeps the struct's default. Integers are converted
// against the field's OptionRange (a TypeError or ValueError naming the option and its range, the same
// text as validate()'s), so the defaults and the ranges are written once, in the C++ headers.
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "chute/base/cores.h"
#include "chute/engine/loader.h"
#include "chute/gpu/delivery.h"

namespace chute::py {
namespace {

[[noreturn]] void raise(PyObject* type, const std::string& message) {
  PyErr_SetString(type, message.c_str());
  throw nb::python_error();
}

// `v` as an integer option: an int (numpy's too; not a bool) in `r`, or r.zero_means's choice (0).
template <typename V>
V to_int(nb::handle v, const OptionRange& r) {
  if (!r.zero_means.empty()) {
    if (r.zero_means == "None" && v.is_none()) return 0;
    if (r.zero_means == "'auto'" && nb::isinstance<nb::str>(v) && nb::cast<std::string>(v) == "auto") return 0;
  }
  const std::string shown = nb::cast<std::string>(nb::repr(v));
  if (nb::isinstance<nb::str>(v) && !r.zero_means.empty()) raise(PyExc_ValueError, r.message(shown));  // a wrong choice
  if (PyBool_Check(v.ptr()) || PyFloat_Check(v.ptr()) || !PyIndex_Check(v.ptr())) {
    const std::string type = nb::cast<std::string>(nb::getattr(v.type(), "__name__"));
    raise(PyExc_TypeError, r.message(shown + " (" + type + ")"));
  }
  nb::object i = nb::steal(PyNumber_Index(v.ptr()));
  if (!i.is_valid()) throw nb::python_error();
  int overflow = 0;
  const long long s = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
  if (overflow == 0 && r.contains(static_cast<int64_t>(s))) return static_cast<V>(s);
  if (overflow > 0) {
    const unsigned long long u = PyLong_AsUnsignedLongLong(i.ptr());
    if (PyErr_Occurred() != nullptr)
      PyErr_Clear();
    else if (r.contains(static_cast<uint64_t>(u)))
      return static_cast<V>(u);
  }
  raise(PyExc_ValueError, r.message(nb::cast<std::string>(nb::str(i))));
}

// `v` as a real option: an int or a float (numpy's too), not a bool or a str.
double to_real(nb::handle v, const char* name) {
  if (PyBool_Check(v.ptr()) || nb::isinstance<nb::str>(v) || !PyNumber_Check(v.ptr())) {
    const std::string type = nb::cast<std::string>(nb::getattr(v.type(), "__name__"));
    raise(PyExc_TypeError,
          std::string(name) + " must be a number, got " + nb::cast<std::string>(nb::repr(v)) + " (" + type + ")");
  }
  const double d = PyFloat_AsDouble(v.ptr());
  if (d == -1.0 && PyErr_Occurred() != nullptr) throw nb::python_error();
  return d;
}

bool to_bool(nb::handle v) {
  const int truth = PyObject_IsTrue(v.ptr());
  if (truth < 0) throw nb::python_error();
  return truth != 0;
}

// A text option (dtype, on_error) through its parser; a non-str is shown by its repr.
template <typename T>
T to_choice(nb::handle v, Result<T> (*parse)(std::string_view)) {
  return unwrap(parse(nb::isinstance<nb::str>(v) ? nb::cast<std::string>(v) : nb::cast<std::string>(nb::repr(v))));
}

// An options class: keyword construction over the struct's defaults, a read-write property per field, and
// pickling and equality by field name (the state is {name: value}; a name the state lacks keeps its default,
// so a field added later reads older states), so that the options travel whole to wherever the engine runs
// (chute.ray.RemoteLoader's actors). A pickled LoaderOptions keeps no host allocator: a lent pinned pool
// is this process's, and a copy allocates its ring from the heap unless lent one again.
template <typename T>
class OptionsClass {
 public:
  using Set = std::function<void(T&, nb::handle)>;
  struct Field {
    Set set;
    // An integer field whose 0 stands for 'auto' or None (OptionRange::zero_means): its state says that,
    // as a keyword would, since its setter takes no 0.
    std::string_view zero_means;
  };
  using Setters = std::map<std::string, Field>;

  OptionsClass(nb::module_& m, const char* name, const char* doc)
      : cls_(m, name, doc), setters_(std::make_shared<Setters>()) {
    const std::string type(name);
    cls_.def(
        "__init__",
        [setters = setters_, type](T* self, nb::kwargs kwargs) { new (self) T(make(*setters, type, kwargs)); },
        "Keyword arguments set the options of the same name; the others keep their defaults.");
    cls_.def("__getstate__", [fields = setters_](nb::handle self) { return state(*fields, self); });
    cls_.def("__setstate__",
             [setters = setters_, type](T& self, nb::dict state) { new (&self) T(make(*setters, type, state)); });
    cls_.def(
        "__eq__",
        [fields = setters_](nb::handle self, nb::handle other) -> nb::object {
          if (!other.type().is(self.type())) return nb::borrow(Py_NotImplemented);
          return nb::bool_(state(*fields, self).equal(state(*fields, other)));
        },
        nb::is_operator());
    cls_.attr("__hash__") = nb::none();  // mutable: equal by value, not hashable
    cls_.def("__repr__", [fields = setters_, type](nb::handle self) {
      std::string out = type + "(";
      bool first = true;
      for (const auto& [k, _] : *fields) {
        out += (first ? "" : ", ") + k + "=" + nb::cast<std::string>(nb::repr(nb::getattr(self, k.c_str())));
        first = false;
      }
      return out + ")";
    });
  }

  template <typename Get>
  OptionsClass& field(const char* name, Get get, Set set, std::string_view zero_means = {}) {
    (*setters_)[name] = Field{set, zero_means};
    cls_.def_prop_rw(name, get, [set](T& t, nb::handle v) { set(t, v); });
    return *this;
  }

  // An integer field, converted against its range: `at(options)` is the field.
  template <typename At>
  OptionsClass& integer(const OptionRange& r, At at) {
    using V = std::remove_reference_t<decltype(at(std::declval<T&>()))>;
    return field(
        r.name.data(), [at](T& t) { return at(t); },  // a literal: null-terminated
        [at, r](T& t, nb::handle v) { at(t) = to_int<V>(v, r); }, r.zero_means);
  }

  template <typename At>
  OptionsClass& boolean(const char* name, At at) {
    return field(
        name, [at](T& t) { return at(t); }, [at](T& t, nb::handle v) { at(t) = to_bool(v); });
  }

  nb::class_<T>& cls() { return cls_; }

 private:
  // The struct's defaults, then each (name, value) of `items` (keyword arguments, or a pickled state).
  static T make(const Setters& setters, const std::string& type, nb::dict items) {
    T options;
    for (auto [key, value] : items) {
      const std::string k = nb::cast<std::string>(key);
      auto it = setters.find(k);
      if (it == setters.end()) raise(PyExc_TypeError, type + "() got an unexpected keyword argument '" + k + "'");
      it->second.set(options, value);
    }
    return options;
  }

  static nb::dict state(const Setters& fields, nb::handle self) {
    nb::dict out;
    for (const auto& [k, f] : fields) {
      nb::object value = nb::getattr(self, k.c_str());
      if (!f.zero_means.empty() && PyLong_Check(value.ptr()) && nb::cast<int64_t>(value) == 0)
        value = f.zero_means == "None" ? nb::none() : nb::object(nb::str("auto"));
      out[k.c_str()] = value;
    }
    return out;
  }

  nb::class_<T> cls_;
  std::shared_ptr<Setters> setters_;
};

}  // namespace

void register_options(nb::module_& m) {
  m.def(
      "available_cores",
      [](std::optional<std::string> cgroup_root, std::optional<std::string> self_cgroup) {
        if (!cgroup_root && !self_cgroup) return available_cores();
        CgroupPaths paths;
        if (cgroup_root) paths.root = *cgroup_root;
        if (self_cgroup) paths.self = *self_cgroup;
        return available_cores(paths);
      },
      nb::arg("cgroup_root") = nb::none(), nb::arg("self_cgroup") = nb::none(),
      "CPUs this process may keep busy: its affinity mask, within its cgroup's CPU quota (cpu.max, "
      "cpu.cfs_quota_us), at least 1 (chute/cores.h). The arguments point at a fake cgroup tree (tests).");

  OptionsClass<DecodeOptions>(m, "DecodeOptions", "How images are decoded (chute/processor.h).")
      .integer(DecodeOptions::kMaxPixels, [](DecodeOptions& o) -> int64_t& { return o.max_pixels; })
      .integer(DecodeOptions::kMaxFileBytes, [](DecodeOptions& o) -> uint64_t& { return o.max_file_bytes; })
      .boolean("apply_exif_orientation", [](DecodeOptions& o) -> bool& { return o.apply_exif_orientation; })
      .field(
          "decode", [](DecodeOptions& o) { return std::string(decode_mode_name(o.mode)); },
          [](DecodeOptions& o, nb::handle v) { o.mode = to_choice(v, parse_decode_mode); })
      .field(
          "reducing_gap", [](DecodeOptions& o) { return o.reducing_gap; },
          [](DecodeOptions& o, nb::handle v) {
            o.reducing_gap = to_real(v, "reducing_gap");
            if (const Status st = DecodeOptions::check_reducing_gap(o.reducing_gap); !st.is_ok()) throw_status(st);
          })
      .boolean("validate_full", [](DecodeOptions& o) -> bool& { return o.validate_full; })
      .boolean("accept_truncated", [](DecodeOptions& o) -> bool& { return o.accept_truncated; });

  OptionsClass<DeliveryOptions>(m, "DeliveryOptions",
                                "GPU delivery: copies ahead, device memory (chute/device_slots.h).")
      .integer(DeliveryOptions::kDevicePrefetch, [](DeliveryOptions& o) -> int& { return o.device_prefetch; })
      .integer(DeliveryOptions::kMaxDeviceMemory, [](DeliveryOptions& o) -> size_t& { return o.max_device_memory; });

  using L = LoaderOptions;
  OptionsClass<L> loader(m, "LoaderOptions",
                         "Everything a Loader is built from (chute/loader.h). 0 stands for 'auto' (num_threads, "
                         "prefetch) and None (max_threads): the defaults.");
  loader.integer(L::kBatchSize, [](L& o) -> int64_t& { return o.batch_size; })
      .boolean("shuffle", [](L& o) -> bool& { return o.shuffle; })
      .integer(L::kSeed, [](L& o) -> uint64_t& { return o.seed; })
      .boolean("drop_last", [](L& o) -> bool& { return o.drop_last; })
      .integer(L::kNumThreads, [](L& o) -> int& { return o.num_threads; })
      .integer(L::kMaxThreads, [](L& o) -> int& { return o.max_threads; })
      .integer(L::kPrefetch, [](L& o) -> int& { return o.prefetch; })
      .integer(L::kMaxMemory, [](L& o) -> size_t& { return o.max_memory; })
      .integer(L::kMaxRingBytes, [](L& o) -> size_t& { return o.max_ring_bytes; })
      .integer(L::kExtraBuffers, [](L& o) -> int& { return o.extra_buffers; })
      .integer(L::kRank, [](L& o) -> int64_t& { return o.shard.rank; })
      .integer(L::kWorldSize, [](L& o) -> int64_t& { return o.shard.world_size; })
      .boolean("even_split", [](L& o) -> bool& { return o.shard.even_split; })
      .field(
          "order", [](L& o) { return std::string(sample_order_name(o.order)); },
          [](L& o, nb::handle v) { o.order = to_choice(v, parse_sample_order); })
      .integer(L::kShardWindow, [](L& o) -> int64_t& { return o.shard_window; })
      .field(
          "channels_last", [](L& o) { return o.output.layout == Layout::kNHWC; },
          [](L& o, nb::handle v) { o.output.layout = to_bool(v) ? Layout::kNHWC : Layout::kNCHW; })
      .field(
          "dtype", [](L& o) { return std::string(dtype_name(o.output.dtype)); },
          [](L& o, nb::handle v) { o.output.dtype = to_choice(v, parse_dtype); })
      .field(
          "on_error", [](L& o) { return std::string(error_policy_name(o.on_error)); },
          [](L& o, nb::handle v) { o.on_error = to_choice(v, parse_error_policy); })
      .field(
          "cpu_affinity", [](L& o) { return o.cpu_affinity; },
          [](L& o, nb::handle v) { o.cpu_affinity = nb::cast<std::optional<std::vector<int>>>(v); })
      .field(
          "decode", [](L& o) -> DecodeOptions& { return o.decode; },
          [](L& o, nb::handle v) { o.decode = nb::cast<DecodeOptions>(v); });
  loader.cls()
      .def_prop_ro("pinned", [](const L& o) { return o.host_allocator->pinned(); })
      // GPU delivery: pinned ring buffers from the device, and room for the host batches whose copies are
      // in flight (DeviceLoader::prepare; the DeviceLoader is then built with the same DeliveryOptions).
      .def(
          "prepare_delivery",
          [](L& o, const PyDevice& device, const DeliveryOptions& delivery) {
            DeviceLoader::prepare(o, *device.impl, delivery);
          },
          nb::arg("device"), nb::arg("delivery"))
      // pin_memory: ring buffers lent by torch's caching host allocator, handed over with each batch.
      .def(
          "lend_blocks", [](L& o, const PyBlockPool& pool) { o.host_allocator = pool.impl; }, nb::arg("pool"))
      .def("validate", [](const L& o) {
        Status st = o.validate();
        if (!st.is_ok()) throw_status(st);
      });
}

}  // namespace chute::py
