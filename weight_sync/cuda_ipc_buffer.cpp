#include "weight_sync/cuda_ipc_buffer.h"

#include <ATen/ATen.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>

#ifdef OOZE_HAVE_CUDA_RUNTIME
#include <cuda_runtime.h>
#endif

#include "core/error.h"
#include "core/logging.h"

namespace ooze::weight_sync {

// What the memory of one buffer is: an allocation of the creator or a mapping of an opener.
// Shared by the CudaIpcBuffer and its tensor views; the last of them releases it.
struct CudaIpcBuffer::Allocation {
  void* address = nullptr;
  int64_t size = 0;
  int device = -1;
  bool creator = false;
  std::string handle;  // the key of this process's registries below

  Allocation(void* address, int64_t size, int device, bool creator, std::string handle)
      : address(address), size(size), device(device), creator(creator), handle(std::move(handle)) {}
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;
  ~Allocation();

  // The process's registries, under one mutex: handles of allocations it created (CUDA refuses
  // to map them here), its mappings by handle (CUDA maps an allocation once per process, so
  // opening a handle again shares the mapping), and how many mappings are not yet closed.
  // Never destroyed: buffers held in static objects are released after static destructors run.
  static std::mutex& mutex() {
    static auto* mutex = new std::mutex;
    return *mutex;
  }
  static std::set<std::string>& created() {
    static auto* created = new std::set<std::string>;
    return *created;
  }
  static std::map<std::string, std::weak_ptr<Allocation>>& opened() {
    static auto* opened = new std::map<std::string, std::weak_ptr<Allocation>>;
    return *opened;
  }
  static std::atomic<int64_t>& open_count() {
    static std::atomic<int64_t> count{0};
    return count;
  }
};

namespace {

// The handle's layout: magic, size, creator pid, GPU UUID, creator's device index, padding, and
// CUDA's cudaIpcMemHandle_t. Both ends run on one node, so native byte order is shared.
constexpr char kMagic[8] = {'o', 'o', 'z', 'e', 'I', 'P', 'C', '1'};
constexpr size_t kUuidBytes = 16;
constexpr size_t kCudaHandleBytes = 64;
constexpr size_t kHandleBytes = sizeof(kMagic) + 8 + 8 + kUuidBytes + 4 + 4 + kCudaHandleBytes;

struct HandleFields {
  int64_t nbytes = 0;
  int64_t creator_pid = 0;
  std::string uuid;  // kUuidBytes raw bytes
  int32_t creator_device = 0;
  std::string cuda_handle;  // kCudaHandleBytes raw bytes
};

template <class T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

template <class T>
T take(const std::string& in, size_t& offset) {
  T value;
  std::memcpy(&value, in.data() + offset, sizeof(value));
  offset += sizeof(value);
  return value;
}

[[maybe_unused]] std::string encode(const HandleFields& fields) {
  std::string out(kMagic, sizeof(kMagic));
  put<int64_t>(out, fields.nbytes);
  put<int64_t>(out, fields.creator_pid);
  out += fields.uuid;
  put<int32_t>(out, fields.creator_device);
  put<int32_t>(out, 0);
  out += fields.cuda_handle;
  return out;
}

// False when `handle` is not what CudaIpcBuffer::handle() returns.
[[maybe_unused]] bool decode(const std::string& handle, HandleFields* fields) {
  if (handle.size() != kHandleBytes || handle.compare(0, sizeof(kMagic), kMagic, sizeof(kMagic))) {
    return false;
  }
  size_t offset = sizeof(kMagic);
  fields->nbytes = take<int64_t>(handle, offset);
  fields->creator_pid = take<int64_t>(handle, offset);
  fields->uuid = handle.substr(offset, kUuidBytes);
  offset += kUuidBytes;
  fields->creator_device = take<int32_t>(handle, offset);
  offset += 4;
  fields->cuda_handle = handle.substr(offset, kCudaHandleBytes);
  return fields->nbytes >= 0 && fields->creator_pid > 0;
}

// The form nvidia-smi -L prints, so a user can tell which GPU is meant.
[[maybe_unused]] std::string format_uuid(const std::string& raw) {
  std::string text = "GPU-";
  for (size_t i = 0; i < raw.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
    char hex[3];
    std::snprintf(hex, sizeof(hex), "%02x", static_cast<unsigned char>(raw[i]));
    text += hex;
  }
  return text;
}

[[noreturn]] void fail(const std::string& what, int64_t nbytes, int device,
                       const std::string& reason) {
  throw IoError("cannot " + what + " a CUDA IPC buffer of " + std::to_string(nbytes) +
                " bytes on CUDA device " + std::to_string(device) + ": " + reason);
}

// Whether `pid` no longer runs (a zombie has exited too). Only meaningful when the creator
// shares this process's pid namespace, which colocated processes on one node do.
[[maybe_unused]] bool process_exited(int64_t pid) {
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  size_t command_end = line.rfind(')');
  if (command_end == std::string::npos || command_end + 2 >= line.size()) return false;
  char state = line[command_end + 2];
  return state == 'Z' || state == 'X';
}

#ifdef OOZE_HAVE_CUDA_RUNTIME

constexpr char kVisibleDevicesAdvice[] =
    "check CUDA_VISIBLE_DEVICES, the driver (nvidia-smi) and that the process runs on a GPU node";

// CUDA's reason for `status`, naming the call; clears the runtime's last error so a later,
// unrelated check does not report it again.
std::string cuda_reason(const char* call, cudaError_t status) {
  (void)cudaGetLastError();
  return std::string(call) + " failed: " + cudaGetErrorString(status) + " (" +
         cudaGetErrorName(status) + ")";
}

void check_device(const std::string& what, int64_t nbytes, int device) {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    fail(what, nbytes, device,
         "no CUDA device is visible to this process (" + cuda_reason("cudaGetDeviceCount", status) +
             "); " + kVisibleDevicesAdvice);
  }
  if (count == 0) {
    fail(what, nbytes, device,
         std::string("no CUDA device is visible to this process; ") + kVisibleDevicesAdvice);
  }
  if (device < 0 || device >= count) {
    fail(what, nbytes, device,
         "this process sees " + std::to_string(count) + " CUDA device(s), numbered 0 to " +
             std::to_string(count - 1) +
             "; pass one of those (CUDA_VISIBLE_DEVICES renumbers them)");
  }
}

// Makes `device` current for a scope and restores the previous device after it.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) set_ = cudaSetDevice(device);
    if (set_ != cudaSuccess) previous_ = -1;
  }
  ~DeviceGuard() {
    if (previous_ >= 0 && set_ == cudaSuccess) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  cudaError_t status() const { return set_; }

 private:
  int previous_ = -1;
  cudaError_t set_ = cudaSuccess;
};

void enter_device(const DeviceGuard& guard, const std::string& what, int64_t nbytes, int device) {
  if (guard.status() != cudaSuccess) {
    fail(what, nbytes, device,
         cuda_reason("cudaSetDevice", guard.status()) +
             "; the GPU may be in use in exclusive mode by another process or in a failed state "
             "(nvidia-smi shows which)");
  }
}

std::string device_uuid(const std::string& what, int64_t nbytes, int device) {
  cudaDeviceProp properties{};
  cudaError_t status = cudaGetDeviceProperties(&properties, device);
  if (status != cudaSuccess)
    fail(what, nbytes, device, cuda_reason("cudaGetDeviceProperties", status));
  static_assert(sizeof(properties.uuid.bytes) == kUuidBytes, "a CUDA UUID has 16 bytes");
  return std::string(properties.uuid.bytes, kUuidBytes);
}

#endif  // OOZE_HAVE_CUDA_RUNTIME

[[maybe_unused]] constexpr char kWithoutCuda[] =
    "ooze was built without CUDA (no CUDA toolkit was found when it was configured); configure it "
    "where the toolkit is installed (CUDAToolkit_ROOT or /usr/local/cuda) to share GPU memory, or "
    "deliver colocated weights through shared memory";

}  // namespace

CudaIpcBuffer::Allocation::~Allocation() {
#ifdef OOZE_HAVE_CUDA_RUNTIME
  std::lock_guard<std::mutex> lock(mutex());
  DeviceGuard guard(device);
  cudaError_t status = creator ? cudaFree(address) : cudaIpcCloseMemHandle(address);
  if (creator) {
    created().erase(handle);
  } else {
    auto entry = opened().find(handle);
    if (entry != opened().end() && entry->second.expired()) opened().erase(entry);
    if (status == cudaSuccess) --open_count();
  }
  // At process exit the runtime may unload before the last buffer goes; the driver frees all.
  if (status != cudaSuccess && status != cudaErrorCudartUnloading) {
    OOZE_LOG(WARN) << "could not " << (creator ? "free" : "close") << " a CUDA IPC buffer of "
                   << size << " bytes on CUDA device " << device << ": "
                   << cuda_reason(creator ? "cudaFree" : "cudaIpcCloseMemHandle", status);
  }
#endif
}

bool CudaIpcBuffer::built_with_cuda() {
#ifdef OOZE_HAVE_CUDA_RUNTIME
  return true;
#else
  return false;
#endif
}

size_t CudaIpcBuffer::handle_bytes() { return kHandleBytes; }

int64_t CudaIpcBuffer::open_handles() { return Allocation::open_count().load(); }

CudaIpcBuffer CudaIpcBuffer::create(int64_t nbytes, int device_index) {
  const std::string what = "create";
#ifndef OOZE_HAVE_CUDA_RUNTIME
  fail(what, nbytes, device_index, kWithoutCuda);
#else
  if (nbytes < 0) fail(what, nbytes, device_index, "a buffer holds zero or more bytes");
  check_device(what, nbytes, device_index);
  DeviceGuard guard(device_index);
  enter_device(guard, what, nbytes, device_index);

  CudaIpcBuffer buffer;
  buffer.size_ = nbytes;
  buffer.device_ = device_index;
  buffer.creator_ = true;
  HandleFields fields;
  fields.nbytes = nbytes;
  fields.creator_pid = getpid();
  fields.uuid = device_uuid(what, nbytes, device_index);
  fields.creator_device = device_index;
  fields.cuda_handle.assign(kCudaHandleBytes, '\0');
  if (nbytes == 0) {  // nothing to allocate; the handle still names the GPU and the size
    buffer.handle_ = encode(fields);
    return buffer;
  }

  void* address = nullptr;
  cudaError_t status = cudaMalloc(&address, static_cast<size_t>(nbytes));
  if (status != cudaSuccess) {
    std::string reason = cuda_reason("cudaMalloc", status);
    if (status == cudaErrorMemoryAllocation) {
      size_t free_bytes = 0, total_bytes = 0;
      if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
        reason += " with " + std::to_string(free_bytes) + " of " + std::to_string(total_bytes) +
                  " bytes free";
      }
      (void)cudaGetLastError();
      reason +=
          "; lower update_weight_buffer_size, or leave the weight buffers room on the GPU (the "
          "rollout engine's memory fraction)";
    }
    fail(what, nbytes, device_index, reason);
  }
  // Owned from here: a throw below frees it.
  auto allocation = std::make_shared<Allocation>(address, nbytes, device_index, true, "");
  cudaIpcMemHandle_t cuda_handle;
  status = cudaIpcGetMemHandle(&cuda_handle, address);
  if (status != cudaSuccess) {
    fail(what, nbytes, device_index,
         cuda_reason("cudaIpcGetMemHandle", status) +
             "; this GPU or driver does not export memory to other processes (CUDA IPC needs "
             "Linux and unified addressing); deliver colocated weights through shared memory");
  }
  static_assert(sizeof(cuda_handle) == kCudaHandleBytes, "cudaIpcMemHandle_t has 64 bytes");
  fields.cuda_handle.assign(reinterpret_cast<const char*>(&cuda_handle), kCudaHandleBytes);
  buffer.handle_ = encode(fields);
  {
    std::lock_guard<std::mutex> lock(Allocation::mutex());
    allocation->handle = buffer.handle_;
    Allocation::created().insert(buffer.handle_);
  }
  buffer.allocation_ = std::move(allocation);
  return buffer;
#endif
}

CudaIpcBuffer CudaIpcBuffer::open(const std::string& handle, int64_t nbytes, int device_index) {
  const std::string what = "open";
#ifndef OOZE_HAVE_CUDA_RUNTIME
  (void)handle;
  fail(what, nbytes, device_index, kWithoutCuda);
#else
  HandleFields fields;
  if (!decode(handle, &fields)) {
    fail(what, nbytes, device_index,
         "the handle (" + std::to_string(handle.size()) +
             " bytes) is not one CudaIpcBuffer::handle() made, which has " +
             std::to_string(kHandleBytes) +
             " bytes; pass the creator's handle() unchanged (it is binary: send it as bytes, not "
             "as text)");
  }
  if (nbytes != fields.nbytes) {
    fail(what, nbytes, device_index,
         "the handle names a buffer of " + std::to_string(fields.nbytes) +
             " bytes; the creator and the receiver disagree on the size");
  }
  check_device(what, nbytes, device_index);
  const std::string uuid = device_uuid(what, nbytes, device_index);
  if (uuid != fields.uuid) {
    fail(what, nbytes, device_index,
         "the handle is from another GPU: the buffer is on " + format_uuid(fields.uuid) +
             " (the creator's device " + std::to_string(fields.creator_device) +
             "), while device " + std::to_string(device_index) + " here is " + format_uuid(uuid) +
             "; a colocated engine opens it on the GPU that holds it (nvidia-smi -L lists UUIDs; "
             "CUDA_VISIBLE_DEVICES may number GPUs differently in the two processes)");
  }

  CudaIpcBuffer buffer;
  buffer.handle_ = handle;
  buffer.size_ = nbytes;
  buffer.device_ = device_index;
  if (nbytes == 0) return buffer;  // nothing was allocated, so nothing to map

  std::lock_guard<std::mutex> lock(Allocation::mutex());
  if (Allocation::created().count(handle) > 0) {
    fail(what, nbytes, device_index,
         "this process created the buffer, and CUDA maps IPC memory only in other processes; "
         "use the creator's CudaIpcBuffer (as_tensor()) here");
  }
  auto entry = Allocation::opened().find(handle);
  if (entry != Allocation::opened().end()) {
    if (std::shared_ptr<Allocation> mapped = entry->second.lock()) {
      buffer.allocation_ = std::move(mapped);
      return buffer;
    }
  }
  DeviceGuard guard(device_index);
  enter_device(guard, what, nbytes, device_index);
  cudaIpcMemHandle_t cuda_handle;
  std::memcpy(&cuda_handle, fields.cuda_handle.data(), kCudaHandleBytes);
  void* address = nullptr;
  cudaError_t status = cudaIpcOpenMemHandle(&address, cuda_handle, cudaIpcMemLazyEnablePeerAccess);
  if (status != cudaSuccess) {
    std::string reason = cuda_reason("cudaIpcOpenMemHandle", status) + "; ";
    const std::string creator = "the creator process " + std::to_string(fields.creator_pid);
    if (fields.creator_pid == getpid()) {
      reason +=
          "this process created the buffer and has freed it since; open handles of live "
          "buffers, in other processes";
    } else if (process_exited(fields.creator_pid)) {
      reason += creator +
                " exited, and its GPU memory with it: ask the trainer for new buffers (and drop "
                "any opened from it)";
    } else {
      reason += creator +
                " may have freed the buffer (handles name memory only while the creator holds "
                "it), or the handle was damaged on its way; ask the creator for a fresh handle";
    }
    fail(what, nbytes, device_index, reason);
  }
  auto allocation = std::make_shared<Allocation>(address, nbytes, device_index, false, handle);
  ++Allocation::open_count();
  Allocation::opened()[handle] = allocation;
  buffer.allocation_ = std::move(allocation);
  return buffer;
#endif
}

CudaIpcBuffer::CudaIpcBuffer(CudaIpcBuffer&& other) noexcept
    : handle_(std::move(other.handle_)),
      size_(other.size_),
      device_(other.device_),
      allocation_(std::move(other.allocation_)),
      creator_(other.creator_) {
  other.handle_.clear();
  other.size_ = 0;
  other.device_ = -1;
  other.creator_ = false;
}

CudaIpcBuffer& CudaIpcBuffer::operator=(CudaIpcBuffer&& other) noexcept {
  if (this != &other) {
    handle_ = std::move(other.handle_);
    size_ = other.size_;
    device_ = other.device_;
    allocation_ = std::move(other.allocation_);
    creator_ = other.creator_;
    other.handle_.clear();
    other.size_ = 0;
    other.device_ = -1;
    other.creator_ = false;
  }
  return *this;
}

void* CudaIpcBuffer::data() const { return allocation_ ? allocation_->address : nullptr; }

at::Tensor CudaIpcBuffer::as_tensor() const {
  if (device_ < 0) return at::empty({0}, at::TensorOptions().dtype(at::kByte));
  const at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(device_));
  std::shared_ptr<Allocation> keep_alive = allocation_;
  // target_device: LibTorch need not ask CUDA which device the pointer is on.
  return at::for_blob(data(), {size_})
      .deleter([keep_alive](void*) {})
      .options(at::TensorOptions().dtype(at::kByte).device(device))
      .target_device(device)
      .make_tensor();
}

}  // namespace ooze::weight_sync
