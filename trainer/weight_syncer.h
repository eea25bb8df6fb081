// The trainer's end of weight sync: after a training step, every rank of the trainer calls
// sync(version) and the new weights reach every rollout engine, bucket by bucket
// (trainer/trainer_buckets.h cuts them from the FSDP shards; weight_sync/weight_receiver.h is
// the engine's end).
//
//   colocated      engine i shares a node (on a GPU: the GPU) with trainer rank i mod W, which
//                  serves it (begins and finishes its syncs). On the CPU the weights go in
//                  place: the engine keeps its parameters in shared memory, every rank maps it
//                  and writes its own shards there, converted to the engine's dtype, all ranks
//                  at once (trainer/shared_parameter_writer.h): one copy, no gather. Where that
//                  cannot be (a GPU, merged LoRA tensors, an engine whose memory this rank
//                  cannot map), the ranks agree to go by buckets: each bucket is packed into one
//                  of two buffers both processes mapped once, POSIX shared memory on the CPU and
//                  CUDA IPC memory on a GPU, and the engine copies it into its weights while the
//                  rank packs the next bucket into the other buffer. Every rank serves its
//                  engines at once, as in Slime.
//   disaggregated  trainer rank 0 and the engines form one broadcast group (Gloo on the CPU,
//                  NCCL on a GPU) through the head's key-value store; the buckets' manifests go
//                  to the engines in one actor call, the bytes by broadcast, and bucket k+1 is
//                  made while bucket k is on the wire. On the CPU, with every trainer rank on
//                  rank 0's host, each rank writes its own shards' slices of the bucket straight
//                  into rank 0's broadcast buffer, which it maps (trainer/shard_slice_writer.h):
//                  one copy, no gather. Otherwise (a GPU, merged LoRA tensors, ranks on other
//                  hosts) the units are gathered and the bucket packed on rank 0.
//
// One sync, on every served engine: begin_weight_sync(version) (the engine stops generating
// between two steps; in-flight requests kept or aborted), the buckets, finish_weight_sync
// (every parameter arrived: the version becomes current, the prefix cache is flushed, generation
// resumes); with --check-weight-sync the engines' per-tensor checksums are then compared with the
// trainer's. Versions must increase: an engine refuses one that is not newer than its own.
//
// Faults. Every wait is bounded by --weight-sync-timeout. An engine that dies or stops answering
// is named in the WeightSyncError, with the bucket; colocated, the rank's other engines still
// complete. A disaggregated broadcast fails for the whole group (as NCCL's does): the engines
// that received part of it refuse to generate, and the next sync forms a new group. An engine
// restarted after a failure is brought up to date alone with sync_engine().
//
// Every trainer rank must call sync()/sync_engine() with the same arguments, in the same order:
// the walk is collective (it all-gathers each FSDP unit, or the ranks agree bucket by bucket).
//
// Partial syncs. When only some tensors change from step to step (LoRA: the adapted weights,
// trainer/lora_weights.h), SyncedWeights::changed lists them, and every sync after an engine's
// first sends only those (Engine::begin_weight_sync with partial). Everything is sent again
// after a failure on any rank and to a restarted engine: the ranks agree on it by an all-reduce
// before the walk, so they always walk the same plan.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/runtime.h"
#include "comm/communicator.h"
#include "core/error.h"
#include "core/shared_memory_segment.h"
#include "serving/rollout_engine_actor.h"
#include "trainer/shard_slice_writer.h"
#include "trainer/shared_parameter_writer.h"
#include "trainer/trainer_buckets.h"
#include "trainer/weight_sync_options.h"
#include "weight_sync/cuda_ipc_buffer.h"

namespace ooze::fsdp {
class FullyShardedModule;
}

namespace ooze::trainer {

class WeightSyncError : public Error {
 public:
  using Error::Error;
};

// Whether a trainer rank's call failed with WeightSyncError, which the driver sees as the rank's
// RemoteError.
inline bool is_weight_sync_error(const actors::RemoteError& error) {
  return error.type().find("WeightSyncError") != std::string::npos;
}

enum class EnginePlacement { kColocated, kDisaggregated };

// What one sync did on this rank. Times in seconds.
struct WeightSyncReport {
  int64_t version = 0;
  int64_t buckets = 0;
  int64_t bytes = 0;    // weight bytes each engine received (in the engine's dtype)
  int64_t engines = 0;  // engines this rank delivered to
  double seconds = 0;
  double pack_seconds = 0;      // gathering the units and packing the buckets
  double transfer_seconds = 0;  // waiting for hand-overs, broadcasts and loads beyond the packing
  double control_seconds = 0;   // begin, finish, group formation and checks
  // Every rank wrote its own slices where they go (an engine's parameters, or rank 0's broadcast
  // buffers), and no unit was gathered.
  bool slices_written = false;
  template <class A>
  void serialize(A& ar) {
    ar(version, buckets, bytes, engines, seconds, pack_seconds, transfer_seconds, control_seconds,
       slices_written);
  }
};

// What a sync sends: `all` the engines' tensors, and of them the ones that `changed` since
// the last sync (empty: every sync sends all).
struct SyncedWeights {
  std::vector<SyncedTensor> all;
  std::vector<SyncedTensor> changed;
};

class WeightSyncer {
 public:
  using EngineHandle = actors::ActorHandle<serving::RolloutEngine>;

  // `engines` in the same order on every rank; `engine_dtype` is the engines' parameter dtype
  // (EngineInfo::dtype). `name` makes the broadcast group's keys unique in the cluster.
  WeightSyncer(fsdp::FullyShardedModule& model, SyncedWeights weights, at::ScalarType engine_dtype,
               std::vector<EngineHandle> engines, EnginePlacement placement,
               WeightSyncOptions options, std::string name);
  // Every sync sends every parameter of `model`.
  WeightSyncer(fsdp::FullyShardedModule& model, at::ScalarType engine_dtype,
               std::vector<EngineHandle> engines, EnginePlacement placement,
               WeightSyncOptions options, std::string name);
  ~WeightSyncer();
  WeightSyncer(const WeightSyncer&) = delete;
  WeightSyncer& operator=(const WeightSyncer&) = delete;

  // Sends the full weights as `version` to every engine. Throws WeightSyncError naming each
  // engine that failed (the others have the version).
  WeightSyncReport sync(int64_t version, bool abort_in_flight = false);
  // Sends the full weights as `version` to engine `index` alone (a restarted engine). `version`
  // may equal the others' current one: it only has to be newer than this engine's.
  WeightSyncReport sync_engine(size_t index, int64_t version);

  // The plan of a sync that sends everything.
  const std::vector<weight_sync::BucketManifest>& plan() const { return all_.plan(); }
  // The indices of the engines this rank delivers to (colocated: i mod W == rank; disaggregated:
  // all of them on rank 0, none elsewhere).
  std::vector<size_t> served_engines() const;

 private:
  struct Target;  // one engine of a sync, and how it is doing
  WeightSyncReport run(int64_t version, bool abort_in_flight, const std::vector<size_t>& indices);
  // Whether this sync sends only the changed tensors: no rank has a reason to send all.
  bool agree_on_partial();
  // What a shared or broadcast buffer must hold: the largest bucket of either plan.
  int64_t largest_bucket_bytes() const;
  void deliver_colocated(std::vector<Target>& targets, WeightSyncReport& report);
  // The in-place sync of engines `indices` (all of the sync's, served or not); false, on every
  // rank, when some rank cannot write into some engine: the buckets go instead.
  bool deliver_in_place(std::vector<Target>& targets, const std::vector<size_t>& indices,
                        WeightSyncReport& report);
  // This rank's writer into engine `index`, made anew when its shared parameters changed (a
  // restart). Returns why it must not be written in the sync to `version` ("" when it may);
  // throws what keeps this rank from writing in place at all.
  std::string map_engine_parameters(size_t index, int64_t version);
  // --check-weight-sync in place: every rank's (CRC-32, bytes) of its slice of each tensor, in
  // all_'s order, combined into each tensor's CRC-32 (a collective).
  void combine_slice_checksums(const std::vector<std::pair<uint32_t, int64_t>>& slices);
  void deliver_broadcast(std::vector<Target>& targets, WeightSyncReport& report);
  // Disaggregated, every rank alike: whether each rank writes its slices into rank 0's broadcast
  // buffers in this sync. Rank 0 offers them when it can (`offer`: it is delivering), the others
  // map them; false on every rank when it did not offer or some rank cannot map them.
  bool agree_on_writing_into_root(bool offer, WeightSyncReport& report);
  void map_root_buffers(const at::Tensor& places);
  // The walk of the buckets when every rank writes into rank 0's buffers; rank 0 broadcasts each
  // bucket once all have written it. Returns rank 0's failure ("" when every bucket went).
  std::string write_into_root(WeightSyncReport& report);
  void await_broadcast(comm::WorkPtr& sending, size_t bucket, std::string& failure,
                       WeightSyncReport& report);
  void walk_without_delivering(WeightSyncReport& report);
  // Calls `method` with `args` on every engine of `targets` that has not failed yet, then waits
  // for each answer; a failure sticks to its engine, named with `what`.
  template <class Method, class... Args>
  void call_targets(std::vector<Target>& targets, const std::string& what, Method method,
                    const Args&... args);
  void open_shared_buffers(std::vector<Target>& targets);
  void form_group(std::vector<Target>& targets);
  // Drops the broadcast group when engine `index` is in it (a failed or restarted engine: the
  // next sync forms a new one).
  void leave_group_of(size_t index);
  // Packs bucket k into `buffer` (its per-tensor checksums noted with --check-weight-sync).
  void pack(size_t k, at::Tensor& buffer, WeightSyncReport& report);
  void check_checksums(std::vector<Target>& targets);

  fsdp::FullyShardedModule& model_;
  std::vector<EngineHandle> engines_;
  EnginePlacement placement_;
  WeightSyncOptions options_;
  std::string name_;
  TrainerBuckets all_;
  std::optional<TrainerBuckets> changed_;  // none: every sync sends all_
  TrainerBuckets* buckets_ = &all_;        // the plan of the sync in progress
  bool send_all_next_ = true;              // this rank's engines are new, restarted or failed
  int rank_ = 0;
  int world_size_ = 1;
  std::map<std::string, uint32_t> trainer_checksums_;  // of the last sync's packed tensors

  // Colocated: the two shared buffers (segments on the CPU, CUDA IPC memory on a GPU), and
  // which engines mapped them.
  std::vector<SharedMemorySegment> shared_segments_;
  std::vector<weight_sync::CudaIpcBuffer> cuda_buffers_;
  std::vector<at::Tensor> shared_;
  std::vector<bool> engine_mapped_;
  std::vector<int32_t> engine_restarts_;  // the runtime's count when each was last served
  // Colocated on the CPU: this rank's writer into each engine's shared parameters, by index.
  std::map<size_t, std::unique_ptr<SharedParameterWriter>> parameter_writers_;
  bool warned_not_in_place_ = false;
  // Disaggregated: the broadcast group, the engines in it (ranks 1..), and the two buckets in
  // flight, kept from sync to sync on the CPU: packing into memory touched before is several
  // times faster than into fresh pages.
  std::shared_ptr<comm::Communicator> group_;
  std::vector<size_t> group_members_;
  at::Tensor broadcast_buffers_[2];
  // Disaggregated on the CPU: where this rank writes bucket k (root_buffers_[k % 2]: rank 0's
  // own buffers there, mappings of them elsewhere), the mappings, and one writer per bucket.
  at::Tensor root_buffers_[2];
  std::vector<SharedMemorySegment> root_segments_;
  std::vector<std::unique_ptr<ShardSliceWriter>> bucket_writers_;
};

}  // namespace ooze::trainer
