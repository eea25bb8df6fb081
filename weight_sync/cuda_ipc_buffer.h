// One block of GPU memory shared between processes by CUDA IPC: how a colocated weight bucket
// goes from the trainer process to a rollout engine process on the same GPU without a copy
// through the host. The GPU counterpart of SharedMemorySegment.
//
//   trainer (creator)                              engine (opener)
//   auto buffer = CudaIpcBuffer::create(bytes, device);
//   send buffer.handle() (an actor call)   -->     auto bucket = CudaIpcBuffer::open(handle,
//                                                                       bytes, device);
//   pack the bucket into buffer.as_tensor(),
//   synchronize the stream that packed it
//   tell the engine the bucket is ready    -->     copy / unpack bucket.as_tensor(),
//                                                  synchronize the stream that read it, reply
//   pack the next bucket                   <--
//   ...                                            drop the buffer and its tensors when done
//   drop the buffer                        <--     (closes the handle)
//
// Both ends address the same device memory: unlike a SharedMemorySegment receiver, whose
// mapping is copy-on-write, an opener's writes reach the creator and every other opener. An
// engine copies out of a buffer and never writes into it. CUDA orders nothing across processes:
// the creator finishes writing (synchronizes its stream) before it tells an engine, and an
// engine finishes reading before it replies.
//
// Why cudaMalloc and not LibTorch's caching allocator: an IPC handle names a whole allocation,
// and the caching allocator carves tensors out of larger blocks it keeps and reuses, so a handle
// to a cached tensor would expose its neighbours and stay tied to a block the allocator may hand
// out again. A buffer of its own is exactly the bytes it shares, freed only when the buffer is.
//
// Ownership and release.
//   - A handle names memory only while its creator holds the allocation: the creator's buffer
//     (and every as_tensor() view of it) must outlive the openers' use of it. Openers close
//     first; cudaFree while an opener still maps the memory leaves the opener reading freed
//     memory, which CUDA does not define.
//   - Both ends release through a reference count: as_tensor() views keep the allocation (or the
//     mapping) alive after the CudaIpcBuffer is gone, and the last of them calls cudaFree (the
//     creator) or cudaIpcCloseMemHandle (an opener). open_handles() counts this process's
//     mappings not yet closed.
//   - A process maps an allocation once: opening a handle this process holds open already
//     shares that mapping (closed when the last of its buffers and views goes), and opening one
//     this process created fails, since CUDA maps IPC memory only in other processes.
//   - If the creator dies, its context and allocations go with it: open() of its handles fails
//     and says the creator exited; what an opener already mapped must no longer be read (CUDA
//     gives no guarantee for it), so the engine drops its buffers and the trainer creates new
//     ones. An opener that dies has its mappings closed by the driver.
//
// The handle is a string of handle_bytes() bytes that identifies the allocation, its size, the
// GPU that holds it (by UUID, since CUDA_VISIBLE_DEVICES may number GPUs differently in the two
// processes) and the creator's pid; its last 64 bytes are CUDA's cudaIpcMemHandle_t.
//
// Built without the CUDA runtime (no CUDA toolkit at configure time), the class still exists so
// callers compile either way: built_with_cuda() is false and create() and open() throw.
// Every failure throws ooze::IoError naming the operation, the size, the device and CUDA's
// reason.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>

namespace ooze::weight_sync {

class CudaIpcBuffer {
 public:
  // Whether this build has the CUDA runtime; when false, create() and open() throw.
  static bool built_with_cuda();

  // Allocates `nbytes` (zero allowed: no allocation, but a handle all the same) on CUDA device
  // `device_index` with cudaMalloc and exports it.
  static CudaIpcBuffer create(int64_t nbytes, int device_index);
  // Maps the allocation `handle` names (from handle() in another process) on `device_index`,
  // which must be this process's index of the GPU that holds it and `nbytes` its exact size.
  static CudaIpcBuffer open(const std::string& handle, int64_t nbytes, int device_index);

  // The mappings this process has opened and not yet closed: one per handle, however many
  // buffers and as_tensor() views share it.
  static int64_t open_handles();
  // The length of every handle().
  static size_t handle_bytes();

  CudaIpcBuffer() = default;   // no buffer: empty handle, size 0, device -1
  ~CudaIpcBuffer() = default;  // releases the memory once no as_tensor() view remains
  CudaIpcBuffer(CudaIpcBuffer&& other) noexcept;
  CudaIpcBuffer& operator=(CudaIpcBuffer&& other) noexcept;
  CudaIpcBuffer(const CudaIpcBuffer&) = delete;
  CudaIpcBuffer& operator=(const CudaIpcBuffer&) = delete;

  // What an opener needs (binary bytes, to send as a std::string in an actor call).
  const std::string& handle() const { return handle_; }
  int64_t size() const { return size_; }
  void* data() const;  // a device pointer; nullptr when the size is 0
  int device() const { return device_; }
  bool is_creator() const { return creator_; }

  // A 1-D uint8 CUDA tensor of size() elements on device() viewing the memory; it (and every
  // view of it) keeps the memory mapped after this object is destroyed. An empty CPU tensor for
  // a default-constructed buffer.
  at::Tensor as_tensor() const;

 private:
  struct Allocation;

  std::string handle_;
  int64_t size_ = 0;
  int device_ = -1;
  std::shared_ptr<Allocation> allocation_;  // null when the size is 0
  bool creator_ = false;
};

}  // namespace ooze::weight_sync
