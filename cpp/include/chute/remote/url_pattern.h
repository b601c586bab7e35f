// Patterns that name many objects at once: bash-like braces, then globs matched against listed keys.
//
// Braces are expanded first, like bash: {a,b,c} (nested, several per pattern) and integer or
// letter ranges {0000..0127} (zero-padded to the wider end when either end has a leading zero, like bash),
// {10..1}, {0..100..5}, {a..e}. Then globs: `*` (any run of characters but '/'), `?` (one character but
// '/'), `[abc]`, `[a-z]`, `[!abc]` / `[^abc]`. A backslash makes the next character literal in both stages.
// Globs need a listing (s3://, gs://, local paths); http(s) takes braces only.
//
// Thread-safety: plain functions on values.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "chute/base/status.h"

namespace chute {

// The most names one pattern may expand to: beyond, expand_braces() refuses (a typo like {0..99999999}).
inline constexpr size_t kMaxBraceExpansions = 1'000'000;

// Every name `pattern` stands for, in bash's order; backslash escapes are kept for match_glob().
// kInvalidArgument naming the pattern on an unbalanced brace, an empty {} or a group of one item with no
// ',' or '..' ({abc}: escape literal braces as \{abc\}), a bad range ({1..b}), or more than `max` names.
Result<std::vector<std::string>> expand_braces(std::string_view pattern, size_t max = kMaxBraceExpansions);

// Whether `s` holds an unescaped glob character (* ? [).
bool has_glob(std::string_view s);

// kInvalidArgument naming the pattern when a '[' is never closed or the pattern ends in a lone backslash.
Status check_glob(std::string_view pattern);

// Whether `text` matches `pattern` (see above; `*` and `?` never match '/'). The pattern must pass
// check_glob(); a malformed one matches nothing.
bool match_glob(std::string_view pattern, std::string_view text);

// The literal text before the first glob character, escapes removed: the prefix to list under.
std::string glob_prefix(std::string_view pattern);

// `s` with its backslash escapes removed (a pattern with no glob, as a literal name).
std::string unescape_pattern(std::string_view s);

}  // namespace chute
