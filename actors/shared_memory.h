// Large tensor bytes between processes of one machine through POSIX shared memory: the sender
// copies them once into a fresh segment, the receiver maps that segment and the tensor it
// receives is a view of the mapping (no copy). Over a socket they would be copied twice (into
// the kernel and out of it).
//
// A segment is named "/ooze-<sender pid>-<n>" and unlinked by the receiver as soon as it is
// mapped, so it disappears with the last mapping. If the message never arrives (the receiver
// died), the sender's node agent removes the sender's segments when the sender exits, and a
// driver removes its own at shutdown.
#pragma once

#include <cstdint>
#include <memory>
#include <zmq.hpp>

namespace ooze::actors {

// Tensor bytes at least this large go through shared memory when it is enabled. Below it a
// fresh segment (pages the kernel must zero) costs more than the socket copy it saves.
constexpr uint64_t kSharedMemoryMinBytes = 16 << 20;

// On for processes whose peers are all on this machine (the embedded runtime, ipc workers).
void enable_shared_memory(bool enabled);
bool shared_memory_enabled();

// Copies `nbytes` at `data` into a new segment; returns the descriptor to send in its place.
zmq::message_t write_shared_segment(const void* data, uint64_t nbytes);
// Maps the segment `descriptor` names (and unlinks it); sets `data`; the returned owner unmaps.
// Throws WireFormatError when the descriptor is malformed, names no ooze segment, or the
// segment does not hold `nbytes`.
std::shared_ptr<void> map_shared_segment(const zmq::message_t& descriptor, uint64_t nbytes,
                                         void** data);
// Removes the segments process `pid` created that nobody mapped.
void remove_shared_segments_of(int pid);

}  // namespace ooze::actors
