#include "actors/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <string>

#include "actors/wire_archive.h"

namespace ooze::actors {
namespace {

std::atomic<bool> enabled{false};
std::atomic<uint64_t> next_segment{0};
constexpr char kDescriptorMagic[8] = {'O', 'O', 'Z', 'E', 'S', 'H', 'M', '1'};
constexpr size_t kMaxName = 64;

std::string prefix_of(int pid) { return "ooze-" + std::to_string(pid) + "-"; }

struct Mapping {
  void* address = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (address != nullptr) munmap(address, size);
  }
};

}  // namespace

void enable_shared_memory(bool on) { enabled = on; }
bool shared_memory_enabled() { return enabled.load(); }

zmq::message_t write_shared_segment(const void* data, uint64_t nbytes) {
  std::string name = "/" + prefix_of(getpid()) + std::to_string(next_segment++);
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) throw RuntimeError("shm_open " + name + ": " + std::strerror(errno));
  if (ftruncate(fd, static_cast<off_t>(nbytes)) != 0) {
    close(fd);
    shm_unlink(name.c_str());
    throw RuntimeError("cannot size shared memory segment to " + std::to_string(nbytes) +
                       " bytes: " + std::strerror(errno) + " (is /dev/shm large enough?)");
  }
  void* address = mmap(nullptr, nbytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  close(fd);
  if (address == MAP_FAILED) {
    shm_unlink(name.c_str());
    throw RuntimeError("mmap of shared memory failed: " + std::string(std::strerror(errno)));
  }
  std::memcpy(address, data, nbytes);
  munmap(address, nbytes);
  zmq::message_t descriptor(sizeof(kDescriptorMagic) + name.size());
  std::memcpy(descriptor.data(), kDescriptorMagic, sizeof(kDescriptorMagic));
  std::memcpy(static_cast<char*>(descriptor.data()) + sizeof(kDescriptorMagic), name.data(),
              name.size());
  return descriptor;
}

std::shared_ptr<void> map_shared_segment(const zmq::message_t& descriptor, uint64_t nbytes,
                                         void** data) {
  const char* bytes = descriptor.data<char>();
  size_t size = descriptor.size();
  if (size <= sizeof(kDescriptorMagic) || size > sizeof(kDescriptorMagic) + kMaxName ||
      std::memcmp(bytes, kDescriptorMagic, sizeof(kDescriptorMagic)) != 0) {
    throw WireFormatError("malformed shared memory descriptor");
  }
  std::string name(bytes + sizeof(kDescriptorMagic), size - sizeof(kDescriptorMagic));
  if (name.rfind("/ooze-", 0) != 0 || name.find('/', 1) != std::string::npos) {
    throw WireFormatError("shared memory descriptor names no ooze segment");
  }
  int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) throw WireFormatError("shared memory segment " + name + " is gone");
  shm_unlink(name.c_str());
  struct stat info {};
  if (fstat(fd, &info) != 0 || static_cast<uint64_t>(info.st_size) != nbytes) {
    close(fd);
    throw WireFormatError("shared memory segment " + name + " does not hold " +
                          std::to_string(nbytes) + " bytes");
  }
  // Private and writable, so the tensor may be modified in place (copy-on-write, page by page).
  // Not MAP_POPULATE: on a private writable mapping that would copy every page up front.
  void* address = mmap(nullptr, nbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  close(fd);
  if (address == MAP_FAILED) throw WireFormatError("cannot map shared memory segment " + name);
  auto mapping = std::make_shared<Mapping>();
  mapping->address = address;
  mapping->size = nbytes;
  *data = address;
  return mapping;
}

void remove_shared_segments_of(int pid) {
  std::error_code error;
  std::string prefix = prefix_of(pid);
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", error)) {
    std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0) shm_unlink(("/" + name).c_str());
  }
}

}  // namespace ooze::actors
