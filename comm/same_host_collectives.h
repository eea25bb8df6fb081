// The CPU collectives of a group whose ranks share one host: every rank reads what it needs
// from its peers' tensors where they lie (peer_memory.h; a broadcast's root also writes part of
// it into theirs), so each byte is copied once, where loopback TCP copies it into a socket,
// through the kernel and out again.
//
// A tensor that lies in an unnamed shared memory segment (core/shared_memory_segment.h) is read
// faster still: its peers map the segment once and copy from it as from their own memory, where
// the kernel's cross-process copy runs at 0.4-0.5 of memcpy on this machine. Callers that
// communicate the same large buffer again and again (FSDP's kept gather buffer, weight sync's
// broadcast buffers) allocate it there.
//
// Each operation runs in three steps on the group's operation thread:
//   1. exchange   every rank publishes the address and size of its tensor, and where it lies in
//                 a segment if it does (a small collective of the group's own transport, which
//                 also orders this operation after the ones before it on every rank);
//   2. copy       each rank copies or reduces from its peers' tensors into its own output;
//   3. barrier    no rank returns, and so changes or frees its tensor, while a peer still reads
//                 it.
// Reductions combine in rank order ((rank 0's value op rank 1's) op rank 2's ...), in blocks that
// stay in cache, so a result does not depend on which rank computed it, nor on timing.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "comm/peer_memory.h"
#include "comm/reduce_kernels.h"

namespace ooze::comm {

// Steps 1 and 3, provided by the group's transport.
struct SameHostControl {
  // Every rank's words (as many on every rank), in rank order.
  std::function<std::vector<uint64_t>(const std::vector<uint64_t>&)> exchange;
  std::function<void()> barrier;
};

class SameHostCollectives {
 public:
  explicit SameHostCollectives(std::unique_ptr<PeerMemory> peers);

  // As Communicator's (communicator.h), with `counts` the elements of each rank's share.
  // Tensors are contiguous; `input` may be a view of its rank's share of `output`.
  void all_gather(const at::Tensor& output, const at::Tensor& input,
                  const std::vector<int64_t>& counts, const SameHostControl& control);
  // AVG reduces as SUM: the caller divides.
  void reduce_scatter(const at::Tensor& output, const at::Tensor& input,
                      const std::vector<int64_t>& counts, ReduceKernel kernel,
                      const SameHostControl& control);
  // A reduce-scatter of the ranks' shares in place, then an all-gather of them.
  void all_reduce(const at::Tensor& tensor, ReduceKernel kernel, const SameHostControl& control);
  void broadcast(const at::Tensor& tensor, int root, const SameHostControl& control);

 private:
  struct PeerTensor {
    uint64_t address;
    uint64_t bytes;
    bool in_segment;  // its rank published where it lies in an unnamed segment
    char* mapped;     // its first byte in this rank's mapping of that segment, or nullptr
  };
  // Step 1: every rank's tensor, after checking that each holds `expected_bytes[r]`, with the
  // peers' segments mapped here where they can be.
  std::vector<PeerTensor> exchange(const at::Tensor& mine,
                                   const std::vector<uint64_t>& expected_bytes,
                                   const SameHostControl& control);
  // Copies `bytes` at `offset` of rank `peer`'s tensor into `into`: from the mapping when there
  // is one, through the kernel otherwise.
  void copy_from(int peer, const PeerTensor& tensor, size_t offset, void* into, size_t bytes) const;
  // Copies `bytes` from `from` to `offset` of rank `peer`'s tensor, the same two ways.
  void copy_to(int peer, const PeerTensor& tensor, size_t offset, const void* from,
               size_t bytes) const;
  // out[0, n) = the reduction over ranks r of rank r's elements [offset, offset + n) of its
  // tensor, whose own copy is `local`.
  void reduce_share(char* out, const char* local, const std::vector<PeerTensor>& tensors,
                    size_t offset_bytes, size_t bytes, size_t element, ReduceKernel kernel);

  std::unique_ptr<PeerMemory> peers_;
  std::vector<char> staging_;       // one reduction block per rank, kept between calls
  std::vector<const char*> parts_;  // each rank's block of the reduction at hand
  int cores_;                       // online on this host
};

}  // namespace ooze::comm
