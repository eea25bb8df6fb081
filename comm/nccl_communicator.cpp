#include "comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#ifdef OOZE_TORCH_HAS_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include "comm/collective_checks.h"
#include "comm/comm_error.h"
#include "core/logging.h"

// Nonblocking communicators (2.14), ncclAvg and bf16 (2.10) and ncclGetLastError (2.13) are all
// older; 2.18 is the oldest release this backend is tested against.
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 18, 0)
#error "ooze's NCCL backend needs NCCL 2.18 or newer"
#endif

namespace ooze {
namespace comm {
namespace {

using Clock = std::chrono::steady_clock;

const char* file_name(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

std::string call_site(const char* call, const char* file, int line) {
  return std::string(call) + " at " + file_name(file) + ":" + std::to_string(line);
}

std::string nccl_last_error(ncclComm_t comm) {
  const char* last = ncclGetLastError(comm);
  return last && *last ? std::string(" (") + last + ")" : std::string();
}

void check_cuda(cudaError_t error, const char* call, const char* file, int line) {
  if (error == cudaSuccess) return;
  (void)cudaGetLastError();  // clear a non-sticky error so later calls are not blamed for it
  throw CommError(call_site(call, file, line) + " failed: " + cudaGetErrorName(error) + ": " +
                  cudaGetErrorString(error));
}

// Nonblocking communicators may answer ncclInProgress: not a failure, the caller then polls
// ncclCommGetAsyncError until the communicator is ready.
ncclResult_t check_nccl(ncclResult_t result, ncclComm_t comm, const char* call, const char* file,
                        int line) {
  if (result == ncclSuccess || result == ncclInProgress) return result;
  throw CommError(call_site(call, file, line) + " failed: " + ncclGetErrorString(result) +
                  nccl_last_error(comm));
}

}  // namespace
}  // namespace comm
}  // namespace ooze

// Turn a failed CUDA runtime / NCCL call into CommError naming the call and where it was made.
#define OOZE_CUDA_CHECK(call) ::ooze::comm::check_cuda((call), #call, __FILE__, __LINE__)
#define OOZE_NCCL_CHECK(call, nccl_comm) \
  ::ooze::comm::check_nccl((call), (nccl_comm), #call, __FILE__, __LINE__)

namespace ooze {
namespace comm {
namespace {

// Makes `device` current for a scope: the CUDA runtime and NCCL act on the current device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    OOZE_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) OOZE_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { (void)cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

// Ends an NCCL group on every path: an unbalanced ncclGroupStart would silently group every
// later NCCL call of this thread.
class NcclGroup {
 public:
  NcclGroup() { OOZE_NCCL_CHECK(ncclGroupStart(), nullptr); }
  ~NcclGroup() {
    if (open_) (void)ncclGroupEnd();
  }
  void end(ncclComm_t comm) {
    open_ = false;
    OOZE_NCCL_CHECK(ncclGroupEnd(), comm);
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

 private:
  bool open_ = true;
};

// Polling pace: yield first so short operations return fast, then sleep up to 1 ms.
class Backoff {
 public:
  void pause() {
    if (++polls_ < 64) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(delay_);
    delay_ = std::min(delay_ * 2, std::chrono::microseconds(1000));
  }

 private:
  int polls_ = 0;
  std::chrono::microseconds delay_{20};
};

// The dtypes NCCL can carry (error messages name them with dtype_name()).
struct DtypeInfo {
  at::ScalarType torch;
  ncclDataType_t nccl;
};
const DtypeInfo kDtypes[] = {
    {at::kFloat, ncclFloat32},     {at::kDouble, ncclFloat64}, {at::kHalf, ncclFloat16},
    {at::kBFloat16, ncclBfloat16}, {at::kInt, ncclInt32},      {at::kLong, ncclInt64},
    {at::kChar, ncclInt8},         {at::kByte, ncclUint8},
};

const DtypeInfo* find_dtype(at::ScalarType type) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.torch == type) return &info;
  }
  return nullptr;
}

ncclRedOp_t to_nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM:
      return ncclSum;
    case ReduceOp::AVG:
      return ncclAvg;
    case ReduceOp::MAX:
      return ncclMax;
    case ReduceOp::MIN:
      return ncclMin;
  }
  return ncclSum;
}

std::string join(const std::vector<int>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(values[i]);
  }
  return out + "]";
}

// The unique id is 128 opaque bytes; hex keeps it safe for any Store implementation.
std::string to_hex(const ncclUniqueId& id) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * sizeof(id.internal));
  for (char byte : id.internal) {
    out += kDigits[static_cast<unsigned char>(byte) >> 4];
    out += kDigits[static_cast<unsigned char>(byte) & 0xf];
  }
  return out;
}

bool from_hex(const std::string& text, ncclUniqueId* id) {
  if (text.size() != 2 * sizeof(id->internal)) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < sizeof(id->internal); ++i) {
    int high = nibble(text[2 * i]);
    int low = nibble(text[2 * i + 1]);
    if (high < 0 || low < 0) return false;
    id->internal[i] = static_cast<char>((high << 4) | low);
  }
  return true;
}

void* byte_offset(void* base, int64_t elements, size_t element_size) {
  return static_cast<char*>(base) + elements * static_cast<int64_t>(element_size);
}

// One issued operation. Its tensors stay referenced until the completion event fired, so the
// caching allocator cannot hand their memory to someone else while NCCL still uses it.
struct PendingOp {
  std::string label;  // "all_reduce #12"
  cudaEvent_t done = nullptr;
  std::vector<at::Tensor> tensors;
  bool finished = false;  // observed complete while the communicator was healthy

  ~PendingOp() {
    if (done) (void)cudaEventDestroy(done);
  }
  void mark_finished() {
    finished = true;
    tensors.clear();
  }
};

class NcclCommunicator final : public Communicator,
                               public std::enable_shared_from_this<NcclCommunicator> {
 public:
  // `store_ranks[r]` is the rank under which the store knows group rank r (connected_ranks()).
  NcclCommunicator(std::shared_ptr<Store> store, int rank, int size, std::string name,
                   std::chrono::milliseconds timeout, int device, std::vector<int> store_ranks)
      : store_(std::move(store)),
        rank_(rank),
        size_(size),
        name_(std::move(name)),
        timeout_(timeout),
        device_(device),
        store_ranks_(std::move(store_ranks)),
        checks_(name_, rank_, size_, DeviceRule::cuda(device)) {}
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // Rendezvous and NCCL initialization. Kept out of the constructor so that the destructor
  // releases whatever a failed connect() had already created.
  void connect();

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  const char* backend() const override { return "nccl"; }
  std::chrono::milliseconds timeout() const override { return timeout_; }

  WorkPtr all_reduce_async(const at::Tensor& tensor, ReduceOp op) override;
  WorkPtr all_gather_async(const at::Tensor& output, const at::Tensor& input) override;
  WorkPtr all_gather_v_async(const at::Tensor& output, const at::Tensor& input,
                             const std::vector<int64_t>& counts) override;
  WorkPtr reduce_scatter_async(const at::Tensor& output, const at::Tensor& input,
                               ReduceOp op) override;
  WorkPtr reduce_scatter_v_async(const at::Tensor& output, const at::Tensor& input,
                                 const std::vector<int64_t>& counts, ReduceOp op) override;
  WorkPtr broadcast_async(const at::Tensor& tensor, int root) override;
  WorkPtr send_async(const at::Tensor& tensor, int dst, uint32_t tag) override;
  WorkPtr recv_async(const at::Tensor& tensor, int src, uint32_t tag) override;
  WorkPtr barrier_async() override;
  std::shared_ptr<Communicator> new_group(const std::vector<int>& ranks,
                                          const std::string& name) override;

  // Work's two halves (see NcclWork).
  void wait_for(PendingOp& op);
  bool poll(PendingOp& op);

 private:
  // Issues NCCL calls for one operation on (comm, stream).
  using Enqueue = std::function<void(ncclComm_t comm, cudaStream_t stream)>;

  WorkPtr launch(const char* op, std::vector<at::Tensor> tensors, const Enqueue& enqueue);
  ncclUniqueId rendezvous();
  // Polls until the nonblocking communicator finished its pending call (init or enqueue).
  void await_ready(Clock::time_point deadline, const char* pending_what);
  cudaStream_t caller_stream() const;
  void release_finished_ops();
  void abort_comm();
  void shutdown_comm();
  [[noreturn]] void fail(const std::string& label, const std::string& what, bool timed_out);
  void throw_if_broken(const std::string& op) const;
  std::string describe_absent_ranks();

  std::string where(const std::string& op) const;
  // The shared rules (collective_checks.h) plus NCCL's own: contiguous, a dtype NCCL carries.
  ncclDataType_t check_tensor(const char* op, const char* role, const at::Tensor& tensor) const;
  ncclDataType_t check_pair(const char* op, const at::Tensor& output,
                            const at::Tensor& input) const;

  const std::shared_ptr<Store> store_;
  const int rank_;
  const int size_;
  const std::string name_;
  const std::chrono::milliseconds timeout_;
  const int device_;
  const std::vector<int> store_ranks_;
  const CollectiveChecks checks_;

  // Guards everything below. NCCL calls on one communicator must not run concurrently.
  std::mutex mutex_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t caller_ready_ = nullptr;  // re-recorded on the caller's stream for every op
  float* barrier_buffer_ = nullptr;     // one device float that barrier() all-reduces
  uint64_t sequence_ = 0;
  std::deque<std::shared_ptr<PendingOp>> in_flight_;  // issue order = completion order
  std::string broken_reason_;                         // empty while healthy
};

class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<NcclCommunicator> comm, std::shared_ptr<PendingOp> op)
      : comm_(std::move(comm)), op_(std::move(op)) {}
  void wait() override { comm_->wait_for(*op_); }
  bool is_completed() override { return comm_->poll(*op_); }

 private:
  std::shared_ptr<NcclCommunicator> comm_;  // keeps the communicator alive while waited on
  std::shared_ptr<PendingOp> op_;
};

// ---- lifetime -------------------------------------------------------------------------------

void NcclCommunicator::connect() {
  std::lock_guard<std::mutex> lock(mutex_);
  int device_count = 0;
  cudaError_t status = cudaGetDeviceCount(&device_count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    throw CommError(where("init") + "no usable CUDA device: " + cudaGetErrorString(status));
  }
  if (device_ >= device_count) {
    throw CommError(where("init") + "device index " + std::to_string(device_) +
                    " does not exist; this process sees " + std::to_string(device_count) +
                    " CUDA device(s) (check CUDA_VISIBLE_DEVICES)");
  }
  DeviceGuard device(device_);
  try {
    OOZE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    OOZE_CUDA_CHECK(cudaEventCreateWithFlags(&caller_ready_, cudaEventDisableTiming));
    OOZE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&barrier_buffer_), sizeof(float)));
    OOZE_CUDA_CHECK(cudaMemset(barrier_buffer_, 0, sizeof(float)));
  } catch (const CommError& e) {
    throw CommError(where("init") + e.what());
  }

  ncclUniqueId id = rendezvous();

  // Nonblocking, so that a rank that never arrives costs a timeout, not a hang.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const auto deadline = Clock::now() + timeout_;
  try {
    OOZE_NCCL_CHECK(ncclCommInitRankConfig(&comm_, size_, id, rank_, &config), comm_);
    await_ready(deadline, "the other ranks to join");
  } catch (const CommTimeoutError& e) {
    fail("init", e.what(), /*timed_out=*/true);
  } catch (const CommError& e) {
    fail("init", std::string("failed: ") + e.what(), /*timed_out=*/false);
  }
}

ncclUniqueId NcclCommunicator::rendezvous() {
  const std::string key = name_ + "/nccl_unique_id";
  ncclUniqueId id;
  if (rank_ == 0) {
    try {
      OOZE_NCCL_CHECK(ncclGetUniqueId(&id), nullptr);
    } catch (const CommError& e) {
      throw CommError(where("init") + e.what());
    }
    store_->set(key, to_hex(id));
    return id;
  }
  std::string value;
  try {
    value = store_->get(key, timeout_);
  } catch (const CommTimeoutError& e) {
    throw CommTimeoutError(where("init") + "waited " + std::to_string(timeout_.count()) +
                           " ms for the NCCL unique id under '" + key +
                           "', but rank 0 never published it; " + describe_absent_ranks() +
                           " (store: " + e.what() + ")");
  }
  if (!from_hex(value, &id)) {
    throw CommError(where("init") + "the value under '" + key +
                    "' is not an NCCL unique id; is another program using this store key?");
  }
  return id;
}

NcclCommunicator::~NcclCommunicator() {
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceGuard device(device_);
    shutdown_comm();
    // Aborted kernels exit promptly; after this nothing on our stream touches user memory.
    if (stream_) (void)cudaStreamSynchronize(stream_);
    in_flight_.clear();
    if (barrier_buffer_) (void)cudaFree(barrier_buffer_);
    if (caller_ready_) (void)cudaEventDestroy(caller_ready_);
    if (stream_) (void)cudaStreamDestroy(stream_);
  } catch (const std::exception& e) {
    OOZE_LOG(WARN) << "NCCL group '" << name_ << "': cleanup failed: " << e.what();
  }
}

// Destroys a healthy communicator after flushing its work, bounded by the timeout; aborts
// otherwise, because destroying one whose peers are gone could block forever.
void NcclCommunicator::shutdown_comm() {
  if (!comm_) return;
  if (broken_reason_.empty()) {
    try {
      OOZE_NCCL_CHECK(ncclCommFinalize(comm_), comm_);
      await_ready(Clock::now() + timeout_, "outstanding operations to finish");
      OOZE_NCCL_CHECK(ncclCommDestroy(comm_), comm_);
      comm_ = nullptr;
      return;
    } catch (const CommError& e) {
      OOZE_LOG(WARN) << where("destroy") << e.what() << "; aborting the communicator instead";
    }
  }
  abort_comm();
}

void NcclCommunicator::abort_comm() {
  if (!comm_) return;
  (void)ncclCommAbort(comm_);
  comm_ = nullptr;
}

// ---- failures -------------------------------------------------------------------------------

std::string NcclCommunicator::where(const std::string& op) const {
  return "NCCL group '" + name_ + "' (rank " + std::to_string(rank_) + " of " +
         std::to_string(size_) + ", cuda:" + std::to_string(device_) + "): " + op + ": ";
}

std::string NcclCommunicator::describe_absent_ranks() {
  std::vector<int> connected;
  try {
    connected = store_->connected_ranks();
  } catch (const std::exception& e) {
    return std::string("the store could not say which ranks are alive (") + e.what() + ")";
  }
  if (connected.empty()) return "the store cannot tell which ranks are alive";
  std::vector<int> gone;
  std::vector<int> gone_in_store;
  for (int r = 0; r < size_; ++r) {
    if (std::find(connected.begin(), connected.end(), store_ranks_[r]) == connected.end()) {
      gone.push_back(r);
      gone_in_store.push_back(store_ranks_[r]);
    }
  }
  if (gone.empty()) {
    return "every rank is still connected to the store, so a rank is stuck before this "
           "operation or issued a different sequence of operations";
  }
  std::string out = "ranks " + join(gone);
  if (gone != gone_in_store) out += " (store ranks " + join(gone_in_store) + ")";
  return out + " are gone: no longer connected to the store";
}

// Called with mutex_ held. Aborting is the only way to release a communicator whose peers
// vanished; the communicator is unusable afterwards.
void NcclCommunicator::fail(const std::string& label, const std::string& what, bool timed_out) {
  std::string message = where(label) + what + "; " + describe_absent_ranks() +
                        ". The NCCL communicator was aborted; create a new group to go on.";
  abort_comm();
  broken_reason_ = message;
  if (timed_out) throw CommTimeoutError(message);
  throw CommError(message);
}

void NcclCommunicator::throw_if_broken(const std::string& op) const {
  if (broken_reason_.empty()) return;
  throw CommError(where(op) +
                  "this communicator is broken by an earlier failure: " + broken_reason_);
}

// ---- argument checks ------------------------------------------------------------------------

ncclDataType_t NcclCommunicator::check_tensor(const char* op, const char* role,
                                              const at::Tensor& tensor) const {
  checks_.placed(op, role, tensor);
  checks_.contiguous(op, role, tensor);
  const DtypeInfo* dtype = find_dtype(tensor.scalar_type());
  if (!dtype) {
    checks_.fail(op, std::string(role) + " has dtype " + dtype_name(tensor.scalar_type()) +
                         ", which the NCCL backend does not support (float32, float64, "
                         "float16, bfloat16, int32, int64, int8, uint8)");
  }
  return dtype->nccl;
}

ncclDataType_t NcclCommunicator::check_pair(const char* op, const at::Tensor& output,
                                            const at::Tensor& input) const {
  ncclDataType_t type = check_tensor(op, "output", output);
  check_tensor(op, "input", input);
  checks_.same_dtype(op, output, input);
  return type;
}

// ---- issuing and waiting --------------------------------------------------------------------

cudaStream_t NcclCommunicator::caller_stream() const {
#ifdef OOZE_TORCH_HAS_CUDA
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_)).stream();
#else
  return cudaStreamLegacy;
#endif
}

void NcclCommunicator::await_ready(Clock::time_point deadline, const char* pending_what) {
  Backoff backoff;
  while (true) {
    ncclResult_t state = ncclSuccess;
    OOZE_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state), comm_);
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) {
      throw CommError(std::string("NCCL reported ") + ncclGetErrorString(state) +
                      nccl_last_error(comm_));
    }
    if (Clock::now() >= deadline) {
      throw CommTimeoutError("waited " + std::to_string(timeout_.count()) + " ms for " +
                             pending_what);
    }
    backoff.pause();
  }
}

// Drops finished ops from the front of the queue; the stream completes them in order.
void NcclCommunicator::release_finished_ops() {
  while (!in_flight_.empty()) {
    PendingOp& op = *in_flight_.front();
    if (!op.finished) {
      cudaError_t status = cudaEventQuery(op.done);
      if (status != cudaSuccess) {
        if (status != cudaErrorNotReady) (void)cudaGetLastError();  // wait_for() reports it
        return;
      }
      op.mark_finished();
    }
    in_flight_.pop_front();
  }
}

WorkPtr NcclCommunicator::launch(const char* op, std::vector<at::Tensor> tensors,
                                 const Enqueue& enqueue) {
  std::lock_guard<std::mutex> lock(mutex_);
  throw_if_broken(op);
  auto pending = std::make_shared<PendingOp>();
  pending->label = std::string(op) + " #" + std::to_string(++sequence_);
  pending->tensors = std::move(tensors);
  const auto deadline = Clock::now() + timeout_;
  try {
    DeviceGuard device(device_);
    release_finished_ops();
    OOZE_CUDA_CHECK(cudaEventCreateWithFlags(&pending->done, cudaEventDisableTiming));
    // The comm stream starts after everything already queued on the caller's stream.
    OOZE_CUDA_CHECK(cudaEventRecord(caller_ready_, caller_stream()));
    OOZE_CUDA_CHECK(cudaStreamWaitEvent(stream_, caller_ready_, 0));
    enqueue(comm_, stream_);
    // Nonblocking NCCL may still be connecting to peers; the kernels are on the stream only
    // once it reports ready, and the completion event must come after them.
    await_ready(deadline, "NCCL to enqueue the operation (connecting to peers)");
    OOZE_CUDA_CHECK(cudaEventRecord(pending->done, stream_));
  } catch (const CommTimeoutError& e) {
    in_flight_.push_back(pending);  // part of it may be queued: keep its tensors until teardown
    fail(pending->label, e.what(), /*timed_out=*/true);
  } catch (const std::exception& e) {
    in_flight_.push_back(pending);
    fail(pending->label, std::string("failed: ") + e.what(), /*timed_out=*/false);
  }
  in_flight_.push_back(pending);
  return std::make_shared<NcclWork>(shared_from_this(), std::move(pending));
}

void NcclCommunicator::wait_for(PendingOp& op) {
  const auto deadline = Clock::now() + timeout_;
  Backoff backoff;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (op.finished) break;
      throw_if_broken(op.label);
      DeviceGuard device(device_);
      cudaError_t status = cudaEventQuery(op.done);
      if (status == cudaSuccess) {
        op.mark_finished();
        break;
      }
      if (status != cudaErrorNotReady) {
        (void)cudaGetLastError();
        fail(op.label,
             std::string("failed on the GPU: ") + cudaGetErrorName(status) + ": " +
                 cudaGetErrorString(status),
             /*timed_out=*/false);
      }
      ncclResult_t state = ncclSuccess;
      ncclResult_t query = ncclCommGetAsyncError(comm_, &state);
      if (query != ncclSuccess) state = query;
      if (state != ncclSuccess && state != ncclInProgress) {
        fail(op.label,
             std::string("failed: NCCL reported ") + ncclGetErrorString(state) +
                 nccl_last_error(comm_),
             /*timed_out=*/false);
      }
      if (Clock::now() >= deadline) {
        fail(op.label, "did not complete within " + std::to_string(timeout_.count()) + " ms",
             /*timed_out=*/true);
      }
    }
    backoff.pause();
  }
  // Torch semantics: the caller's stream is ordered after the operation (free on the GPU here,
  // since the host already saw it complete).
  std::lock_guard<std::mutex> lock(mutex_);
  DeviceGuard device(device_);
  OOZE_CUDA_CHECK(cudaStreamWaitEvent(caller_stream(), op.done, 0));
}

bool NcclCommunicator::poll(PendingOp& op) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (op.finished || !broken_reason_.empty()) return true;
  DeviceGuard device(device_);
  cudaError_t status = cudaEventQuery(op.done);
  if (status == cudaSuccess) {
    op.mark_finished();
    return true;
  }
  if (status != cudaErrorNotReady) return true;  // failed; wait() reports how
  ncclResult_t state = ncclSuccess;
  if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) return true;
  return state != ncclSuccess && state != ncclInProgress;
}

// ---- operations -----------------------------------------------------------------------------

WorkPtr NcclCommunicator::all_reduce_async(const at::Tensor& tensor, ReduceOp reduce) {
  const char* op = "all_reduce";
  ncclDataType_t type = check_tensor(op, "tensor", tensor);
  checks_.reducible(op, "tensor", tensor, reduce);
  void* data = tensor.data_ptr();
  size_t count = static_cast<size_t>(tensor.numel());
  return launch(op, {tensor}, [=](ncclComm_t comm, cudaStream_t stream) {
    if (count == 0) return;
    OOZE_NCCL_CHECK(ncclAllReduce(data, data, count, type, to_nccl_op(reduce), comm, stream), comm);
  });
}

WorkPtr NcclCommunicator::all_gather_async(const at::Tensor& output, const at::Tensor& input) {
  const char* op = "all_gather";
  ncclDataType_t type = check_pair(op, output, input);
  checks_.even_split(op, "output", output, "input", input);
  const void* send = input.data_ptr();
  void* recv = output.data_ptr();
  size_t count = static_cast<size_t>(input.numel());
  return launch(op, {output, input}, [=](ncclComm_t comm, cudaStream_t stream) {
    if (count == 0) return;
    OOZE_NCCL_CHECK(ncclAllGather(send, recv, count, type, comm, stream), comm);
  });
}

// Uneven all-gather: one broadcast per rank into its slot, fused into a single NCCL group
// (what torch's ProcessGroupNCCL does for uneven all_gather).
WorkPtr NcclCommunicator::all_gather_v_async(const at::Tensor& output, const at::Tensor& input,
                                             const std::vector<int64_t>& counts) {
  const char* op = "all_gather_v";
  ncclDataType_t type = check_pair(op, output, input);
  checks_.counts(op, counts, "output", output, "input", input);
  void* send = input.data_ptr();
  void* recv = output.data_ptr();
  size_t element_size = output.element_size();
  int self = rank_;
  return launch(op, {output, input}, [=](ncclComm_t comm, cudaStream_t stream) {
    NcclGroup group;
    int64_t offset = 0;
    for (size_t root = 0; root < counts.size(); ++root) {
      void* slot = byte_offset(recv, offset, element_size);
      offset += counts[root];
      if (counts[root] == 0) continue;
      // sendbuff only matters on the root; the others pass their slot, which NCCL ignores.
      const void* source = static_cast<int>(root) == self ? send : slot;
      OOZE_NCCL_CHECK(ncclBroadcast(source, slot, static_cast<size_t>(counts[root]), type,
                                    static_cast<int>(root), comm, stream),
                      comm);
    }
    group.end(comm);
  });
}

WorkPtr NcclCommunicator::reduce_scatter_async(const at::Tensor& output, const at::Tensor& input,
                                               ReduceOp reduce) {
  const char* op = "reduce_scatter";
  ncclDataType_t type = check_pair(op, output, input);
  checks_.reducible(op, "input", input, reduce);
  checks_.even_split(op, "input", input, "output", output);
  const void* send = input.data_ptr();
  void* recv = output.data_ptr();
  size_t count = static_cast<size_t>(output.numel());
  return launch(op, {output, input}, [=](ncclComm_t comm, cudaStream_t stream) {
    if (count == 0) return;
    OOZE_NCCL_CHECK(ncclReduceScatter(send, recv, count, type, to_nccl_op(reduce), comm, stream),
                    comm);
  });
}

// Uneven reduce-scatter: one reduce per chunk to the rank that keeps it, fused into one group.
WorkPtr NcclCommunicator::reduce_scatter_v_async(const at::Tensor& output, const at::Tensor& input,
                                                 const std::vector<int64_t>& counts,
                                                 ReduceOp reduce) {
  const char* op = "reduce_scatter_v";
  ncclDataType_t type = check_pair(op, output, input);
  checks_.reducible(op, "input", input, reduce);
  checks_.counts(op, counts, "input", input, "output", output);
  void* send = input.data_ptr();
  void* recv = output.data_ptr();
  size_t element_size = input.element_size();
  int self = rank_;
  return launch(op, {output, input}, [=](ncclComm_t comm, cudaStream_t stream) {
    NcclGroup group;
    int64_t offset = 0;
    for (size_t root = 0; root < counts.size(); ++root) {
      const void* chunk = byte_offset(send, offset, element_size);
      offset += counts[root];
      if (counts[root] == 0) continue;
      // recvbuff only matters on the root.
      void* target = static_cast<int>(root) == self ? recv : nullptr;
      OOZE_NCCL_CHECK(ncclReduce(chunk, target, static_cast<size_t>(counts[root]), type,
                                 to_nccl_op(reduce), static_cast<int>(root), comm, stream),
                      comm);
    }
    group.end(comm);
  });
}

WorkPtr NcclCommunicator::broadcast_async(const at::Tensor& tensor, int root) {
  const char* op = "broadcast";
  ncclDataType_t type = check_tensor(op, "tensor", tensor);
  checks_.peer(op, "root", root);
  void* data = tensor.data_ptr();
  size_t count = static_cast<size_t>(tensor.numel());
  return launch(op, {tensor}, [=](ncclComm_t comm, cudaStream_t stream) {
    if (count == 0) return;
    OOZE_NCCL_CHECK(ncclBroadcast(data, data, count, type, root, comm, stream), comm);
  });
}

// NCCL has no tags: messages between a pair arrive in issue order, whatever their tag.
WorkPtr NcclCommunicator::send_async(const at::Tensor& tensor, int dst, uint32_t /*tag*/) {
  const char* op = "send";
  ncclDataType_t type = check_tensor(op, "tensor", tensor);
  checks_.peer(op, "destination rank", dst);
  if (dst == rank_) checks_.fail(op, "sending to oneself is not supported; copy the tensor");
  const void* data = tensor.data_ptr();
  size_t count = static_cast<size_t>(tensor.numel());
  return launch(op, {tensor}, [=](ncclComm_t comm, cudaStream_t stream) {
    OOZE_NCCL_CHECK(ncclSend(data, count, type, dst, comm, stream), comm);
  });
}

WorkPtr NcclCommunicator::recv_async(const at::Tensor& tensor, int src, uint32_t /*tag*/) {
  const char* op = "recv";
  ncclDataType_t type = check_tensor(op, "tensor", tensor);
  checks_.peer(op, "source rank", src);
  if (src == rank_) checks_.fail(op, "receiving from oneself is not supported; copy the tensor");
  void* data = tensor.data_ptr();
  size_t count = static_cast<size_t>(tensor.numel());
  return launch(op, {tensor}, [=](ncclComm_t comm, cudaStream_t stream) {
    OOZE_NCCL_CHECK(ncclRecv(data, count, type, src, comm, stream), comm);
  });
}

WorkPtr NcclCommunicator::barrier_async() {
  float* data = barrier_buffer_;
  return launch("barrier", {}, [=](ncclComm_t comm, cudaStream_t stream) {
    OOZE_NCCL_CHECK(ncclAllReduce(data, data, 1, ncclFloat32, ncclSum, comm, stream), comm);
  });
}

// Members only, so ncclCommSplit (which every rank of the parent must call) does not fit:
// the members rendezvous on a fresh unique id under the parent's name instead.
std::shared_ptr<Communicator> NcclCommunicator::new_group(const std::vector<int>& ranks,
                                                          const std::string& name) {
  const char* op = "new_group";
  if (name.empty()) checks_.fail(op, "the new group needs a non-empty name");
  if (ranks.empty()) checks_.fail(op, "ranks is empty");
  std::vector<int> child_store_ranks;
  int child_rank = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    checks_.peer(op, "member rank", ranks[i]);
    if (std::count(ranks.begin(), ranks.end(), ranks[i]) > 1) {
      checks_.fail(op, "rank " + std::to_string(ranks[i]) + " appears twice in " + join(ranks));
    }
    if (ranks[i] == rank_) child_rank = static_cast<int>(i);
    child_store_ranks.push_back(store_ranks_[ranks[i]]);
  }
  if (child_rank < 0) {
    checks_.fail(op, "this rank is not in " + join(ranks) +
                         "; only the members of a new group call new_group");
  }
  auto child = std::make_shared<NcclCommunicator>(
      store_, child_rank, static_cast<int>(ranks.size()), name_ + "/" + name, timeout_, device_,
      std::move(child_store_ranks));
  child->connect();
  return child;
}

}  // namespace

std::shared_ptr<Communicator> make_nccl_communicator(std::shared_ptr<Store> store, int rank,
                                                     int size, const std::string& name,
                                                     std::chrono::milliseconds timeout,
                                                     int device_index) {
  const std::string where = "NCCL group '" + name + "': ";
  if (!store) throw CommError(where + "store is null");
  if (size < 1) throw CommError(where + "size must be at least 1, got " + std::to_string(size));
  if (rank < 0 || rank >= size) {
    throw CommError(where + "rank " + std::to_string(rank) + " is out of range 0.." +
                    std::to_string(size - 1));
  }
  if (timeout.count() <= 0) throw CommError(where + "timeout must be positive");
  if (device_index < 0) {
    throw CommError(where + "device index must be >= 0, got " + std::to_string(device_index));
  }
  std::vector<int> store_ranks(size);
  for (int r = 0; r < size; ++r) store_ranks[r] = r;
  auto comm = std::make_shared<NcclCommunicator>(std::move(store), rank, size, name, timeout,
                                                 device_index, std::move(store_ranks));
  comm->connect();
  return comm;
}

}  // namespace comm
}  // namespace ooze
