// PendingFile: mkstemp beside the destination, write, fsync, rename.
#include "output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace flashattn::cli {

PendingFile::PendingFile(std::string path, std::string argument)
    : path_(std::move(path)), argument_(std::move(argument)) {
  const std::size_t slash = path_.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : path_.substr(0, slash + 1);
  const std::string base = slash == std::string::npos ? path_ : path_.substr(slash + 1);
  if (base.empty()) Fail("is a directory name, not a file name");
  temp_path_ = dir + "." + base + ".tmp.XXXXXX";
  std::vector<char> name(temp_path_.begin(), temp_path_.end());
  name.push_back('\0');
  fd_ = mkstemp(name.data());
  if (fd_ < 0) Fail(std::string("cannot create a file in its directory: ") + std::strerror(errno));
  temp_path_ = name.data();
  // mkstemp creates the file private (0600); give it the permissions a plain create would have.
  const mode_t mask = umask(0);
  umask(mask);
  fchmod(fd_, 0666 & ~mask);
}

PendingFile::~PendingFile() {
  if (fd_ >= 0) close(fd_);
  if (!committed_) unlink(temp_path_.c_str());
}

void PendingFile::Write(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t written = write(fd_, bytes.data(), bytes.size());
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) Fail(std::string("cannot write: ") + std::strerror(errno));
    bytes.remove_prefix(static_cast<std::size_t>(written));
  }
}

void PendingFile::Commit() {
  if (fsync(fd_) != 0 || close(fd_) != 0) {
    fd_ = -1;
    Fail(std::string("cannot write: ") + std::strerror(errno));
  }
  fd_ = -1;
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    Fail(std::string("cannot replace the file: ") + std::strerror(errno));
  }
  committed_ = true;
}

void PendingFile::Fail(std::string_view what) const {
  throw std::runtime_error(argument_ + ": " + path_ + ": " + std::string(what));
}

}  // namespace flashattn::cli
