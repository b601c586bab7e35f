#include "chute/base/cancel.h"

namespace chute {
namespace {

thread_local std::shared_ptr<const CancelToken> t_current;

}  // namespace

std::shared_ptr<CancelToken> CancelToken::make(std::shared_ptr<const CancelToken> parent) {
  return std::shared_ptr<CancelToken>(new CancelToken(std::move(parent)));
}

CancelScope::CancelScope(std::shared_ptr<const CancelToken> token) : previous_(std::move(t_current)) {
  t_current = std::move(token);
}

CancelScope::~CancelScope() { t_current = std::move(previous_); }

const std::shared_ptr<const CancelToken>& CancelScope::current() { return t_current; }

Status cancelled_error(const std::string& what) { return Status(StatusCode::kCancelled, what + ": cancelled"); }

}  // namespace chute
