#include "bindings.h"
#include "fs_path.h"

#include <optional>

namespace chute::py {

void throw_status(const Status& status) {
  // Messages name files, whose names need not be UTF-8: decoded as os.fsdecode does, never strictly.
  PyObject* type = PyExc_RuntimeError;
  std::string msg = status.message();
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kUnsupported:
      type = PyExc_ValueError;
      break;
    case StatusCode::kNotFound:
      type = PyExc_FileNotFoundError;
      break;
    case StatusCode::kIoError:
      type = PyExc_OSError;
      break;
    case StatusCode::kEnvironment: {
      // chute.ResourceError: the machine's limit, not the data (one Python type for that meaning).
      nb::object resource_error = nb::module_::import_("chute.errors").attr("ResourceError");
      PyErr_SetObject(resource_error.ptr(), fs_str(msg).ptr());
      throw nb::python_error();
    }
    default:
      msg = status.to_string();
  }
  PyErr_SetObject(type, fs_str(msg).ptr());
  throw nb::python_error();
}

void throw_next_error(const Status& status, const Loader& loader) {
  std::optional<FailedSample> failed = loader.failed_sample();
  if (failed && status.code() != StatusCode::kEnvironment) throw SampleException(std::move(*failed));
  throw_status(status);
}

namespace {

void translate_sample_exception(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const SampleException& e) {
    try {
      const FailedSample& s = e.sample();
      nb::object type = nb::module_::import_("chute.errors").attr("SampleError");
      nb::object error = type(s.index, fs_str(s.path), fs_str(s.status.to_string()), s.epoch);
      PyErr_SetObject(type.ptr(), error.ptr());
    } catch (nb::python_error& failed) {  // building the exception failed: raise that instead
      failed.restore();
    }
  }
}

}  // namespace
}  // namespace chute::py

NB_MODULE(_native, m) {
  m.doc() = "chute's native engine. Use the chute package, not this module.";
  nanobind::register_exception_translator(chute::py::translate_sample_exception);
  chute::py::register_options(m);
  chute::py::register_sources(m);
  chute::py::register_transforms(m);
  chute::py::register_batch_mix(m);
  chute::py::register_loader(m);
  chute::py::register_reference(m);
  chute::py::register_packed(m);
  chute::py::register_formats(m);
  chute::py::register_device(m);
  chute::py::register_gather(m);
  chute::py::register_stats(m);
  chute::py::register_sampler(m);
  chute::py::register_remote(m);
  chute::py::register_object_store(m);
  chute::py::register_cache(m);
}
