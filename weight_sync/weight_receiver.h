// The engine's end of a weight sync (trainer/weight_syncer.h is the trainer's): where the
// buckets of weight_sync/bucket.h arrive and how each reaches the WeightSink (the
// engine, engine/engine.h).
//
//   colocated     the trainer rank on this node packs each bucket into one of two shared
//                 buffers that the receiver mapped once: POSIX shared memory on the CPU, CUDA
//                 IPC memory on a GPU (the trainer's device must be the engine's GPU).
//                 open_shared_buffers(buffers) then load_shared_bucket(slot, manifest) per
//                 bucket. The trainer unlinks shared-memory names as soon as its engines have
//                 opened them, so nothing stays in /dev/shm and the mappings are reused by every
//                 later sync.
//   disaggregated join_broadcast_group() once (trainer rank 0 is rank 0 of the group, the
//                 engines ranks 1..E), then receive_broadcast(manifests) per sync: bucket k+1 is
//                 received while bucket k is loaded.
//   colocated,    the engine's parameters move, once, into one shared memory segment
//   in place      (share_parameters()); every trainer rank on the node maps it writable and
//                 writes its own shards straight into the parameters, then the trainer calls
//                 shared_parameters_written(). Nothing is gathered, packed or copied again.
//
// The receiver only moves bytes; begin/finish of the sync, versions and refusals are the
// sink's (Engine::begin_weight_sync). A broadcast that fails (timeout, dead trainer) aborts the
// engine's sync, naming the bucket, and leaves the group: the trainer forms a new one.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/process_group.h"
#include "weight_sync/bucket.h"
#include "weight_sync/cuda_ipc_buffer.h"
#include "weight_sync/protocol.h"
#include "core/shared_memory_segment.h"
#include "weight_sync/weight_sink.h"

namespace ooze::weight_sync {

class WeightReceiver {
 public:
  explicit WeightReceiver(WeightSink& sink) : sink_(sink) {}

  // Maps the trainer's shared buffers, replacing any mapped before.
  void open_shared_buffers(const SharedWeightBuffers& buffers);
  // Loads the bucket the trainer packed into buffer `slot`; on a GPU, the copies are done when
  // this returns, so the trainer may pack the buffer again.
  void load_shared_bucket(int slot, const BucketManifest& manifest);
  // Unmaps the shared buffers (their memory returns once the trainer unmaps too).
  void close_shared_buffers();

  // Moves the sink's parameters into one shared memory segment on the first call (later calls
  // describe the same one), for trainer ranks on this node to write in place. A sink on a GPU
  // shares nothing: the segment's name is then empty. Says which sync the sink is in, if any:
  // a trainer writes only into an engine in its own sync.
  SharedParameters share_parameters();
  // The trainer ranks wrote every shared parameter in the sync in progress.
  void shared_parameters_written();

  // Joins the group (a collective with the trainer and the other engines, through the head's
  // key-value store), on the engine's device: NCCL on a GPU, Gloo on the CPU. Leaves any group
  // joined before.
  void join_broadcast_group(const BroadcastGroupSpec& spec);
  // Receives every bucket of `manifests`, in order, from rank 0 and loads it. Returns the bytes
  // received.
  int64_t receive_broadcast(const std::vector<BucketManifest>& manifests);
  void leave_broadcast_group();

 private:
  // A buffer of at least `nbytes` on the engine's device, reused across buckets.
  at::Tensor broadcast_buffer(int which, int64_t nbytes);

  WeightSink& sink_;
  std::mutex mutex_;  // one transfer at a time
  std::vector<SharedMemorySegment> shared_;
  std::vector<CudaIpcBuffer> cuda_shared_;
  std::vector<at::Tensor> shared_tensors_;
  SharedMemorySegment parameter_segment_;  // the engine's parameters, once shared
  SharedParameters shared_parameters_;
  std::shared_ptr<comm::Communicator> group_;
  std::string group_name_;
  at::Tensor broadcast_buffers_[2];
};

}  // namespace ooze::weight_sync
