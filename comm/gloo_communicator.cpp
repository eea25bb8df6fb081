#include "comm/gloo_communicator.h"

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <numeric>
#include <set>
#include <sstream>
#include <thread>

#include "comm/collective_checks.h"
#include "comm/comm_error.h"
#include "comm/reduce_kernels.h"
#include "comm/same_host_collectives.h"

namespace ooze {
namespace comm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Slot prefixes for our own point-to-point traffic; Gloo's collectives use 0x01..0x08.
constexpr uint8_t kChainBroadcastSlot = 0x7d;
constexpr uint8_t kRingReduceScatterSlot = 0x7e;
constexpr uint8_t kPointToPointSlot = 0x7f;

// Broadcasts of at least two chunks go down a chain of ranks chunk by chunk; smaller ones have
// nothing to pipeline and use Gloo's tree, whose log2(W) hops beat the chain's W - 1. On
// loopback 1 to 8 MiB chunks measured alike; smaller chunks fill the chain sooner.
constexpr size_t kBroadcastChunkBytes = size_t{2} << 20;
constexpr size_t kChainBroadcastMinBytes = 2 * kBroadcastChunkBytes;
// From this many bytes on (the whole buffer of an operation) a group whose ranks share a host
// reads its peers' memory (same_host_collectives.h) instead of going through loopback TCP; below
// it, the two small control collectives that path needs cost more than they save.
constexpr size_t kSameHostMinBytes = size_t{256} << 10;
// How long a collective that failed on a closed connection waits for the rendezvous store to
// see the peer that closed it go, so that the error names it as exited (diagnose).
constexpr std::chrono::milliseconds kDepartureWindow(250);

std::string join_ranks(const std::vector<int>& ranks) {
  std::ostringstream out;
  for (size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : "") << ranks[i];
  return out.str();
}

std::string describe_tensor(const at::Tensor& t) {
  std::ostringstream out;
  out << at::toString(t.scalar_type()) << t.sizes();
  return out.str();
}

// Gloo writes to its sockets with writev, which raises SIGPIPE once a peer has died; its default
// action would kill this process instead of failing the operation with an error naming the peer.
// Threads started while this lives (ours and Gloo's device loop) inherit the blocked signal, so
// it is blocked exactly where Gloo writes and the program's own disposition is left alone.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &previous_);
  }
  ~SigpipeBlocked() {
    if (!sigismember(&previous_, SIGPIPE)) {
      // A SIGPIPE raised on this thread meanwhile would be delivered on unblocking: drop it.
      const timespec now{0, 0};
      while (sigtimedwait(&pipe_, nullptr, &now) == SIGPIPE) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t pipe_;
  sigset_t previous_;
};

// Gloo's rendezvous talks to ooze's Store through this adapter.
class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(comm::Store& store, milliseconds timeout) : store_(store), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    std::string value = store_.get(key, timeout_);
    return std::vector<char>(value.begin(), value.end());
  }
  void wait(const std::vector<std::string>& keys) override { store_.wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override {
    store_.wait(keys, timeout);
  }

 private:
  comm::Store& store_;
  milliseconds timeout_;
};

class GlooWork : public Work {
 public:
  GlooWork(std::string description, milliseconds timeout)
      : description_(std::move(description)), timeout_(timeout), future_(promise_.get_future()) {}

  void wait() override {
    // The operation itself is bounded by the group timeout; this bound only guards against a
    // bug leaving the promise unset.
    if (future_.wait_for(timeout_ + std::chrono::seconds(30)) != std::future_status::ready) {
      throw CommTimeoutError(description_ + " did not complete within " +
                             std::to_string(timeout_.count()) + " ms");
    }
    future_.get();
  }
  bool is_completed() override {
    return future_.wait_for(milliseconds(0)) == std::future_status::ready;
  }
  void finish() { promise_.set_value(); }
  void fail(std::exception_ptr error) { promise_.set_exception(error); }
  const std::string& description() const { return description_; }

 private:
  std::string description_;
  milliseconds timeout_;
  std::promise<void> promise_;
  std::shared_future<void> future_;
};

// A posted send or receive waiting for completion.
struct PendingTransfer {
  std::shared_ptr<GlooWork> work;
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
  at::Tensor keep_alive;
  bool is_send;
  int peer;
  Clock::time_point start;
};

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<Store> root_store, std::string key_path,
                   std::vector<int> global_ranks, int rank, std::string name, milliseconds timeout,
                   std::string host, SameHostPath same_host_path)
      : root_store_(std::move(root_store)),
        store_(std::make_shared<PrefixStore>(key_path, root_store_)),
        key_path_(std::move(key_path)),
        global_ranks_(std::move(global_ranks)),
        rank_(rank),
        size_(static_cast<int>(global_ranks_.size())),
        name_(std::move(name)),
        timeout_(timeout),
        // Keep part of the budget to find out which ranks are missing, so the error still
        // arrives within the timeout.
        grace_(std::clamp(timeout / 10, milliseconds(100), milliseconds(2000))),
        host_(std::move(host)),
        same_host_path_(same_host_path),
        checks_(name_, rank_, size_, DeviceRule::cpu()) {
    SigpipeBlocked in_threads_started_here;
    rendezvous();
    if (same_host_path_ == SameHostPath::kWhenPossible) {
      if (auto peers = PeerMemory::connect(*store_, rank_, size_, timeout_)) {
        same_host_ = std::make_unique<SameHostCollectives>(std::move(peers));
      }
    }
    worker_ = std::thread([this] { run_operations(); });
    waiter_ = std::thread([this] { complete_transfers(); });
  }

  ~GlooCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    queue_cv_.notify_all();
    transfers_cv_.notify_all();
    if (worker_.joinable()) worker_.join();
    if (waiter_.joinable()) waiter_.join();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  const char* backend() const override { return "gloo"; }
  milliseconds timeout() const override { return timeout_; }

  WorkPtr all_reduce_async(const at::Tensor& tensor, ReduceOp op) override {
    std::string what = std::string("all_reduce(") + reduce_op_name(op) + ")";
    checks_.placed(what, "tensor", tensor);
    checks_.contiguous(what, "tensor", tensor);
    checks_.reducible(what, "tensor", tensor, op);
    ReduceKernel kernel = reduce_kernel(tensor.scalar_type(), op);
    return enqueue(what, describe_tensor(tensor), [this, tensor, op, kernel](uint32_t tag) {
      if (tensor.numel() == 0) return;
      if (on_same_host(tensor.nbytes())) {
        same_host_->all_reduce(tensor, kernel, same_host_control(tag));
        if (op == ReduceOp::AVG) tensor.div_(size_);
        return;
      }
      gloo::AllreduceOptions opts(context_);
      set_output(opts, tensor);
      opts.setReduceFunction(kernel);
      opts.setTag(tag);
      opts.setTimeout(op_timeout());
      gloo::allreduce(opts);
      if (op == ReduceOp::AVG) tensor.div_(size_);
    });
  }

  WorkPtr all_gather_async(const at::Tensor& output, const at::Tensor& input) override {
    const std::string what = "all_gather";
    check_gather_tensors(what, output, input);
    checks_.even_split(what, "output", output, "input", input);
    return run_all_gather(what, output, input,
                          std::vector<int64_t>(static_cast<size_t>(size_), input.numel()));
  }

  WorkPtr all_gather_v_async(const at::Tensor& output, const at::Tensor& input,
                             const std::vector<int64_t>& counts) override {
    const std::string what = "all_gather";
    check_gather_tensors(what, output, input);
    checks_.counts(what, counts, "output", output, "input", input);
    return run_all_gather(what, output, input, counts);
  }

  WorkPtr reduce_scatter_async(const at::Tensor& output, const at::Tensor& input,
                               ReduceOp op) override {
    std::string what = std::string("reduce_scatter(") + reduce_op_name(op) + ")";
    check_reduce_scatter_tensors(what, output, input, op);
    checks_.even_split(what, "input", input, "output", output);
    return run_reduce_scatter(what, output, input,
                              std::vector<int64_t>(static_cast<size_t>(size_), output.numel()), op);
  }

  WorkPtr reduce_scatter_v_async(const at::Tensor& output, const at::Tensor& input,
                                 const std::vector<int64_t>& counts, ReduceOp op) override {
    std::string what = std::string("reduce_scatter(") + reduce_op_name(op) + ")";
    check_reduce_scatter_tensors(what, output, input, op);
    checks_.counts(what, counts, "input", input, "output", output);
    return run_reduce_scatter(what, output, input, counts, op);
  }

  WorkPtr broadcast_async(const at::Tensor& tensor, int root) override {
    const std::string what = "broadcast(root " + std::to_string(root) + ")";
    checks_.placed(what, "tensor", tensor);
    checks_.contiguous(what, "tensor", tensor);
    checks_.peer(what, "root", root);
    return enqueue(what, describe_tensor(tensor), [this, tensor, root](uint32_t tag) {
      if (tensor.numel() == 0) return;
      if (on_same_host(tensor.nbytes())) {
        same_host_->broadcast(tensor, root, same_host_control(tag));
        return;
      }
      if (size_ > 1 && tensor.nbytes() >= kChainBroadcastMinBytes) {
        chain_broadcast(tensor, root, tag);
        return;
      }
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(static_cast<uint8_t*>(tensor.data_ptr()), tensor.nbytes());
      opts.setRoot(root);
      opts.setTag(tag);
      opts.setTimeout(op_timeout());
      gloo::broadcast(opts);
    });
  }

  WorkPtr send_async(const at::Tensor& tensor, int dst, uint32_t tag) override {
    const std::string what =
        "send(to " + std::to_string(dst) + ", tag " + std::to_string(tag) + ")";
    checks_.placed(what, "tensor", tensor);
    checks_.peer(what, "destination", dst);
    return post_transfer(what, tensor.contiguous(), /*is_send=*/true, dst, tag);
  }

  WorkPtr recv_async(const at::Tensor& tensor, int src, uint32_t tag) override {
    const std::string what =
        "recv(from " + std::to_string(src) + ", tag " + std::to_string(tag) + ")";
    checks_.placed(what, "tensor", tensor);
    checks_.contiguous(what, "tensor", tensor);
    checks_.peer(what, "source", src);
    return post_transfer(what, tensor, /*is_send=*/false, src, tag);
  }

  WorkPtr barrier_async() override {
    return enqueue("barrier", "", [this](uint32_t tag) {
      gloo::BarrierOptions opts(context_);
      opts.setTag(tag);
      opts.setTimeout(op_timeout());
      gloo::barrier(opts);
    });
  }

  std::shared_ptr<Communicator> new_group(const std::vector<int>& ranks,
                                          const std::string& name) override {
    std::set<int> seen;
    int my_index = -1;
    for (size_t i = 0; i < ranks.size(); ++i) {
      int r = ranks[i];
      if (r < 0 || r >= size_ || !seen.insert(r).second) {
        throw CommError("new_group '" + name + "' of group '" + name_ + "': ranks [" +
                        join_ranks(ranks) + "] must be distinct ranks in 0.." +
                        std::to_string(size_ - 1));
      }
      if (r == rank_) my_index = static_cast<int>(i);
    }
    if (my_index < 0) {
      throw CommError("new_group '" + name + "': rank " + std::to_string(rank_) + " of group '" +
                      name_ + "' is not in [" + join_ranks(ranks) +
                      "]; only members create a sub-group");
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!subgroup_names_.insert(name).second) {
        throw CommError("group '" + name_ + "' already has a sub-group named '" + name +
                        "'; give each sub-group a distinct name");
      }
    }
    std::vector<int> global;
    for (int r : ranks) global.push_back(global_ranks_[static_cast<size_t>(r)]);
    return std::make_shared<GlooCommunicator>(root_store_, key_path_ + "/" + name, global, my_index,
                                              name, timeout_, host_, same_host_path_);
  }

 private:
  struct Operation {
    uint64_t seq;
    std::string what;
    std::string detail;
    std::function<void(uint32_t)> run;
    std::shared_ptr<GlooWork> work;
    int peer = -1;  // >= 0 for a send/recv, which the waiter thread completes
  };

  milliseconds op_timeout() const { return timeout_ - grace_; }

  // "all_reduce(sum) #7 in group 'world' (rank 1 of 4)"; transfers have no sequence number.
  std::string label(const std::string& what, uint64_t seq) const {
    return what + (seq > 0 ? " #" + std::to_string(seq) : std::string()) + " in group '" + name_ +
           "' (rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ")";
  }

  // --- argument checks (collective_checks.h): bad calls fail at once, in the caller's thread

  // Inputs may be non-contiguous (they are copied); outputs are written in place.
  void check_gather_tensors(const std::string& what, const at::Tensor& output,
                            const at::Tensor& input) const {
    checks_.placed(what, "input", input);
    checks_.placed(what, "output", output);
    checks_.contiguous(what, "output", output);
    checks_.same_dtype(what, output, input);
  }
  void check_reduce_scatter_tensors(const std::string& what, const at::Tensor& output,
                                    const at::Tensor& input, ReduceOp op) const {
    check_gather_tensors(what, output, input);
    checks_.reducible(what, "input", input, op);
  }

  // --- checked operations ------------------------------------------------------------------

  // Runs a checked all-gather: counts[r] elements of rank r, evenly or not.
  WorkPtr run_all_gather(const std::string& what, const at::Tensor& output, const at::Tensor& input,
                         const std::vector<int64_t>& counts) {
    at::Tensor in = input.contiguous();
    return enqueue(what, describe_tensor(output), [this, output, in, counts](uint32_t tag) {
      if (output.numel() == 0) return;
      if (on_same_host(output.nbytes())) {
        same_host_->all_gather(output, in, counts, same_host_control(tag));
        return;
      }
      const size_t element = static_cast<size_t>(in.element_size());
      bool even =
          std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; });
      if (even) {
        gloo::AllgatherOptions opts(context_);
        opts.setInput(static_cast<uint8_t*>(in.data_ptr()), in.numel() * element);
        opts.setOutput(static_cast<uint8_t*>(output.data_ptr()), output.numel() * element);
        opts.setTag(tag);
        opts.setTimeout(op_timeout());
        gloo::allgather(opts);
      } else {
        std::vector<size_t> bytes;
        for (int64_t c : counts) bytes.push_back(static_cast<size_t>(c) * element);
        gloo::AllgathervOptions opts(context_);
        opts.setInput(static_cast<uint8_t*>(in.data_ptr()), in.numel() * element);
        opts.setOutput(static_cast<uint8_t*>(output.data_ptr()), bytes);
        opts.setTag(tag);
        opts.setTimeout(op_timeout());
        gloo::allgatherv(opts);
      }
    });
  }

  // Runs a checked reduce-scatter: rank r keeps the counts[r] elements of chunk r.
  WorkPtr run_reduce_scatter(const std::string& what, const at::Tensor& output,
                             const at::Tensor& input, const std::vector<int64_t>& counts,
                             ReduceOp op) {
    ReduceKernel kernel = reduce_kernel(input.scalar_type(), op);
    at::Tensor in = input.contiguous();
    return enqueue(what, describe_tensor(input), [=](uint32_t tag) {
      if (on_same_host(in.nbytes())) {
        same_host_->reduce_scatter(output, in, counts, kernel, same_host_control(tag));
      } else {
        ring_reduce_scatter(output, in, counts, kernel, tag);
      }
      if (op == ReduceOp::AVG) output.div_(size_);
    });
  }

  // --- the same-host path ------------------------------------------------------------------

  bool on_same_host(size_t bytes) const { return same_host_ && bytes >= kSameHostMinBytes; }

  // Its exchange and barrier are small Gloo collectives under the operation's tag, so they are
  // bounded by the group's timeout and fail, naming the peer, as any other.
  SameHostControl same_host_control(uint32_t tag) {
    SameHostControl control;
    control.exchange = [this, tag](const std::vector<uint64_t>& words) {
      std::vector<uint64_t> mine = words;  // Gloo takes a mutable input
      std::vector<uint64_t> all(mine.size() * static_cast<size_t>(size_));
      gloo::AllgatherOptions opts(context_);
      opts.setInput(mine.data(), mine.size());
      opts.setOutput(all.data(), all.size());
      opts.setTag(tag);
      opts.setTimeout(op_timeout());
      gloo::allgather(opts);
      return all;
    };
    control.barrier = [this, tag] {
      gloo::BarrierOptions opts(context_);
      opts.setTag(tag);
      opts.setTimeout(op_timeout());
      gloo::barrier(opts);
    };
    return control;
  }

  // --- rendezvous ------------------------------------------------------------------------

  void rendezvous() {
    // Every rank announces itself first, so a timeout can name exactly who never came.
    store_->set("joined/" + std::to_string(rank_), "1");
    std::vector<std::string> keys;
    for (int r = 0; r < size_; ++r) keys.push_back("joined/" + std::to_string(r));
    try {
      store_->wait(keys, timeout_);
    } catch (const CommTimeoutError&) {
      std::vector<int> missing;
      for (int r = 0; r < size_; ++r) {
        if (!store_->check({keys[static_cast<size_t>(r)]})) missing.push_back(r);
      }
      throw CommTimeoutError("group '" + name_ + "' could not form: rank(s) " +
                             join_ranks(missing) + " of " + std::to_string(size_) +
                             " never arrived within " + std::to_string(timeout_.count()) +
                             " ms (rank " + std::to_string(rank_) + " waited)");
    }
    gloo::transport::tcp::attr attr;
    attr.hostname = host_;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    context_ = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
    context_->setTimeout(timeout_);
    GlooStoreAdapter adapter(*store_, timeout_);
    try {
      context_->connectFullMesh(adapter, device);
    } catch (const std::exception& e) {
      throw CommError("group '" + name_ + "' could not connect rank " + std::to_string(rank_) +
                      " to its peers: " + e.what());
    }
  }

  // --- the operation queue ---------------------------------------------------------------

  WorkPtr enqueue(const std::string& what, const std::string& detail,
                  std::function<void(uint32_t)> run) {
    std::lock_guard<std::mutex> lock(mutex_);
    uint64_t seq = ++collective_seq_;
    auto work = std::make_shared<GlooWork>(label(what, seq), timeout_);
    queue_.push_back(Operation{seq, what, detail, std::move(run), work, -1});
    queue_cv_.notify_one();
    return work;
  }

  void run_operations() {
    while (true) {
      Operation op;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        queue_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        op = std::move(queue_.front());
        queue_.pop_front();
      }
      if (!broken_reason().empty()) {
        op.work->fail(std::make_exception_ptr(
            CommError(label(op.what, op.seq) +
                      " was not run: the group is unusable after an earlier "
                      "failure: " +
                      broken_reason())));
        continue;
      }
      const bool is_transfer = op.peer >= 0;
      auto start = Clock::now();
      try {
        op.run(static_cast<uint32_t>(op.seq));
        if (!is_transfer) op.work->finish();
      } catch (const std::exception& e) {
        std::vector<int> suspects;
        if (is_transfer) suspects.push_back(op.peer);
        std::string message = diagnose(op.what, op.detail, op.seq, start, e.what(), suspects);
        // A failed collective leaves Gloo's pairs in an unknown state; a failed transfer only
        // concerns one peer.
        if (!is_transfer) {
          mark_broken(message);
          // A peer's connection closed (it died): close this rank's too. Gloo's rings and
          // barriers reach the dead rank through some ranks only, and the others would wait on
          // this one until it exits, by then perhaps with the store their diagnosis reads. A
          // timeout is left alone: each survivor names the stuck rank itself.
          if (!is_timeout(e.what())) context_->closeConnections();
        }
        op.work->fail(std::make_exception_ptr(make_error(e, message)));
      }
    }
  }

  // Transfers are posted in order on the operation thread and completed on the waiter thread,
  // so a rank can have a send and a receive in flight at once (no exchange deadlocks).
  WorkPtr post_transfer(const std::string& what, const at::Tensor& tensor, bool is_send, int peer,
                        uint32_t tag) {
    auto work = std::make_shared<GlooWork>(label(what, 0), timeout_);
    auto post = [this, work, tensor, is_send, peer, tag](uint32_t) {
      auto buffer = context_->createUnboundBuffer(tensor.data_ptr(), tensor.nbytes());
      auto slot = gloo::Slot::build(kPointToPointSlot, tag);
      if (is_send) {
        buffer->send(peer, slot);
      } else {
        buffer->recv(peer, slot);
      }
      std::lock_guard<std::mutex> lock(mutex_);
      transfers_.push_back(
          PendingTransfer{work, std::move(buffer), tensor, is_send, peer, Clock::now()});
      transfers_cv_.notify_one();
    };
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(Operation{0, what, describe_tensor(tensor), post, work, peer});
    queue_cv_.notify_one();
    return work;
  }

  void complete_transfers() {
    while (true) {
      PendingTransfer transfer;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        transfers_cv_.wait(lock, [this] { return stopping_ || !transfers_.empty(); });
        if (transfers_.empty()) return;
        transfer = std::move(transfers_.front());
        transfers_.pop_front();
      }
      const char* what = transfer.is_send ? "send" : "recv";
      try {
        auto deadline = transfer.start + op_timeout();
        bool done = transfer.is_send ? transfer.buffer->waitSend(deadline)
                                     : transfer.buffer->waitRecv(deadline);
        if (!done) throw CommError(std::string(what) + " was aborted");
        transfer.work->finish();
      } catch (const std::exception& e) {
        std::string message = diagnose(what, describe_tensor(transfer.keep_alive), 0,
                                       transfer.start, e.what(), {transfer.peer});
        transfer.work->fail(std::make_exception_ptr(make_error(e, message)));
      }
    }
  }

  // --- failures --------------------------------------------------------------------------

  // Builds the message for a failed operation: what, where, how long, and which ranks are to
  // blame. Ranks that left the rendezvous store have exited. For collectives (seq > 0) that timed
  // out the survivors also post their arrival and look for each other's for a short grace
  // period; ranks alive but absent are stuck elsewhere. A collective that failed otherwise (a
  // peer's connection closed: it died, or left the group) waits only until the store sees a
  // rank go, at most kDepartureWindow, so that the caller can close its own end soon and its
  // peers' pending operations fail as fast. For transfers the peer is the suspect.
  std::string diagnose(const std::string& what, const std::string& detail, uint64_t seq,
                       Clock::time_point start, const std::string& reason,
                       std::vector<int> suspects) {
    auto elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
    std::ostringstream out;
    out << label(what, seq);
    if (!detail.empty()) out << " on " << detail;
    out << " failed after " << elapsed << " ms: " << reason << ".";
    try {
      if (seq > 0 && is_timeout(reason)) suspects = ranks_not_arriving_at(seq);
      if (seq > 0 && !is_timeout(reason)) wait_for_a_departure();
      std::vector<int> connected = root_store_->connected_ranks();
      std::vector<int> exited, stuck;
      for (int r = 0; r < size_; ++r) {
        int global = global_ranks_[static_cast<size_t>(r)];
        bool gone =
            !connected.empty() && !std::binary_search(connected.begin(), connected.end(), global);
        bool suspect = std::find(suspects.begin(), suspects.end(), r) != suspects.end();
        if (gone)
          exited.push_back(r);
        else if (suspect)
          stuck.push_back(r);
      }
      if (!exited.empty()) {
        out << " Rank(s) " << join_ranks(exited) << " exited (they left the rendezvous store).";
      }
      if (!stuck.empty()) {
        out << " Rank(s) " << join_ranks(stuck) << " are alive but "
            << (seq > 0 ? "did not report reaching this operation within " +
                              std::to_string(grace_.count()) + " ms (stuck elsewhere?)."
                        : "did not take part.");
      }
    } catch (const std::exception&) {
      out << " The rendezvous store is unreachable too: the process hosting it (rank 0 of the "
             "first group) has most likely exited.";
    }
    return out.str();
  }

  // Until the rendezvous store no longer lists some rank of this group (a dead peer's
  // connection to it closes when its connections to this rank do, but the store notices a
  // moment later), or kDepartureWindow has passed.
  void wait_for_a_departure() {
    const auto deadline = Clock::now() + kDepartureWindow;
    while (Clock::now() < deadline) {
      const std::vector<int> connected = root_store_->connected_ranks();
      if (connected.empty()) return;  // a store that cannot tell
      for (int global : global_ranks_) {
        if (!std::binary_search(connected.begin(), connected.end(), global)) return;
      }
      std::this_thread::sleep_for(milliseconds(10));
    }
  }

  // Posts this rank's arrival at collective `seq` and returns the ranks whose arrival does not
  // show up within the grace period.
  std::vector<int> ranks_not_arriving_at(uint64_t seq) {
    const std::string prefix = "arrived/" + std::to_string(seq) + "/";
    store_->set(prefix + std::to_string(rank_), "1");
    std::vector<int> absent;
    for (int r = 0; r < size_; ++r) absent.push_back(r);
    auto deadline = Clock::now() + grace_;
    while (true) {
      absent.erase(
          std::remove_if(absent.begin(), absent.end(),
                         [&](int r) { return store_->check({prefix + std::to_string(r)}); }),
          absent.end());
      if (absent.empty() || Clock::now() >= deadline) return absent;
      std::this_thread::sleep_for(milliseconds(20));
    }
  }

  // Gloo says "Timed out" in its exceptions' text; it has no type of its own for it.
  static bool is_timeout(const std::string& text) {
    return text.find("imed out") != std::string::npos || text.find("imeout") != std::string::npos;
  }

  static CommError make_error(const std::exception& cause, const std::string& message) {
    const bool timed_out =
        dynamic_cast<const CommTimeoutError*>(&cause) != nullptr || is_timeout(cause.what());
    if (timed_out) return CommTimeoutError(message);
    return CommError(message);
  }

  void mark_broken(const std::string& message) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_.empty()) broken_ = message;
  }
  std::string broken_reason() {
    std::lock_guard<std::mutex> lock(mutex_);
    return broken_;
  }

  template <typename Options>
  static void set_output(Options& opts, const at::Tensor& t) {
    // Gloo only needs the element size; the reduce kernel knows the real type.
    void* p = t.data_ptr();
    size_t n = static_cast<size_t>(t.numel());
    switch (t.element_size()) {
      case 1:
        opts.setOutput(static_cast<uint8_t*>(p), n);
        break;
      case 2:
        opts.setOutput(static_cast<uint16_t*>(p), n);
        break;
      case 4:
        opts.setOutput(static_cast<uint32_t*>(p), n);
        break;
      default:
        opts.setOutput(static_cast<uint64_t*>(p), n);
        break;
    }
  }

  // Bandwidth-optimal ring: in step s every rank forwards the partial sum of one chunk to its
  // right neighbour and folds the chunk arriving from its left into its own contribution.
  // After size-1 steps rank r holds chunk r reduced over all ranks. Partial sums live in two
  // chunk-sized buffers used alternately, so the input is never modified or copied whole.
  void ring_reduce_scatter(const at::Tensor& output, const at::Tensor& input,
                           const std::vector<int64_t>& counts, ReduceKernel kernel, uint32_t tag) {
    if (size_ == 1) {
      output.copy_(input.reshape(output.sizes()));  // any output shape of the same size
      return;
    }
    const size_t element = static_cast<size_t>(input.element_size());
    std::vector<int64_t> offsets(counts.size(), 0);
    for (size_t i = 1; i < counts.size(); ++i) offsets[i] = offsets[i - 1] + counts[i - 1];
    int64_t max_count = *std::max_element(counts.begin(), counts.end());
    if (max_count == 0) return;
    // Scratch is kept between calls: fresh buffers of this size would cost a page fault per
    // 4 KiB on every call, as much as the transfer itself.
    const int64_t scratch_bytes = 3 * max_count * static_cast<int64_t>(element);
    if (!scratch_.defined() || scratch_.numel() < scratch_bytes) {
      scratch_ = at::empty({scratch_bytes}, at::kByte);
    }
    auto slice = [&](int i) {
      return static_cast<char*>(scratch_.data_ptr()) +
             i * max_count * static_cast<int64_t>(element);
    };
    char* incoming = slice(0);
    char* partial[2] = {slice(1), slice(2)};
    char* in_base = static_cast<char*>(input.data_ptr());
    auto wrap = [](int r, int n) { return ((r % n) + n) % n; };
    const int right = wrap(rank_ + 1, size_), left = wrap(rank_ - 1, size_);
    const auto slot = gloo::Slot::build(kRingReduceScatterSlot, tag);
    auto deadline = Clock::now() + op_timeout();
    for (int step = 0; step < size_ - 1; ++step) {
      const int send_chunk = wrap(rank_ - step - 1, size_);
      const int recv_chunk = wrap(rank_ - step - 2, size_);
      const size_t send_bytes = static_cast<size_t>(counts[send_chunk]) * element;
      const size_t recv_bytes = static_cast<size_t>(counts[recv_chunk]) * element;
      void* send_from =
          step == 0 ? in_base + offsets[send_chunk] * element : partial[(step - 1) % 2];
      void* reduce_into = step == size_ - 2 ? output.data_ptr() : partial[step % 2];
      std::unique_ptr<gloo::transport::UnboundBuffer> recv_buffer, send_buffer;
      if (recv_bytes > 0) {
        recv_buffer = context_->createUnboundBuffer(incoming, recv_bytes);
        recv_buffer->recv(left, slot);
      }
      if (send_bytes > 0) {
        send_buffer = context_->createUnboundBuffer(send_from, send_bytes);
        send_buffer->send(right, slot);
      }
      if (recv_buffer) {
        if (!recv_buffer->waitRecv(deadline)) throw CommError("receive aborted");
        kernel(reduce_into, in_base + offsets[recv_chunk] * element, incoming,
               static_cast<size_t>(counts[recv_chunk]));
      }
      if (send_buffer && !send_buffer->waitSend(deadline)) throw CommError("send aborted");
    }
  }

  // Pipelined chain: ranks in order from the root (root, root + 1, ...) receive the tensor in
  // chunks from their predecessor and forward each chunk to their successor as soon as it
  // arrived, straight from the tensor. The root sends the bytes once whatever the group size,
  // and every link of the chain carries data at the same time. All receives are posted up front
  // so no chunk waits for its receiver; each pair delivers the chunks of one slot in order.
  //
  // Each receiver then confirms to its predecessor that it holds every chunk, and senders wait
  // for that rather than for their sends alone: when a connection drops, Gloo fails the pending
  // receives on it but not the sends already queued for the socket, so a dead successor is
  // noticed at once instead of at the timeout.
  void chain_broadcast(const at::Tensor& tensor, int root, uint32_t tag) {
    const size_t bytes = tensor.nbytes();
    const size_t chunks = (bytes + kBroadcastChunkBytes - 1) / kBroadcastChunkBytes;
    const int position = (rank_ - root + size_) % size_;
    const int previous = (rank_ - 1 + size_) % size_, next = (rank_ + 1) % size_;
    const bool receives = position > 0, forwards = position < size_ - 1;
    auto offset = [](size_t k) { return k * kBroadcastChunkBytes; };
    auto length = [&](size_t k) { return std::min(kBroadcastChunkBytes, bytes - offset(k)); };
    auto buffer = context_->createUnboundBuffer(tensor.data_ptr(), bytes);
    uint8_t confirmations[2] = {1, 0};  // [0] goes to the predecessor, [1] comes from the successor
    auto confirmation = context_->createUnboundBuffer(confirmations, sizeof(confirmations));
    const auto slot = gloo::Slot::build(kChainBroadcastSlot, tag);
    const auto deadline = Clock::now() + op_timeout();
    // Gloo's errors name addresses; say what this rank was doing and with which neighbour.
    enum class Stage { kReceive, kSend, kAwaitConfirmation, kConfirm } stage = Stage::kReceive;
    size_t chunk = 0;
    auto doing = [&]() -> std::string {
      const std::string of =
          " chunk " + std::to_string(chunk + 1) + " of " + std::to_string(chunks);
      switch (stage) {
        case Stage::kReceive:
          return "receiving" + of + " from rank " + std::to_string(previous);
        case Stage::kSend:
          return "sending" + of + " to rank " + std::to_string(next);
        case Stage::kAwaitConfirmation:
          return "waiting for rank " + std::to_string(next) + " to confirm it received all " +
                 std::to_string(chunks) + " chunks";
        case Stage::kConfirm:
          break;
      }
      return "confirming to rank " + std::to_string(previous) + " that all chunks arrived";
    };
    auto at = [&](Stage s, size_t k) {
      stage = s;
      chunk = k;
    };
    try {
      if (forwards) {
        at(Stage::kAwaitConfirmation, 0);
        confirmation->recv(next, slot, 1, 1);
      }
      for (size_t k = 0; receives && k < chunks; ++k) {
        at(Stage::kReceive, k);
        buffer->recv(previous, slot, offset(k), length(k));
      }
      for (size_t k = 0; k < chunks; ++k) {
        if (receives) {
          at(Stage::kReceive, k);
          if (!buffer->waitRecv(time_left(deadline))) throw CommError("aborted");
        }
        if (forwards) {
          at(Stage::kSend, k);
          buffer->send(next, slot, offset(k), length(k));
        }
      }
      if (receives) {
        at(Stage::kConfirm, 0);
        confirmation->send(previous, slot, 0, 1);
      }
      if (forwards) {
        at(Stage::kAwaitConfirmation, 0);
        if (!confirmation->waitRecv(time_left(deadline))) throw CommError("aborted");
        // Confirmed, so every send has completed; this only settles Gloo's bookkeeping.
        for (size_t k = 0; k < chunks; ++k) {
          at(Stage::kSend, k);
          if (!buffer->waitSend(time_left(deadline))) throw CommError("aborted");
        }
      }
      if (receives) {
        at(Stage::kConfirm, 0);
        if (!confirmation->waitSend(time_left(deadline))) throw CommError("aborted");
      }
    } catch (const std::exception& e) {
      throw CommError(doing() + ": " + e.what());
    }
  }

  // What is left until `deadline`, never negative (Gloo reads -1 ms as "its own default").
  static milliseconds time_left(Clock::time_point deadline) {
    return std::max(milliseconds(0),
                    std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
  }

  std::shared_ptr<Store> root_store_;
  std::shared_ptr<Store> store_;
  std::string key_path_;
  std::vector<int> global_ranks_;  // rank in the root group (as the store knows it) per rank
  int rank_;
  int size_;
  std::string name_;
  milliseconds timeout_;
  milliseconds grace_;
  std::string host_;
  SameHostPath same_host_path_;
  std::unique_ptr<SameHostCollectives> same_host_;  // set when every rank is on this host
  CollectiveChecks checks_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  at::Tensor scratch_;  // ring reduce-scatter buffers, used by the operation thread only

  std::mutex mutex_;
  std::condition_variable queue_cv_;
  std::condition_variable transfers_cv_;
  std::deque<Operation> queue_;
  std::deque<PendingTransfer> transfers_;
  uint64_t collective_seq_ = 0;
  bool stopping_ = false;
  std::string broken_;
  std::set<std::string> subgroup_names_;
  std::thread worker_;
  std::thread waiter_;
};

}  // namespace

std::shared_ptr<Communicator> make_gloo_communicator(std::shared_ptr<Store> store, int rank,
                                                     int size, const std::string& name,
                                                     milliseconds timeout, const std::string& host,
                                                     SameHostPath same_host_path) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw CommError("group '" + name + "': rank " + std::to_string(rank) + " is not in 0.." +
                    std::to_string(size - 1));
  }
  if (timeout <= milliseconds(0)) throw CommError("group '" + name + "': timeout must be positive");
  std::vector<int> ranks(static_cast<size_t>(size));
  std::iota(ranks.begin(), ranks.end(), 0);
  return std::make_shared<GlooCommunicator>(std::move(store), "group/" + name, ranks, rank, name,
                                            timeout, host, same_host_path);
}

}  // namespace comm
}  // namespace ooze
