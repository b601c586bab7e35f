// Status and Result<T>: how the core reports recoverable errors.
//
// A data error (a corrupt file, an unreadable record) is a Status that travels with its sample to the
// loader's error policy. A broken invariant is a bug and aborts instead (CHUTE_CHECK).
// Thread-safety: values; safe to copy and move between threads.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace chute {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the caller asked for something impossible
  kNotFound,         // a file or directory that is not there
  kIoError,          // the OS refused a read
  kCorruptData,      // bytes that do not decode
  kUnsupported,      // valid data of a kind chute does not handle
  kResourceExhausted,
  kCancelled,
  kDeadlineExceeded,  // a wait ended before its result was ready; try again
  // The machine, not the data: out of descriptors, memory or threads, or a storage failure that outlasted
  // its retries (environment.h). Never skipped or quarantined as a bad sample.
  kEnvironment,
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "CorruptData: Premature end of JPEG file"
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status corrupt_data(std::string m) { return {StatusCode::kCorruptData, std::move(m)}; }
inline Status io_error(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status environment_error(std::string m) { return {StatusCode::kEnvironment, std::move(m)}; }

// A value or the Status that explains its absence.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design, like arrow::Result
  Result(Status status) : status_(std::move(status)) {
    if (status_.is_ok()) std::abort();  // an ok Status carries no value: a bug in the caller
  }
  bool is_ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  const T& value() const& { return *value_; }
  T* operator->() { return &*value_; }
  T& operator*() { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace chute

#define CHUTE_CONCAT_INNER(a, b) a##b
#define CHUTE_CONCAT(a, b) CHUTE_CONCAT_INNER(a, b)

// Return the Status from the enclosing function if `expr` is not ok.
#define CHUTE_RETURN_IF_ERROR(expr) \
  do {                              \
    ::chute::Status _st = (expr);   \
    if (!_st.is_ok()) return _st;   \
  } while (0)

// `CHUTE_ASSIGN_OR_RETURN(auto x, f());` binds x to the value or returns the error.
#define CHUTE_ASSIGN_OR_RETURN(lhs, expr) CHUTE_ASSIGN_OR_RETURN_IMPL(CHUTE_CONCAT(_res_, __LINE__), lhs, expr)
#define CHUTE_ASSIGN_OR_RETURN_IMPL(res, lhs, expr) \
  auto res = (expr);                                \
  if (!res.is_ok()) return res.status();            \
  lhs = std::move(res).value()

// A broken invariant: a bug in chute, never a data error. Aborts with the location.
#define CHUTE_CHECK(cond)                                                                    \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "chute: check failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)
