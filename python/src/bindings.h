// Shared by the binding files: one register_<area>() per file, and the translation of a core Status into
// the Python exception a PyTorch user expects.
#pragma once

#include <nanobind/nanobind.h>

#include "chute/source.h"
#include "chute/status.h"

namespace chute::py {

namespace nb = nanobind;

// InvalidArgument -> ValueError, NotFound -> FileNotFoundError, IoError -> OSError,
// Unsupported -> ValueError, everything else -> RuntimeError.
[[noreturn]] void throw_status(const Status& status);

template <typename T>
T unwrap(Result<T> result) {
  if (!result.is_ok()) throw_status(result.status());
  return std::move(result).value();
}

// The index, or IndexError when it is outside the source (bind_sources.cc).
int64_t checked_index(const Source& s, int64_t index);

void register_sources(nb::module_& m);
void register_transforms(nb::module_& m);
void register_loader(nb::module_& m);
void register_reference(nb::module_& m);
void register_packed(nb::module_& m);

}  // namespace chute::py
