#include "chute/remote/url_pattern.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <utility>
#include <variant>

namespace chute {

namespace {

struct Seq;
struct Range {
  int64_t first = 0, last = 0, step = 1;
  size_t width = 0;  // zero-pad to this many characters (0: no padding)
  bool letters = false;
  size_t count() const { return static_cast<size_t>((first <= last ? last - first : first - last) / step) + 1; }
  std::string at(size_t k) const {
    const int64_t v = first <= last ? first + static_cast<int64_t>(k) * step : first - static_cast<int64_t>(k) * step;
    if (letters) return std::string(1, static_cast<char>(v));
    std::string digits = std::to_string(v < 0 ? -v : v);
    const size_t sign = v < 0 ? 1 : 0;
    if (width > digits.size() + sign) digits.insert(0, width - digits.size() - sign, '0');
    return (v < 0 ? "-" : "") + digits;
  }
};
struct Group {
  std::vector<Seq> alternatives;
};
using Node = std::variant<std::string, Group, Range>;
struct Seq {
  std::vector<Node> nodes;
};

class BraceParser {
 public:
  BraceParser(std::string_view pattern, size_t max) : pattern_(pattern), max_(max) {}

  Result<Seq> parse(std::string_view s) {
    Seq seq;
    std::string literal;
    for (size_t i = 0; i < s.size(); ++i) {
      const char c = s[i];
      if (c == '\\') {
        if (i + 1 >= s.size()) return error("ends in a lone backslash");
        literal += s.substr(i, 2);  // kept: the glob stage honours it too
        ++i;
      } else if (c == '}') {
        return error("has a '}' with no '{' before it");
      } else if (c == '{') {
        const size_t close = matching_close(s, i);
        if (close == std::string_view::npos) return error("has a '{' that is never closed");
        if (!literal.empty()) seq.nodes.emplace_back(std::move(literal));
        literal.clear();
        CHUTE_ASSIGN_OR_RETURN(Node group, parse_group(s.substr(i + 1, close - i - 1)));
        seq.nodes.push_back(std::move(group));
        i = close;
      } else {
        literal += c;
      }
    }
    if (!literal.empty()) seq.nodes.emplace_back(std::move(literal));
    return seq;
  }

  Status error(const std::string& why) const {
    return invalid_argument("bad pattern '" + std::string(pattern_) + "': it " + why);
  }

  size_t max() const { return max_; }

 private:
  static size_t matching_close(std::string_view s, size_t open) {
    int depth = 0;
    for (size_t i = open; i < s.size(); ++i) {
      if (s[i] == '\\') {
        ++i;
      } else if (s[i] == '{') {
        ++depth;
      } else if (s[i] == '}' && --depth == 0) {
        return i;
      }
    }
    return std::string_view::npos;
  }

  // Splits at the commas outside nested braces.
  static std::vector<std::string_view> split_top(std::string_view s) {
    std::vector<std::string_view> parts;
    int depth = 0;
    size_t start = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\\') {
        ++i;
      } else if (s[i] == '{') {
        ++depth;
      } else if (s[i] == '}') {
        --depth;
      } else if (s[i] == ',' && depth == 0) {
        parts.push_back(s.substr(start, i - start));
        start = i + 1;
      }
    }
    parts.push_back(s.substr(start));
    return parts;
  }

  Result<Node> parse_group(std::string_view inner) {
    const std::vector<std::string_view> parts = split_top(inner);
    if (parts.size() == 1) {
      if (inner.empty()) return error("has an empty '{}'");
      if (inner.find("..") != std::string_view::npos) return parse_range(inner);
      return error("has '{" + std::string(inner) +
                   "}', a group with no ',' or '..' (write literal braces as \\{ and \\})");
    }
    Group group;
    for (std::string_view part : parts) {
      CHUTE_ASSIGN_OR_RETURN(Seq alt, parse(part));
      group.alternatives.push_back(std::move(alt));
    }
    return Node(std::move(group));
  }

  static bool parse_int(std::string_view s, int64_t& out) {
    if (s.empty()) return false;
    const char* end = s.data() + s.size();
    auto [p, ec] = std::from_chars(s.data(), end, out);
    return ec == std::errc() && p == end;
  }

  static bool zero_padded(std::string_view s) {
    if (!s.empty() && s.front() == '-') s.remove_prefix(1);
    return s.size() > 1 && s.front() == '0';
  }

  Result<Node> parse_range(std::string_view inner) {
    const std::string bad = "has a bad range '{" + std::string(inner) +
                            "}' (expected {first..last} or {first..last..step} of integers or single letters)";
    std::vector<std::string_view> ends;
    for (size_t start = 0;;) {
      const size_t dots = inner.find("..", start);
      ends.push_back(inner.substr(start, dots == std::string_view::npos ? std::string_view::npos : dots - start));
      if (dots == std::string_view::npos) break;
      start = dots + 2;
    }
    if (ends.size() != 2 && ends.size() != 3) return error(bad);
    Range r;
    if (ends.size() == 3) {
      if (!parse_int(ends[2], r.step)) return error(bad);
      if (r.step == 0) return error(bad + ": a step of 0");
      if (r.step < 0) {
        if (r.step == INT64_MIN) return error(bad);
        r.step = -r.step;
      }
    }
    const auto letter = [](std::string_view s) {
      return s.size() == 1 && std::isalpha(static_cast<unsigned char>(s[0]));
    };
    if (letter(ends[0]) && letter(ends[1])) {
      r.letters = true;
      r.first = ends[0][0];
      r.last = ends[1][0];
    } else if (parse_int(ends[0], r.first) && parse_int(ends[1], r.last)) {
      // |last - first| must fit: both within +-2^62 keeps the difference in range.
      constexpr int64_t kLimit = int64_t{1} << 62;
      if (r.first > kLimit || r.first < -kLimit || r.last > kLimit || r.last < -kLimit) return error(bad);
      if (zero_padded(ends[0]) || zero_padded(ends[1])) r.width = std::max(ends[0].size(), ends[1].size());
    } else {
      return error(bad);
    }
    const uint64_t span = static_cast<uint64_t>(r.first <= r.last ? r.last - r.first : r.first - r.last);
    if (span / static_cast<uint64_t>(r.step) >= max_) {
      return error("has the range '{" + std::string(inner) + "}', more than " + std::to_string(max_) +
                   " names (the limit of one pattern)");
    }
    return Node(r);
  }

  std::string_view pattern_;
  size_t max_;
};

// Names a sequence stands for, saturating at `cap` + 1.
size_t count_seq(const Seq& seq, size_t cap);
size_t count_node(const Node& node, size_t cap) {
  if (std::holds_alternative<std::string>(node)) return 1;
  if (const auto* r = std::get_if<Range>(&node)) return std::min(r->count(), cap + 1);
  size_t total = 0;
  for (const Seq& alt : std::get<Group>(node).alternatives) total = std::min(total + count_seq(alt, cap), cap + 1);
  return total;
}
size_t count_seq(const Seq& seq, size_t cap) {
  size_t total = 1;
  for (const Node& node : seq.nodes) {
    const size_t n = count_node(node, cap);
    if (n == 0) return 0;
    total = total > (cap + 1) / n ? cap + 1 : std::min(total * n, cap + 1);
  }
  return total;
}

void expand_seq(const Seq& seq, std::vector<std::string>& out);
void expand_node(const Node& node, std::vector<std::string>& out) {
  if (const auto* s = std::get_if<std::string>(&node)) {
    out.push_back(*s);
  } else if (const auto* r = std::get_if<Range>(&node)) {
    for (size_t k = 0, n = r->count(); k < n; ++k) out.push_back(r->at(k));
  } else {
    for (const Seq& alt : std::get<Group>(node).alternatives) expand_seq(alt, out);
  }
}
void expand_seq(const Seq& seq, std::vector<std::string>& out) {
  std::vector<std::string> names{""};
  std::vector<std::string> values, next;
  for (const Node& node : seq.nodes) {
    values.clear();
    expand_node(node, values);
    next.clear();
    next.reserve(names.size() * values.size());
    for (const std::string& head : names) {
      for (const std::string& v : values) next.push_back(head + v);
    }
    names.swap(next);
  }
  for (std::string& n : names) out.push_back(std::move(n));
}

}  // namespace

Result<std::vector<std::string>> expand_braces(std::string_view pattern, size_t max) {
  BraceParser parser(pattern, max);
  CHUTE_ASSIGN_OR_RETURN(Seq seq, parser.parse(pattern));
  if (count_seq(seq, max) > max) {
    return parser.error("expands to more than " + std::to_string(max) + " names (the limit of one pattern)");
  }
  std::vector<std::string> out;
  expand_seq(seq, out);
  return out;
}

// ---- Globs --------------------------------------------------------------------------------------------

bool has_glob(std::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;
    } else if (s[i] == '*' || s[i] == '?' || s[i] == '[') {
      return true;
    }
  }
  return false;
}

namespace {

// The end of the class opening at `open` ('['), one past its ']', or npos when it is never closed.
size_t class_end(std::string_view p, size_t open) {
  size_t i = open + 1;
  if (i < p.size() && (p[i] == '!' || p[i] == '^')) ++i;
  if (i < p.size() && p[i] == ']') ++i;  // a leading ']' is literal
  for (; i < p.size(); ++i) {
    if (p[i] == '\\') {
      ++i;
    } else if (p[i] == ']') {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

bool class_matches(std::string_view cls, char c) {  // cls: between '[' and ']'
  bool negate = false;
  size_t i = 0;
  if (i < cls.size() && (cls[i] == '!' || cls[i] == '^')) {
    negate = true;
    ++i;
  }
  bool hit = false;
  while (i < cls.size()) {
    char lo = cls[i];
    if (lo == '\\' && i + 1 < cls.size()) lo = cls[++i];
    ++i;
    char hi = lo;
    if (i + 1 < cls.size() && cls[i] == '-') {
      hi = cls[i + 1];
      if (hi == '\\' && i + 2 < cls.size()) {
        hi = cls[i + 2];
        ++i;
      }
      i += 2;
    }
    if (static_cast<unsigned char>(c) >= static_cast<unsigned char>(lo) &&
        static_cast<unsigned char>(c) <= static_cast<unsigned char>(hi)) {
      hit = true;
    }
  }
  return hit != negate;
}

}  // namespace

Status check_glob(std::string_view pattern) {
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\') {
      if (i + 1 >= pattern.size()) {
        return invalid_argument("bad pattern '" + std::string(pattern) + "': it ends in a lone backslash");
      }
      ++i;
    } else if (pattern[i] == '[') {
      const size_t end = class_end(pattern, i);
      if (end == std::string_view::npos) {
        return invalid_argument("bad pattern '" + std::string(pattern) + "': the '[' at position " + std::to_string(i) +
                                " is never closed (write a literal '[' as \\[)");
      }
      i = end - 1;
    }
  }
  return Status::ok();
}

bool match_glob(std::string_view p, std::string_view t) {
  size_t pi = 0, ti = 0;
  size_t star_p = std::string_view::npos, star_t = 0;
  while (ti < t.size()) {
    bool advanced = false;
    if (pi < p.size()) {
      const char c = p[pi];
      if (c == '*') {
        star_p = pi++;
        star_t = ti;
        continue;
      }
      if (c == '?') {
        if (t[ti] != '/') {
          ++pi;
          ++ti;
          advanced = true;
        }
      } else if (c == '[') {
        const size_t end = class_end(p, pi);
        if (end == std::string_view::npos) return false;
        if (t[ti] != '/' && class_matches(p.substr(pi + 1, end - pi - 2), t[ti])) {
          pi = end;
          ++ti;
          advanced = true;
        }
      } else {
        char lit = c;
        size_t width = 1;
        if (c == '\\') {
          if (pi + 1 >= p.size()) return false;
          lit = p[pi + 1];
          width = 2;
        }
        if (t[ti] == lit) {
          pi += width;
          ++ti;
          advanced = true;
        }
      }
    }
    if (advanced) continue;
    // Backtrack: the last '*' takes one more character, never a '/' (nor can an earlier '*' reach past it).
    if (star_p == std::string_view::npos || t[star_t] == '/') return false;
    pi = star_p + 1;
    ti = ++star_t;
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

std::string glob_prefix(std::string_view pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '*' || c == '?' || c == '[') break;
    if (c == '\\' && i + 1 < pattern.size()) {
      out += pattern[++i];
    } else {
      out += c;
    }
  }
  return out;
}

std::string unescape_pattern(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) ++i;
    out += s[i];
  }
  return out;
}

}  // namespace chute
