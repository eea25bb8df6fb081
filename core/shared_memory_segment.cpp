#include "core/shared_memory_segment.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/logging.h"

namespace ooze {

struct SharedMemorySegment::Mapping {
  void* address = nullptr;
  size_t size = 0;
  Mapping(void* address, size_t size) : address(address), size(size) {}
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { munmap(address, size); }
};

namespace {

constexpr size_t kMaxPrefixLength = 200;  // leaves room for pid, counter and random in NAME_MAX
constexpr int kCreateAttempts = 8;

std::atomic<uint64_t> next_segment{0};

// The unnamed segments this process holds, by their mapping's first byte: what
// find_unnamed_segment() looks up.
struct UnnamedSegments {
  std::mutex mutex;
  std::map<uintptr_t, UnnamedSegmentPlace> by_address;
};
UnnamedSegments& unnamed_segments() {
  static UnnamedSegments* segments = new UnnamedSegments;  // never destroyed: used at exit
  return *segments;
}

std::string describe(const std::string& name, int64_t nbytes) {
  return "shared memory segment " + name + " (" + std::to_string(nbytes) + " bytes)";
}

[[noreturn]] void fail(const std::string& name, int64_t nbytes, const std::string& what, int error,
                       const std::string& advice = "") {
  std::string message = "cannot " + what + " " + describe(name, nbytes);
  if (error != 0) message += ": " + std::string(std::strerror(error));
  if (!advice.empty()) message += "; " + advice;
  throw IoError(message);
}

void check_prefix(const std::string& prefix) {
  bool valid = !prefix.empty() && prefix.size() <= kMaxPrefixLength;
  for (char c : prefix) {
    valid =
        valid && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-');
  }
  if (!valid) {
    throw IoError("invalid shared memory segment name prefix '" + prefix + "': use 1 to " +
                  std::to_string(kMaxPrefixLength) +
                  " letters, digits, '.', '_' or '-' (no '/'), e.g. \"" + kSegmentPrefix + "\"");
  }
}

void check_size(const std::string& name, int64_t nbytes) {
  if (nbytes < 0) fail(name, nbytes, "use", 0, "a segment holds zero or more bytes");
}

uint64_t inode_of(int fd, const std::string& name, int64_t nbytes) {
  struct stat info {};
  if (fstat(fd, &info) != 0) fail(name, nbytes, "inspect", errno);
  return static_cast<uint64_t>(info.st_ino);
}

std::string random_hex() {
  uint32_t value;
  try {
    value = std::random_device{}();
  } catch (const std::exception&) {  // no entropy source: the pid and counter still make it unique
    value = static_cast<uint32_t>(clock());
  }
  char text[9];
  std::snprintf(text, sizeof(text), "%08x", value);
  return text;
}

// Closes a descriptor on every path out of a scope.
struct FileDescriptor {
  int fd;
  ~FileDescriptor() { close(fd); }
};

// Reserves the pages now: on tmpfs, writing past what /dev/shm can hold raises SIGBUS, while
// this reports ENOSPC.
int reserve(int fd, int64_t nbytes) {
  int error;
  do {
    error = posix_fallocate(fd, 0, static_cast<off_t>(nbytes));
  } while (error == EINTR);
  return error;
}

// The <pid> of "<head><pid>-...", or -1 when `file` does not have that form.
pid_t creator_pid(const std::string& file, const std::string& head) {
  if (file.compare(0, head.size(), head) != 0) return -1;
  size_t begin = head.size();
  size_t end = begin;
  while (end < file.size() && std::isdigit(static_cast<unsigned char>(file[end]))) ++end;
  if (end == begin || end - begin > 9 || end >= file.size() || file[end] != '-') return -1;
  return static_cast<pid_t>(std::stol(file.substr(begin, end - begin)));
}

bool process_is_running(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  // A zombie has exited; its segments are as stale as those of a reaped process.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (std::getline(stat, line)) {
    size_t command_end = line.rfind(')');
    if (command_end != std::string::npos && command_end + 2 < line.size()) {
      char state = line[command_end + 2];
      if (state == 'Z' || state == 'X') return false;
    }
  }
  return true;
}

}  // namespace

SharedMemorySegment SharedMemorySegment::create(int64_t nbytes, const std::string& name_prefix) {
  check_prefix(name_prefix);
  check_size("/" + name_prefix + "-...", nbytes);
  std::string base = "/" + name_prefix + "-" + std::to_string(getpid()) + "-";
  std::string name;
  int fd = -1;
  for (int attempt = 1; fd < 0; ++attempt) {
    name = base + std::to_string(next_segment++) + "-" + random_hex();
    fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 && (errno != EEXIST || attempt == kCreateAttempts)) {
      fail(name, nbytes, "create", errno, "check that /dev/shm is mounted and writable");
    }
  }
  FileDescriptor closer{fd};
  // From here on, a throw destroys `segment`, whose destructor unlinks the new name.
  SharedMemorySegment segment;
  segment.name_ = name;
  segment.size_ = nbytes;
  segment.creator_ = true;
  if (ftruncate(fd, static_cast<off_t>(nbytes)) != 0) fail(name, nbytes, "size", errno);
  segment.inode_ = inode_of(fd, name, nbytes);
  if (nbytes == 0) return segment;  // mmap refuses 0 bytes; there is nothing to map
  if (int error = reserve(fd, nbytes)) {
    fail(name, nbytes, "reserve memory for", error,
         "/dev/shm is too small or full (df -h /dev/shm; in a container raise --shm-size) or the "
         "bucket size is too large");
  }
  void* address = mmap(nullptr, static_cast<size_t>(nbytes), PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_POPULATE, fd, 0);
  if (address == MAP_FAILED) fail(name, nbytes, "map", errno);
  segment.mapping_ = std::make_shared<Mapping>(address, static_cast<size_t>(nbytes));
  return segment;
}

SharedMemorySegment SharedMemorySegment::create_unnamed(int64_t nbytes) {
  check_size("an unnamed segment", nbytes);
  const int fd = memfd_create("ooze-segment", MFD_CLOEXEC);
  if (fd < 0) fail("an unnamed segment", nbytes, "create", errno);
  SharedMemorySegment segment;  // from here on, a throw closes the descriptor
  segment.descriptor_ = fd;
  segment.name_ = "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(fd);
  segment.size_ = nbytes;
  segment.creator_ = true;
  segment.unlinked_ = true;  // there is no name to unlink
  if (ftruncate(fd, static_cast<off_t>(nbytes)) != 0) fail(segment.name_, nbytes, "size", errno);
  segment.inode_ = inode_of(fd, segment.name_, nbytes);
  if (nbytes == 0) return segment;
  if (int error = reserve(fd, nbytes)) {
    fail(segment.name_, nbytes, "reserve memory for", error, "the machine is out of memory");
  }
  void* address = mmap(nullptr, static_cast<size_t>(nbytes), PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_POPULATE, fd, 0);
  if (address == MAP_FAILED) fail(segment.name_, nbytes, "map", errno);
  segment.mapping_ = std::make_shared<Mapping>(address, static_cast<size_t>(nbytes));
  UnnamedSegments& segments = unnamed_segments();
  std::lock_guard<std::mutex> lock(segments.mutex);
  segments.by_address[reinterpret_cast<uintptr_t>(address)] =
      UnnamedSegmentPlace{fd, segment.inode_, 0, nbytes};
  return segment;
}

SharedMemorySegment SharedMemorySegment::open(const std::string& name, int64_t nbytes) {
  return open_mapped(name, nbytes, /*writable=*/false);
}

SharedMemorySegment SharedMemorySegment::open_writable(const std::string& name, int64_t nbytes) {
  return open_mapped(name, nbytes, /*writable=*/true);
}

SharedMemorySegment SharedMemorySegment::open_mapped(const std::string& name, int64_t nbytes,
                                                     bool writable) {
  // An unnamed segment is reached through its creator's descriptor.
  const bool unnamed = name.rfind("/proc/", 0) == 0;
  if (!unnamed && (name.size() < 2 || name.size() > NAME_MAX || name[0] != '/' ||
                   name.find('/', 1) != std::string::npos)) {
    fail(name, nbytes, "open", 0,
         "a segment name is '/' followed by up to " + std::to_string(NAME_MAX - 1) +
             " characters other than '/', as SharedMemorySegment::name() returns it");
  }
  check_size(name, nbytes);
  const int flags = (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC;
  int fd = unnamed ? ::open(name.c_str(), flags) : shm_open(name.c_str(), flags, 0);
  if (fd < 0) {
    int error = errno;
    fail(name, nbytes, "open", error,
         unnamed           ? "its creator has exited, or runs on another node or as another user"
         : error == ENOENT ? "it was never created or its creator already unlinked it (receivers "
                             "must open a segment before the creator calls unlink())"
                           : "");
  }
  FileDescriptor closer{fd};
  struct stat info {};
  if (fstat(fd, &info) != 0) fail(name, nbytes, "inspect", errno);
  if (static_cast<int64_t>(info.st_size) != nbytes) {
    fail(name, nbytes, "open", 0,
         "it holds " + std::to_string(info.st_size) +
             " bytes; the creator and the receiver disagree on the size");
  }
  SharedMemorySegment segment;
  segment.name_ = name;
  segment.size_ = nbytes;
  segment.inode_ = static_cast<uint64_t>(info.st_ino);
  if (nbytes == 0) return segment;
  // A receiver's: private and writable, so in-place writes to received views stay in this
  // process (copy on write, page by page); not MAP_POPULATE, which on such a mapping would copy
  // every page now. A writer's: the creator's pages themselves, mapped now rather than faulted
  // in one by one as it writes.
  void* address = mmap(nullptr, static_cast<size_t>(nbytes), PROT_READ | PROT_WRITE,
                       writable ? MAP_SHARED | MAP_POPULATE : MAP_PRIVATE, fd, 0);
  if (address == MAP_FAILED) fail(name, nbytes, "map", errno);
  segment.mapping_ = std::make_shared<Mapping>(address, static_cast<size_t>(nbytes));
  return segment;
}

SharedMemorySegment::~SharedMemorySegment() { release(); }

void SharedMemorySegment::release() {
  if (creator_ && !unlinked_) shm_unlink(name_.c_str());
  if (descriptor_ < 0) return;
  // Peers can no longer open it: no longer found (views may still keep the mapping).
  if (mapping_) {
    UnnamedSegments& segments = unnamed_segments();
    std::lock_guard<std::mutex> lock(segments.mutex);
    segments.by_address.erase(reinterpret_cast<uintptr_t>(mapping_->address));
  }
  close(descriptor_);
}

SharedMemorySegment::SharedMemorySegment(SharedMemorySegment&& other) noexcept
    : name_(std::move(other.name_)),
      size_(other.size_),
      mapping_(std::move(other.mapping_)),
      creator_(other.creator_),
      unlinked_(other.unlinked_),
      inode_(other.inode_),
      descriptor_(other.descriptor_) {
  other.name_.clear();
  other.size_ = 0;
  other.creator_ = false;
  other.unlinked_ = false;
  other.descriptor_ = -1;
}

SharedMemorySegment& SharedMemorySegment::operator=(SharedMemorySegment&& other) noexcept {
  if (this != &other) {
    release();
    name_ = std::move(other.name_);
    size_ = other.size_;
    mapping_ = std::move(other.mapping_);
    creator_ = other.creator_;
    unlinked_ = other.unlinked_;
    inode_ = other.inode_;
    descriptor_ = other.descriptor_;
    other.name_.clear();
    other.size_ = 0;
    other.creator_ = false;
    other.unlinked_ = false;
    other.descriptor_ = -1;
  }
  return *this;
}

void* SharedMemorySegment::data() const { return mapping_ ? mapping_->address : nullptr; }

at::Tensor SharedMemorySegment::as_tensor() const {
  auto options = at::TensorOptions().dtype(at::kByte).device(at::kCPU);
  if (!mapping_) return at::empty({0}, options);
  std::shared_ptr<Mapping> keep_alive = mapping_;
  return at::from_blob(
      keep_alive->address, {size_}, [keep_alive](void*) {}, options);
}

void SharedMemorySegment::unlink() {
  if (name_.empty() || unlinked_) return;
  if (shm_unlink(name_.c_str()) != 0 && errno != ENOENT) fail(name_, size_, "unlink", errno);
  unlinked_ = true;
}

std::optional<UnnamedSegmentPlace> find_unnamed_segment(const void* address, size_t bytes) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(address);
  UnnamedSegments& segments = unnamed_segments();
  std::lock_guard<std::mutex> lock(segments.mutex);
  auto after = segments.by_address.upper_bound(first);
  if (after == segments.by_address.begin()) return std::nullopt;
  const auto& [base, place] = *std::prev(after);
  if (first - base + bytes > static_cast<uint64_t>(place.size)) return std::nullopt;
  UnnamedSegmentPlace found = place;
  found.offset = first - base;
  return found;
}

SharedMemorySegment open_unnamed_segment_of(int64_t pid, const UnnamedSegmentPlace& place) {
  const std::string path =
      "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(place.descriptor);
  SharedMemorySegment segment = SharedMemorySegment::open_writable(path, place.size);
  if (segment.inode() != place.inode) {
    throw IoError(path + " is no longer the published segment (inode " +
                  std::to_string(segment.inode()) + ", published " + std::to_string(place.inode) +
                  ")");
  }
  return segment;
}

at::Tensor empty_for_same_host_peers(int64_t nbytes, c10::Device device) {
  auto options = at::TensorOptions().dtype(at::kByte).device(device);
  if (nbytes == 0 || !device.is_cpu()) return at::empty({nbytes}, options);
  std::shared_ptr<SharedMemorySegment> segment;
  try {
    segment = std::make_shared<SharedMemorySegment>(SharedMemorySegment::create_unnamed(nbytes));
  } catch (const IoError& e) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      OOZE_LOG(WARN) << "peers on this host will read buffers of this process through the "
                        "kernel, more slowly: "
                     << e.what();
    }
    return at::empty({nbytes}, options);
  }
  return at::from_blob(
      segment->data(), {nbytes}, [segment](void*) {}, options);
}

int64_t cleanup_stale_segments(const std::string& name_prefix) {
  check_prefix(name_prefix);
  const std::string head = name_prefix + "-";
  const pid_t self = getpid();
  // Names first, then unlinks: the directory is not modified while it is being read.
  std::vector<std::string> stale;
  std::error_code error;
  std::filesystem::directory_iterator entry("/dev/shm", error);
  for (; !error && entry != std::filesystem::directory_iterator(); entry.increment(error)) {
    std::string file = entry->path().filename().string();
    pid_t pid = creator_pid(file, head);
    if (pid > 0 && pid != self && !process_is_running(pid)) stale.push_back(file);
  }
  int64_t removed = 0;
  for (const std::string& file : stale) {
    if (shm_unlink(("/" + file).c_str()) == 0) ++removed;
  }
  if (removed > 0) {
    OOZE_LOG(INFO) << "removed " << removed << " shared memory segment(s) /dev/shm/" << head
                   << "* left behind by processes that exited";
  }
  return removed;
}

}  // namespace ooze
