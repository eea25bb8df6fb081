#include "core/atomic_file.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <streambuf>
#include <string>
#include <vector>

#include "core/error.h"

namespace ooze {
namespace {

constexpr size_t kBufferBytes = 64 * 1024;

// Unique per process and call, so two threads replacing the same file never share a temporary.
std::string temporary_name(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

std::string parent_directory(const std::string& path) {
  return std::filesystem::path(path).parent_path().string();
}

// Errors that mean "no room": a full disk, a quota, a file-size limit (RLIMIT_FSIZE).
bool out_of_space(int error_number) {
  return error_number == ENOSPC || error_number == EDQUOT || error_number == EFBIG;
}

// "N bytes free on its filesystem", or nothing when statvfs cannot tell.
std::string free_space_of(const std::string& path) {
  struct statvfs info {};
  const std::string dir = parent_directory(path);
  if (::statvfs(dir.empty() ? "." : dir.c_str(), &info) != 0) return "";
  const uint64_t free_bytes = static_cast<uint64_t>(info.f_bavail) * info.f_frsize;
  return std::to_string(free_bytes) + " bytes free on its filesystem";
}

}  // namespace

// A write buffer over the temporary's descriptor. Never throws: a failed write records errno,
// turns every later write into a no-op, and the owner reports it.
class AtomicFile::Buffer : public std::streambuf {
 public:
  explicit Buffer(int fd) : fd_(fd), space_(kBufferBytes) { reset(); }

  bool put(const char* data, size_t size) {
    if (size >= static_cast<size_t>(epptr() - pptr())) {
      if (!drain()) return false;
      if (size >= space_.size()) return write_all(data, size);  // no point copying it first
    }
    std::memcpy(pptr(), data, size);
    pbump(static_cast<int>(size));
    return error_ == 0;
  }

  // Hands the buffered bytes to the kernel.
  bool drain() {
    const bool ok = write_all(pbase(), static_cast<size_t>(pptr() - pbase()));
    reset();
    return ok;
  }

  int error() const { return error_; }

  // The descriptor is closed: later writes fail rather than reach whatever file reuses its number.
  void detach() {
    fd_ = -1;
    if (error_ == 0) error_ = EBADF;
  }

 protected:
  int_type overflow(int_type c) override {
    if (!drain()) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }

  std::streamsize xsputn(const char* data, std::streamsize size) override {
    return put(data, static_cast<size_t>(size)) ? size : 0;
  }

  int sync() override { return drain() ? 0 : -1; }

 private:
  void reset() { setp(space_.data(), space_.data() + space_.size()); }

  bool write_all(const char* data, size_t size) {
    while (size > 0 && error_ == 0) {
      const ssize_t written = ::write(fd_, data, size);
      if (written < 0) {
        if (errno != EINTR) error_ = errno;
        continue;
      }
      data += written;
      size -= static_cast<size_t>(written);
    }
    return error_ == 0;
  }

  int fd_;
  int error_ = 0;
  std::vector<char> space_;
};

AtomicFile::AtomicFile(const std::string& path, unsigned mode)
    : path_(path), temporary_(temporary_name(path)) {
  fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
               static_cast<mode_t>(mode));
  if (fd_ < 0) {
    throw IoError("cannot write '" + path_ + "': creating the temporary file '" + temporary_ +
                  "' failed: " + std::strerror(errno));
  }
  buffer_ = std::make_unique<Buffer>(fd_);
  stream_.rdbuf(buffer_.get());
}

AtomicFile::~AtomicFile() {
  if (!committed_) discard();
}

void AtomicFile::reserve(uint64_t bytes) {
  if (fd_ < 0) throw IoError("cannot write '" + path_ + "': the file is closed already");
  reserved_ = bytes;
  if (bytes == 0) return;
  if (::fallocate(fd_, 0, 0, static_cast<off_t>(bytes)) != 0) {
    const int error_number = errno;
    if (error_number == EOPNOTSUPP || error_number == ENOSYS) return;
    fail("reserving its space", error_number);
  }
}

void AtomicFile::write(const void* data, size_t size) {
  if (fd_ < 0) throw IoError("cannot write '" + path_ + "': the file is closed already");
  if (!buffer_->put(static_cast<const char*>(data), size)) fail("writing", buffer_->error());
}

void AtomicFile::write(const std::string& bytes) { write(bytes.data(), bytes.size()); }

void AtomicFile::commit() {
  if (fd_ < 0) throw IoError("cannot write '" + path_ + "': the file is closed already");
  stream_.flush();
  if (!buffer_->drain() || stream_.bad()) fail("writing", buffer_->error());
  // The data must be on disk before the rename can expose it.
  if (::fsync(fd_) != 0) {
    const int error_number = errno;
    fail("fsync", error_number);
  }
  buffer_->detach();
  const int closed = ::close(fd_);
  const int close_error = errno;
  fd_ = -1;
  if (closed != 0) fail("closing", close_error);
  if (std::rename(temporary_.c_str(), path_.c_str()) != 0) {
    const int error_number = errno;
    fail("renaming '" + temporary_ + "' over it", error_number);
  }
  committed_ = true;
  sync_directory(parent_directory(path_));
}

void AtomicFile::fail(const std::string& what, int error_number) {
  discard();
  std::string reason = error_number != 0 ? std::strerror(error_number) : "stream error";
  if (out_of_space(error_number)) {
    std::vector<std::string> room;
    if (reserved_ > 0) room.push_back("the file needs " + std::to_string(reserved_) + " bytes");
    if (std::string free = free_space_of(path_); !free.empty()) room.push_back(free);
    for (size_t i = 0; i < room.size(); ++i) reason += (i == 0 ? " (" : ", ") + room[i];
    if (!room.empty()) reason += ")";
  }
  throw IoError("cannot write '" + path_ + "': " + what + " failed: " + reason);
}

void AtomicFile::discard() {
  if (fd_ >= 0) {
    buffer_->detach();
    ::close(fd_);
    fd_ = -1;
  }
  if (!temporary_.empty()) ::unlink(temporary_.c_str());
  temporary_.clear();
}

void write_file_atomically(const std::string& path, const std::string& content) {
  AtomicFile file(path);
  file.write(content);
  file.commit();
}

void write_file_atomically(const std::string& path,
                           const std::function<void(std::ostream&)>& write) {
  AtomicFile file(path);
  write(file.stream());
  file.commit();
}

void sync_directory(const std::string& dir) {
  const std::string name = dir.empty() ? "." : dir;
  const int fd = ::open(name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace ooze
