#include "chute/io/file_list.h"

#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>

#include "chute/io/image_folder.h"

namespace chute {

Result<std::shared_ptr<FileList>> FileList::open(const std::string& list_path) {
  std::ifstream in(list_path);
  if (!in) return Status(StatusCode::kNotFound, "cannot open file list " + list_path);
  auto list = std::make_shared<FileList>();
  list->root_ = std::filesystem::path(list_path).parent_path().string();
  if (list->root_.empty()) list->root_ = ".";
  std::string line;
  for (int64_t line_no = 1; std::getline(in, line); ++line_no) {
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    size_t start = 0;
    while (start < line.size() && std::isspace(static_cast<unsigned char>(line[start]))) ++start;
    if (start == line.size() || line[start] == '#') continue;
    const size_t sep = line.find_last_of(" \t");
    int64_t label = 0;
    const char* end = line.data() + line.size();
    const std::string where = list_path + ":" + std::to_string(line_no) + ": ";
    // A NUL would end the path early in open(): another file read under this line's name.
    if (const size_t nul = line.find('\0'); nul != std::string::npos)
      return invalid_argument(where + "a NUL byte at column " + std::to_string(nul + 1) + " (a path cannot hold one)");
    if (sep == std::string::npos || sep < start)
      return invalid_argument(where + "expected \"<path> <integer label>\", got \"" + line.substr(start) + "\"");
    const auto [ptr, ec] = std::from_chars(line.data() + sep + 1, end, label);
    if (ec == std::errc::result_out_of_range)
      return invalid_argument(where + "label " + line.substr(sep + 1) +
                              " is out of range (a label must fit in 64 bits)");
    if (ec != std::errc() || ptr != end)
      return invalid_argument(where + "expected \"<path> <integer label>\", got \"" + line.substr(start) + "\"");
    size_t path_end = sep;
    while (path_end > start && std::isspace(static_cast<unsigned char>(line[path_end - 1]))) --path_end;
    std::string path = line.substr(start, path_end - start);
    if (path.front() != '/') path = list->root_ + "/" + path;
    list->paths_.push_back(std::move(path));
    list->labels_.push_back(label);
  }
  if (in.bad()) return io_error("cannot read file list " + list_path);
  if (list->paths_.empty()) return invalid_argument("file list " + list_path + " lists no sample");
  return list;
}

Result<std::shared_ptr<FileList>> FileList::from_entries(std::string root, std::vector<std::string> paths,
                                                         std::vector<int64_t> labels) {
  if (paths.size() != labels.size())
    return invalid_argument("file list: " + std::to_string(paths.size()) + " paths but " +
                            std::to_string(labels.size()) + " labels");
  if (paths.empty()) return invalid_argument("file list lists no sample");
  if (root.empty()) root = ".";
  for (size_t i = 0; i < paths.size(); ++i) {
    std::string& path = paths[i];
    if (path.empty()) return invalid_argument("file list entry " + std::to_string(i) + ": the path is empty");
    if (path.find('\0') != std::string::npos)
      return invalid_argument("file list entry " + std::to_string(i) + ": the path holds a NUL byte");
    if (path.front() != '/') path = root + "/" + path;
  }
  auto list = std::make_shared<FileList>();
  list->root_ = std::move(root);
  list->paths_ = std::move(paths);
  list->labels_ = std::move(labels);
  return list;
}

Status FileList::read(int64_t index, std::vector<uint8_t>& out) const { return read_file(paths_[index], out); }

Status FileList::read_capped(int64_t index, std::vector<uint8_t>& out, uint64_t max_bytes) const {
  return read_file(paths_[index], out, max_bytes);
}

}  // namespace chute
