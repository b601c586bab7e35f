#include "bindings.h"

namespace chute::py {

void throw_status(const Status& status) {
  const std::string& msg = status.message();
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kUnsupported:
      throw nb::value_error(msg.c_str());
    case StatusCode::kNotFound:
      PyErr_SetString(PyExc_FileNotFoundError, msg.c_str());
      throw nb::python_error();
    case StatusCode::kIoError:
      PyErr_SetString(PyExc_OSError, msg.c_str());
      throw nb::python_error();
    case StatusCode::kEnvironment: {
      // chute.ResourceError: the machine's limit, not the data (one Python type for that meaning).
      nb::object type = nb::module_::import_("chute.errors").attr("ResourceError");
      PyErr_SetString(type.ptr(), msg.c_str());
      throw nb::python_error();
    }
    default:
      throw std::runtime_error(status.to_string());
  }
}

}  // namespace chute::py

NB_MODULE(_native, m) {
  m.doc() = "chute's native engine. Use the chute package, not this module.";
  chute::py::register_sources(m);
  chute::py::register_transforms(m);
  chute::py::register_loader(m);
  chute::py::register_reference(m);
  chute::py::register_packed(m);
  chute::py::register_device(m);
  chute::py::register_gather(m);
}
