#include "chute/io/image_folder.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <utility>

#include "chute/base/environment.h"

namespace chute {
namespace {

template <size_t N>
bool has_extension(const std::string& name, const char* const (&extensions)[N]) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const char* ext : extensions) {
    const size_t n = std::strlen(ext);
    if (lower.size() >= n && lower.compare(lower.size() - n, n, ext) == 0) return true;
  }
  return false;
}

struct DirListing {
  std::vector<std::string> dirs;   // names of entries that are directories (links followed)
  std::vector<std::string> files;  // every other entry, like os.walk
};

// One readdir pass. d_type saves a stat per entry; links and unknown types are stat'ed (following links),
// which is what os.scandir's is_dir() does.
Result<DirListing> list_dir(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) {
    return Status(errno == ENOENT ? StatusCode::kNotFound : StatusCode::kIoError,
                  "cannot open directory " + path + ": " + std::strerror(errno));
  }
  DirListing out;
  while (dirent* e = ::readdir(dir)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    bool is_dir = e->d_type == DT_DIR;
    if (e->d_type == DT_LNK || e->d_type == DT_UNKNOWN) {
      struct stat st;
      is_dir = ::stat((path + "/" + e->d_name).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    }
    (is_dir ? out.dirs : out.files).emplace_back(e->d_name);
  }
  ::closedir(dir);
  return out;
}

// All (directory, sorted image files) pairs under `top`, like sorted(os.walk(top, followlinks=True)).
// A (device, inode) set stops symlink cycles, where os.walk would recurse until it fails.
Status walk(const std::string& top, std::set<std::pair<dev_t, ino_t>>& seen,
            std::vector<std::pair<std::string, std::vector<std::string>>>& out, std::vector<std::string>& left_out) {
  struct stat st;
  if (::stat(top.c_str(), &st) == 0 && !seen.emplace(st.st_dev, st.st_ino).second) return Status::ok();
  CHUTE_ASSIGN_OR_RETURN(DirListing listing, list_dir(top));
  std::vector<std::string> images;
  for (auto& f : listing.files)
    if (has_extension(f, kImageExtensions))
      images.push_back(std::move(f));
    else if (has_extension(f, kUndecodedExtensions))
      left_out.push_back(top + "/" + f);
  std::sort(images.begin(), images.end());
  out.emplace_back(top, std::move(images));
  for (const auto& d : listing.dirs) CHUTE_RETURN_IF_ERROR(walk(top + "/" + d, seen, out, left_out));
  return Status::ok();
}

}  // namespace

Result<std::shared_ptr<ImageFolder>> ImageFolder::open(const std::string& root_in) {
  std::string root = root_in;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  auto folder = std::make_shared<ImageFolder>();
  folder->root_ = root;
  CHUTE_ASSIGN_OR_RETURN(DirListing top, list_dir(root));
  folder->classes_ = std::move(top.dirs);
  std::sort(folder->classes_.begin(), folder->classes_.end());
  if (folder->classes_.empty()) return Status(StatusCode::kNotFound, "Couldn't find any class folder in " + root + ".");

  std::vector<std::string> empty_classes;
  for (size_t label = 0; label < folder->classes_.size(); ++label) {
    std::set<std::pair<dev_t, ino_t>> seen;
    std::vector<std::pair<std::string, std::vector<std::string>>> dirs;
    CHUTE_RETURN_IF_ERROR(walk(root + "/" + folder->classes_[label], seen, dirs, folder->left_out_));
    std::sort(dirs.begin(), dirs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    const size_t before = folder->paths_.size();
    for (const auto& [dir, files] : dirs)
      for (const auto& f : files) folder->paths_.push_back(dir + "/" + f);
    folder->labels_.resize(folder->paths_.size(), static_cast<int64_t>(label));
    if (folder->paths_.size() == before) empty_classes.push_back(folder->classes_[label]);
  }
  if (!empty_classes.empty()) {
    std::string msg = "Found no valid file for the classes ";
    for (size_t i = 0; i < empty_classes.size(); ++i) msg += (i ? ", " : "") + empty_classes[i];
    msg += ". Supported extensions are: ";
    for (size_t i = 0; i < std::size(kImageExtensions); ++i) msg += (i ? ", " : "") + std::string(kImageExtensions[i]);
    if (!folder->left_out_.empty())
      msg += " (" + std::to_string(folder->left_out_.size()) +
             " files in formats chute cannot decode were left out, e.g. " + folder->left_out_.front() +
             "; convert them to JPEG, PNG or WebP)";
    return Status(StatusCode::kNotFound, msg);
  }
  return folder;
}

Status ImageFolder::read(int64_t index, std::vector<uint8_t>& out) const { return read_file(paths_[index], out); }

Status ImageFolder::read_capped(int64_t index, std::vector<uint8_t>& out, uint64_t max_bytes) const {
  return read_file(paths_[index], out, max_bytes);
}

namespace {
// Closes the descriptor on every return.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};
}  // namespace

Status read_file(const std::string& path, std::vector<uint8_t>& out, uint64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever. It changes nothing
  // for regular files, the only kind read here.
  Fd file{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  while (file.fd < 0 && errno == EINTR) file.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (file.fd < 0) return errno_status(errno, "cannot open");
  struct stat st;
  if (::fstat(file.fd, &st) != 0) return errno_status(errno, "cannot stat");
  if (!S_ISREG(st.st_mode)) return io_error("not a regular file (a FIFO, device or socket)");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes) return file_too_large(size, max_bytes);
  out.resize(static_cast<size_t>(size));
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(file.fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_status(errno, "read failed");
    if (n == 0) break;  // the file shrank under us
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return Status::ok();
}

}  // namespace chute
