// File-system paths across the binding boundary. A POSIX path is bytes; Python carries it as a str made
// with os.fsdecode (undecodable bytes become lone surrogates, "surrogateescape"). FsPath converts both
// ways exactly as os.fsencode / os.fsdecode do, so a file whose name is not UTF-8 can be named, opened
// and reported, and its str round-trips through os.fsencode to the original bytes. Messages that embed
// paths are decoded the same way (fs_str), never with strict UTF-8.
#pragma once

#include <nanobind/nanobind.h>

#include <string>
#include <string_view>
#include <vector>

namespace chute::py {

// A path from Python (str, bytes or os.PathLike) as the bytes the OS sees.
struct FsPath {
  std::string value;
};

// `bytes` as os.fsdecode would give them: valid UTF-8 as is, other bytes as surrogate escapes.
inline nanobind::str fs_str(std::string_view bytes) {
  PyObject* s = PyUnicode_DecodeFSDefaultAndSize(bytes.data(), static_cast<Py_ssize_t>(bytes.size()));
  if (s == nullptr) throw nanobind::python_error();
  return nanobind::steal<nanobind::str>(s);
}

// A list of fs_str.
inline nanobind::list fs_list(const std::vector<std::string>& items) {
  nanobind::list out;
  for (const std::string& item : items) out.append(fs_str(item));
  return out;
}

inline std::vector<std::string> fs_values(const std::vector<FsPath>& paths) {
  std::vector<std::string> out;
  out.reserve(paths.size());
  for (const FsPath& p : paths) out.push_back(p.value);
  return out;
}

}  // namespace chute::py

NAMESPACE_BEGIN(NB_NAMESPACE)
NAMESPACE_BEGIN(detail)

template <>
struct type_caster<chute::py::FsPath> {
  NB_TYPE_CASTER(chute::py::FsPath, const_name("os.PathLike"))

  bool from_python(handle src, uint32_t, cleanup_list*) noexcept {
    PyObject* path = PyOS_FSPath(src.ptr());  // str or bytes, from os.PathLike too
    if (path == nullptr) {
      PyErr_Clear();
      return false;
    }
    PyObject* encoded = nullptr;
    if (PyUnicode_Check(path))
      encoded = PyUnicode_EncodeFSDefault(path);  // surrogateescape, like os.fsencode
    else if (PyBytes_Check(path))
      encoded = (Py_INCREF(path), path);
    Py_DECREF(path);
    if (encoded == nullptr) {
      PyErr_Clear();
      return false;
    }
    value.value.assign(PyBytes_AS_STRING(encoded), static_cast<size_t>(PyBytes_GET_SIZE(encoded)));
    Py_DECREF(encoded);
    // A NUL would end the path early in every system call: a different file. Refused, as open() does.
    return value.value.find('\0') == std::string::npos;
  }

  static handle from_cpp(const chute::py::FsPath& path, rv_policy, cleanup_list*) noexcept {
    return PyUnicode_DecodeFSDefaultAndSize(path.value.data(), static_cast<Py_ssize_t>(path.value.size()));
  }
};

NAMESPACE_END(detail)
NAMESPACE_END(NB_NAMESPACE)
