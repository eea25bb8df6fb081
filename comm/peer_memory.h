// Reading and writing a peer process's memory where it lies, when the ranks of a group share one
// host: Linux cross-memory attach (process_vm_readv, process_vm_writev) copies bytes straight
// between two processes' address spaces, once, through the kernel, with no staging buffer and no
// socket. MPI implementations use it for large messages between ranks on one node; ooze's CPU
// collectives use it the same way (same_host_collectives.h).
//
// A group may use it only if every rank can read every other rank, which depends on things no
// single rank can see: the peers' kernel (the same boot), their pid namespace, and whether the
// kernel lets this process read them (same user, ptrace policy). So the ranks do not guess:
// each publishes its pid and the address of a random word in its memory, reads every peer's
// word and writes it back, and the group uses peer memory only if every rank could, every time.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/store.h"
#include "core/shared_memory_segment.h"

namespace ooze::comm {

class PeerMemory {
 public:
  // Called by every rank of a group of `size` with the group's store; returns the same answer on
  // every rank: a PeerMemory when each rank read each other's probe word, nullptr otherwise
  // (`why_not`, when given, says why). Throws CommTimeoutError when a peer does not answer
  // within `timeout`.
  static std::unique_ptr<PeerMemory> connect(Store& store, int rank, int size,
                                             std::chrono::milliseconds timeout,
                                             std::string* why_not = nullptr);

  // Copies `bytes` from address `remote` in rank `peer`'s memory to `local`. Throws CommError
  // naming the rank, its pid and the system's reason (a peer that exited: "No such process").
  void read(int peer, uint64_t remote, void* local, size_t bytes) const;
  // Copies `bytes` from `local` to address `remote` in rank `peer`'s memory; fails as read().
  void write(int peer, uint64_t remote, const void* local, size_t bytes) const;

  // Rank `peer`'s unnamed segment at `place` (core/shared_memory_segment.h), mapped shared and
  // writable into this process. Bytes copied from or to it go as fast as this process's own
  // memory, where read() and write() go through the kernel page by page at less than half that.
  // nullptr when it cannot be mapped (the peer let it go, or /proc hides it); read() and write()
  // still reach it.
  // A mapping is kept for the operations that follow. Because it also keeps the segment's memory
  // alive, mapping a new segment of a peer first drops those that peer has let go.
  char* map_segment(int peer, const UnnamedSegmentPlace& place);

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(pids_.size()); }

 private:
  PeerMemory(int rank, std::vector<pid_t> pids) : rank_(rank), pids_(std::move(pids)) {}
  void transfer(bool reading, int peer, uint64_t remote, void* local, size_t bytes) const;

  int rank_;
  std::vector<pid_t> pids_;
  std::map<std::pair<int, uint64_t>, SharedMemorySegment> mapped_;  // by (peer, inode)
};

}  // namespace ooze::comm
