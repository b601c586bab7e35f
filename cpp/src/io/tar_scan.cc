#include "chute/io/tar_scan.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <deque>
#include <optional>
#include <unordered_map>

#include "chute/io/image_folder.h"

namespace chute {
namespace {

constexpr size_t kBlock = 512;
constexpr int kMaxLinkHops = 40;  // as Linux resolves paths (ELOOP)

std::string field(const uint8_t* p, size_t n) {
  const void* nul = std::memchr(p, 0, n);
  return std::string(reinterpret_cast<const char*>(p), nul ? static_cast<const uint8_t*>(nul) - p : n);
}

// A numeric header field: octal digits (space or NUL padded), or GNU base-256 when the top bit is set.
bool parse_number(const uint8_t* p, size_t n, uint64_t* out) {
  uint64_t v = 0;
  if (p[0] & 0x80) {
    if (p[0] & 0x40) return false;  // negative
    v = p[0] & 0x3f;
    for (size_t i = 1; i < n; ++i) {
      if (v >> 56) return false;
      v = (v << 8) | p[i];
    }
    *out = v;
    return true;
  }
  size_t i = 0;
  while (i < n && p[i] == ' ') ++i;
  bool any = false;
  for (; i < n && p[i] >= '0' && p[i] <= '7'; ++i) {
    if (v >> 61) return false;
    v = v * 8 + (p[i] - '0');
    any = true;
  }
  for (; i < n; ++i)
    if (p[i] != ' ' && p[i] != 0) return false;
  *out = v;
  return any;
}

bool checksum_ok(const uint8_t* h) {
  uint64_t stored;
  if (!parse_number(h + 148, 8, &stored)) return false;
  uint64_t sum = 0;
  int64_t signed_sum = 0;
  for (size_t i = 0; i < kBlock; ++i) {
    const uint8_t c = (i >= 148 && i < 156) ? ' ' : h[i];
    sum += c;
    signed_sum += static_cast<int8_t>(c);
  }
  return stored == sum || static_cast<int64_t>(stored) == signed_sum;
}

struct Pax {
  std::string path, linkpath;
  uint64_t size = 0;
  bool has_size = false;
};

// pax extended header records: "<len> <key>=<value>\n". Picks out path, linkpath and size.
bool parse_pax(std::span<const uint8_t> data, Pax* pax) {
  size_t pos = 0;
  while (pos < data.size()) {
    size_t len = 0;
    const char* begin = reinterpret_cast<const char*>(data.data() + pos);
    const char* stop = reinterpret_cast<const char*>(data.data() + data.size());
    auto [ptr, ec] = std::from_chars(begin, stop, len);
    if (ec != std::errc() || ptr == stop || *ptr != ' ' || len == 0 || len > data.size() - pos) return false;
    const std::string_view record(begin, len);
    if (record.back() != '\n') return false;
    const std::string_view kv = record.substr(static_cast<size_t>(ptr - begin) + 1, len - (ptr - begin) - 2);
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos) return false;
    const std::string_view key = kv.substr(0, eq), value = kv.substr(eq + 1);
    if (key == "path") pax->path = std::string(value);
    if (key == "linkpath") pax->linkpath = std::string(value);
    if (key == "size") {
      auto [p2, ec2] = std::from_chars(value.data(), value.data() + value.size(), pax->size);
      if (ec2 != std::errc() || p2 != value.data() + value.size()) return false;
      pax->has_size = true;
    }
    pos += len;
  }
  return true;
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// ImageFolder's extensions (image_folder.h), so that a tree and its tar list the same files.
bool is_image_extension(std::string_view ext) {
  return std::any_of(std::begin(kImageExtensions), std::end(kImageExtensions), [&](const char* dotted) {
    const char* e = dotted + 1;  // without its '.'
    return std::strlen(e) == ext.size() && std::equal(ext.begin(), ext.end(), e, [](char a, char b) {
             return std::tolower(static_cast<unsigned char>(a)) == b;
           });
  });
}

// ImageFolder's rule: the lower-cased name ends with "." and an image extension.
bool image_file_name(std::string_view name) {
  const size_t slash = name.rfind('/');
  const std::string_view base = slash == std::string_view::npos ? name : name.substr(slash + 1);
  const size_t dot = base.rfind('.');
  return dot != std::string_view::npos && is_image_extension(base.substr(dot + 1));
}

// webdataset.tariterators.tar_file_iterator's skip_meta, r"__[^/]*__($|/)" with re.match.
bool webdataset_meta(std::string_view name) {
  if (!name.starts_with("__")) return false;
  const std::string_view first = name.substr(0, name.find('/'));
  return first.size() >= 4 && first.ends_with("__");
}

std::vector<std::string> split_path(std::string_view path) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t slash = std::min(path.find('/', start), path.size());
    out.emplace_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  return out;
}

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : "/") + p;
  return out;
}

// "./a//b/" -> "a/b": the name a member is looked up by.
std::string normalise(std::string_view path) {
  std::vector<std::string> parts;
  for (std::string& c : split_path(path))
    if (!c.empty() && c != ".") parts.push_back(std::move(c));
  return join(parts);
}

enum class LinkError { kNone, kOutside, kLoop };

// The path with each symbolic link in it replaced by its target (relative to the link's directory), so
// that it names a member that is not a link, or a directory; nullopt when it leaves the archive or loops.
std::optional<std::string> canonical(std::string_view path, const std::unordered_map<std::string, std::string>& links,
                                     LinkError* error) {
  std::vector<std::string> done;
  std::deque<std::string> todo;
  for (std::string& c : split_path(path)) todo.push_back(std::move(c));
  int hops = 0;
  while (!todo.empty()) {
    std::string c = std::move(todo.front());
    todo.pop_front();
    if (c.empty() || c == ".") continue;
    if (c == "..") {
      if (done.empty()) return *error = LinkError::kOutside, std::nullopt;
      done.pop_back();
      continue;
    }
    done.push_back(std::move(c));
    const auto it = links.find(join(done));
    if (it == links.end()) continue;
    if (++hops > kMaxLinkHops) return *error = LinkError::kLoop, std::nullopt;
    if (it->second.starts_with('/')) return *error = LinkError::kOutside, std::nullopt;
    done.pop_back();
    std::vector<std::string> target = split_path(it->second);
    todo.insert(todo.begin(), std::make_move_iterator(target.begin()), std::make_move_iterator(target.end()));
  }
  return join(done);
}

class SkipLog {
 public:
  void add(std::string_view reason, const std::string& member) {
    auto it = std::find_if(list_.begin(), list_.end(), [&](const TarSkipped& s) { return s.reason == reason; });
    if (it == list_.end())
      it = list_.insert(list_.end(), TarSkipped{.reason = std::string(reason), .count = 0, .examples = {}});
    ++it->count;
    if (it->examples.size() < kMaxSkipExamples) it->examples.push_back(member);
  }
  std::vector<TarSkipped> take() { return std::move(list_); }

 private:
  std::vector<TarSkipped> list_;
};

// A member as the header walk finds it.
struct RawMember {
  std::string name;
  char kind = 'f';  // 'f' file, 'h' hard link, 's' symbolic link
  uint64_t offset = 0, size = 0;
  std::string link;  // the link's target, as stored
};

// A member with bytes to read: a file, or a link resolved to its target's bytes.
struct Member {
  std::string name;
  uint64_t offset = 0, size = 0;
};

// Walks the headers. Members that are neither files nor links are logged (directories are not: they
// hold the files).
Result<std::vector<RawMember>> read_headers(std::span<const uint8_t> tar, const std::string& what, SkipLog& skipped) {
  std::vector<RawMember> out;
  std::string long_name, long_link;
  Pax pax;
  uint64_t pos = 0;
  while (pos < tar.size()) {
    const std::string at = what + ": member header at offset " + std::to_string(pos);
    if (tar.size() - pos < kBlock) return corrupt_data(at + " is cut short (truncated tar)");
    const uint8_t* h = tar.data() + pos;
    if (std::all_of(h, h + kBlock, [](uint8_t c) { return c == 0; })) break;  // end of archive
    if (!checksum_ok(h)) return corrupt_data(at + ": bad header checksum (not a tar file, or corrupt)");
    uint64_t size;
    if (!parse_number(h + 124, 12, &size)) return corrupt_data(at + ": bad size field");
    const char type = static_cast<char>(h[156]);
    const bool extension_header = type == 'x' || type == 'g' || type == 'L' || type == 'K';
    std::string name = field(h, 100), link = field(h + 157, 100);
    if (std::memcmp(h + 257, "ustar\0", 6) == 0) {  // POSIX only: GNU keeps times in these bytes
      const std::string prefix = field(h + 345, 155);
      if (!prefix.empty()) name = prefix + "/" + name;
    }
    if (!extension_header) {
      if (!long_name.empty()) name = std::move(long_name), long_name.clear();
      if (!long_link.empty()) link = std::move(long_link), long_link.clear();
      if (!pax.path.empty()) name = std::move(pax.path);
      if (!pax.linkpath.empty()) link = std::move(pax.linkpath);
      if (pax.has_size) size = pax.size;
      pax = Pax{};
    }
    // As Python's tarfile: links, directories, devices and FIFOs have no data blocks, whatever their size.
    const bool has_data = std::strchr("123456", type) == nullptr || type == '\0';
    const uint64_t data = pos + kBlock;
    if (!has_data) size = 0;
    if (size > tar.size() - data)
      return corrupt_data(what + ": member " + name + " at offset " + std::to_string(pos) + ": size " +
                          std::to_string(size) + " runs past the end of the file (truncated tar?)");
    const std::span<const uint8_t> body = tar.subspan(data, size);
    while (name.starts_with("./")) name.erase(0, 2);
    if (type == 'L') {
      long_name = field(body.data(), body.size());
    } else if (type == 'K') {
      long_link = field(body.data(), body.size());
    } else if (type == 'x') {
      if (!parse_pax(body, &pax)) return corrupt_data(at + ": bad pax header");
    } else if (type == 'g' || type == '5' || type == 'D') {
      // pax global header, directories
    } else if (type == '0' || type == '\0' || type == '7') {
      if (!name.ends_with('/'))
        out.push_back({.name = std::move(name), .kind = 'f', .offset = data, .size = size, .link = {}});
    } else if (type == '1' || type == '2') {
      out.push_back(
          {.name = std::move(name), .kind = type == '1' ? 'h' : 's', .offset = 0, .size = 0, .link = std::move(link)});
    } else if (type == '3' || type == '4' || type == '6') {
      skipped.add("not a regular file (a device or FIFO)", name);
    } else {
      skipped.add(std::string("unsupported member type '") + type + "'", name);
    }
    const uint64_t padded = (size + kBlock - 1) / kBlock * kBlock;  // size <= tar.size(): no overflow
    if (padded > tar.size() - data) break;                          // the last member's padding may be missing
    pos = data + padded;
  }
  return out;
}

// Links resolved to their targets' bytes, in archive order; a link to a directory becomes that
// directory's files under the link's path.
std::vector<Member> resolve_links(const std::vector<RawMember>& raw, SkipLog& skipped) {
  if (std::all_of(raw.begin(), raw.end(), [](const RawMember& m) { return m.kind == 'f'; })) {
    std::vector<Member> out;  // no link: no name tables
    out.reserve(raw.size());
    for (const RawMember& m : raw) out.push_back({m.name, m.offset, m.size});
    return out;
  }
  std::unordered_map<std::string, std::string> symlinks;
  for (const RawMember& m : raw)
    if (m.kind == 's') symlinks[normalise(m.name)] = m.link;
  // Files and hard links, in order (a hard link names a member archived before it).
  std::unordered_map<std::string, size_t> by_name;  // normalised name -> index in `files`
  std::vector<Member> files;
  std::vector<std::optional<size_t>> file_of(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    const RawMember& m = raw[i];
    if (m.kind == 's') continue;
    size_t source = files.size();
    if (m.kind == 'h') {
      const auto it = by_name.find(normalise(m.link));
      if (it == by_name.end()) {
        skipped.add("hard link to a member that is not in the archive", m.name);
        continue;
      }
      source = it->second;
    }
    files.push_back({m.name, source < files.size() ? files[source].offset : m.offset,
                     source < files.size() ? files[source].size : m.size});
    by_name[normalise(m.name)] = files.size() - 1;
    file_of[i] = files.size() - 1;
  }
  // Symbolic links to files join them; then links to directories take the files below their target.
  std::vector<std::optional<std::string>> dir_target(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    const RawMember& m = raw[i];
    if (m.kind != 's') continue;
    LinkError error = LinkError::kNone;
    const std::optional<std::string> target = canonical(normalise(m.name), symlinks, &error);
    if (!target) {
      skipped.add(error == LinkError::kLoop ? "symbolic link loop" : "symbolic link pointing outside the archive",
                  m.name);
      continue;
    }
    if (const auto it = by_name.find(*target); it != by_name.end()) {
      files.push_back({m.name, files[it->second].offset, files[it->second].size});
      file_of[i] = files.size() - 1;
    } else {
      dir_target[i] = *target;
    }
  }
  std::vector<std::string> file_names(files.size());
  for (size_t f = 0; f < files.size(); ++f) file_names[f] = normalise(files[f].name);
  // Directory links multiply members: a hostile tar of L links and F files would list L x F. Real trees
  // stay far below this bound.
  size_t budget = 16 * files.size() + 1024;
  std::vector<Member> out;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (file_of[i]) out.push_back(files[*file_of[i]]);
    if (!dir_target[i]) continue;
    const RawMember& link = raw[i];
    const std::string dir = *dir_target[i] + "/", own = normalise(link.name) + "/";
    if (dir_target[i]->empty() || own.starts_with(dir)) {
      skipped.add("symbolic link to a directory that holds it (a loop)", link.name);
      continue;
    }
    std::vector<size_t> below;
    for (size_t f = 0; f < files.size(); ++f)
      if (file_names[f].starts_with(dir)) below.push_back(f);
    if (below.empty()) {
      skipped.add("symbolic link to a member that is not in the archive", link.name);
    } else if (below.size() > budget) {
      skipped.add("symbolic link to a directory, beyond the limit of linked files (16 per file)", link.name);
    } else {
      budget -= below.size();
      for (size_t f : below) out.push_back({own + file_names[f].substr(dir.size()), files[f].offset, files[f].size});
    }
  }
  return out;
}

// One sample per image file, as ImageFolder lists a tree.
void image_tree_samples(const std::vector<Member>& members, TarScan& scan, SkipLog& skipped) {
  for (const Member& m : members) {
    if (image_file_name(m.name))
      scan.samples.push_back({.offset = m.offset, .size = m.size, .member = m.name});
    else
      skipped.add("not an image file", m.name);
  }
}

// A `.cls` member's integer label.
Result<int64_t> class_label(std::span<const uint8_t> body, const std::string& what, const std::string& member) {
  std::string_view text(reinterpret_cast<const char*>(body.data()), body.size());
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  int64_t label = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), label);
  if (ec != std::errc() || p != text.data() + text.size() || text.empty())
    return corrupt_data(what + ": member " + member + ": label is not an integer" +
                        (ec == std::errc::result_out_of_range ? " that fits in 64 bits" : ""));
  return label;
}

// WebDataset's grouping: consecutive members with one key are a sample.
Status webdataset_samples(std::span<const uint8_t> tar, const std::vector<Member>& members, const std::string& what,
                          TarScan& scan, SkipLog& skipped) {
  struct Group {
    std::string key;
    std::vector<std::string> extensions;  // lower-cased; a sample has a few
    std::vector<std::string> members;
    bool has_image = false, exact = false;
    TarSample sample;
  } group;
  auto finish = [&] {
    if (group.has_image)
      scan.samples.push_back(std::move(group.sample));
    else
      for (const std::string& m : group.members) skipped.add("no image member in its WebDataset sample", m);
    group.key.clear();
    group.extensions.clear();
    group.members.clear();
    group.has_image = group.exact = false;
    group.sample = TarSample{};
  };
  for (const Member& m : members) {
    std::string_view key, raw_ext;
    if (webdataset_meta(m.name)) {
      skipped.add("WebDataset metadata (__*__)", m.name);
      continue;
    }
    if (!webdataset_key(m.name, &key, &raw_ext)) {
      skipped.add("no extension (WebDataset names are <key>.<extension>)", m.name);
      continue;
    }
    if (group.members.empty() || key != group.key) finish(), group.key = std::string(key);
    const std::string ext = lower(raw_ext);
    if (std::find(group.extensions.begin(), group.extensions.end(), ext) != group.extensions.end()) {
      skipped.add("extension repeated within one WebDataset sample", m.name);
      continue;
    }
    group.extensions.push_back(ext);
    group.members.push_back(m.name);
    if (ext == "cls") {
      CHUTE_ASSIGN_OR_RETURN(group.sample.label, class_label(tar.subspan(m.offset, m.size), what, m.name));
      continue;
    }
    // The image: the first member with an image extension ("jpg"), else the first whose last extension
    // is one ("0.jpg", "seg.png").
    const bool exact = is_image_extension(ext);
    if ((exact && !group.exact) || (!group.has_image && image_file_name(m.name))) {
      group.sample.offset = m.offset;
      group.sample.size = m.size;
      group.sample.member = m.name;
      group.has_image = true;
      group.exact = exact;
    }
  }
  if (!group.members.empty()) finish();
  return Status::ok();
}

}  // namespace

bool webdataset_key(std::string_view path, std::string_view* key, std::string_view* ext) {
  const size_t slash = path.rfind('/');
  const size_t base = slash == std::string_view::npos ? 0 : slash + 1;
  const size_t dot = path.find('.', base);
  if (dot == std::string_view::npos) return false;  // the extension may not hold a '/'
  if (dot == base) {
    // A file name starting with '.': the key must end with the directory's '/' and hold, after its last
    // '/' or from its start, a run without '.' (the regular expression's [^.]+ may cross '/').
    if (base == 0) return false;
    size_t q = base;  // the key is path[0, dot); find q in it with path[q-1] == '/' or q == 0, no '.' after
    bool ok = false;
    while (q > 0) {
      --q;
      if (path[q] == '.') break;
      if (q == 0 || path[q - 1] == '/') {
        ok = true;
        break;
      }
    }
    if (!ok) return false;
  }
  *key = path.substr(0, dot);
  *ext = path.substr(dot + 1);
  return true;
}

Result<TarScan> scan_tar(std::span<const uint8_t> tar, const std::string& what) {
  SkipLog skipped;
  CHUTE_ASSIGN_OR_RETURN(std::vector<RawMember> raw, read_headers(tar, what, skipped));
  const std::vector<Member> members = resolve_links(raw, skipped);
  // The layout: WebDataset when a member shares its key with an image without being one.
  bool webdataset = false;
  {
    std::string key;
    bool image = false, other = false;
    for (const Member& m : members) {
      std::string_view k, ext;
      if (webdataset_meta(m.name) || !webdataset_key(m.name, &k, &ext)) continue;
      if (k != key) key = std::string(k), image = other = false;
      (image_file_name(m.name) ? image : other) = true;
      if (image && other) {
        webdataset = true;
        break;
      }
    }
  }
  TarScan scan;
  if (webdataset)
    CHUTE_RETURN_IF_ERROR(webdataset_samples(tar, members, what, scan, skipped));
  else
    image_tree_samples(members, scan, skipped);
  scan.skipped = skipped.take();
  return scan;
}

}  // namespace chute
