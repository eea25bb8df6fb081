// The CUDA backend: collectives over NCCL on one GPU per rank.
//
// Built only when nccl.h and the CUDA runtime are found (OOZE_HAVE_NCCL is then defined for
// every user of ooze_comm); guard calls with `#ifdef OOZE_HAVE_NCCL`.
//
// Streams. Each communicator owns a non-blocking CUDA stream on its device. An operation first
// orders that stream after the caller's current stream (torch's current stream with a CUDA
// LibTorch, the legacy default stream otherwise), runs there, and records a completion event.
// Work::wait() orders the caller's current stream after that event and also blocks the host
// until the event completes, so a wait bounded by the timeout reports dead peers instead of
// hanging. Tensors stay referenced until their operation completed, even if its Work is
// dropped, so their memory is never reused while NCCL still reads or writes it.
//
// Failures. Creation and every wait are bounded by `timeout`. A timeout or an NCCL error aborts
// the NCCL communicator and marks this communicator broken: the error names the group, the
// operation with its sequence number, and the ranks no longer connected to the store when the
// store can tell. Later operations on a broken communicator throw at once; make a new one.
//
// Point to point: NCCL has no tags, so `tag` is ignored and messages between a pair of ranks
// arrive in the order they were issued, whatever their tags. Sending to oneself is rejected.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/store.h"

namespace ooze {
namespace comm {

// Forms group `name` of `size` ranks on CUDA device `device_index`. Rank 0 publishes an NCCL
// unique id under "<name>/nccl_unique_id" in `store`; the others wait up to `timeout` for it.
// Blocks until every rank joined; after `timeout`, throws CommTimeoutError. Groups made with
// new_group(ranks, sub) are named "<name>/<sub>" and rendezvous under that prefix.
// Group ranks are taken to be the ranks the store reports in connected_ranks().
std::shared_ptr<Communicator> make_nccl_communicator(std::shared_ptr<Store> store, int rank,
                                                     int size, const std::string& name,
                                                     std::chrono::milliseconds timeout,
                                                     int device_index);

}  // namespace comm
}  // namespace ooze
