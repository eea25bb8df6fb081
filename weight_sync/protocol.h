// The messages of a weight sync that are not buckets (weight_sync/bucket.h has those): how the
// trainer tells an engine where the weights will arrive. Both ends include this header; cereal
// carries the types through the actor runtime.
#pragma once

#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "weight_sync/bucket.h"

namespace ooze::weight_sync {

// Where an engine joins the trainer's broadcast group for disaggregated syncs.
struct BroadcastGroupSpec {
  std::string name;  // unique per group formation: the key prefix in the head's store
  int rank = 1;      // this engine's rank; trainer rank 0 is the root
  int world_size = 2;
  comm::ProcessGroupOptions options;  // timeout (--weight-sync-timeout); host: ignored, the
                                      // engine's own node address is used
  template <class A>
  void serialize(A& ar) {
    ar(name, rank, world_size, options);
  }
};

// The trainer's two colocated hand-over buffers, as an engine maps them.
struct SharedWeightBuffers {
  bool cuda_ipc = false;             // CUDA IPC handles (weight_sync/cuda_ipc_buffer.h), else
  std::vector<std::string> handles;  // shared-memory names
  int64_t nbytes = 0;                // each buffer's size
  template <class A>
  void serialize(A& ar) {
    ar(cuda_ipc, handles, nbytes);
  }
};

// A colocated engine's parameters where they live: one shared memory segment laid out as one
// bucket, which trainer processes on the engine's node map writable and fill in place, each
// rank with its own shards (no gather, no bucket, no copy on the engine's side).
struct SharedParameters {
  std::string segment;    // its name; empty when the engine cannot share (its weights are on a GPU)
  std::string host;       // the engine's node address: only processes there can map the segment
  BucketManifest layout;  // every parameter, in the engine's dtype
  int64_t syncing_version = -1;  // the version of the weight sync in progress; -1: none
  template <class A>
  void serialize(A& ar) {
    ar(segment, host, layout, syncing_version);
  }
};

}  // namespace ooze::weight_sync
