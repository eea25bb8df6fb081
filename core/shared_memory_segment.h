// One POSIX shared memory segment: how a colocated weight bucket (one contiguous byte buffer)
// goes from the trainer process to an engine process on the same node without a network hop.
//
//   trainer                                      engine
//   auto segment = SharedMemorySegment::create(bytes);
//   pack the bucket into segment.as_tensor()
//   send segment.name() (an actor call)   -->    auto bucket = SharedMemorySegment::open(name,
//   bytes);
//                                                copy / unpack bucket.as_tensor(), reply
//   segment.unlink() (or let it go)       <--
//
// The creator's mapping is shared and writable: what it writes is what receivers read. A
// receiver's mapping is private copy-on-write: it reads the creator's bytes, and a write through
// it (an in-place op on an unpacked view) copies the touched page and never reaches the creator
// or another receiver. Pages a receiver has not written still show the creator's later writes,
// so the creator rewrites a segment only after its receivers are done with it.
//
// Leak policy. A name in /dev/shm holds memory until it is unlinked, even with nobody mapping it.
//   - The creator unlinks: explicitly with unlink() once every receiver has opened (or copied)
//     the segment, and otherwise in its destructor. Receivers never unlink by default, so the
//     creator may hand one segment to several receivers.
//   - Mappings are reference counted: as_tensor() views keep theirs alive after the
//     SharedMemorySegment is gone, and the memory returns to the system when the name is
//     unlinked and the last mapping is unmapped (process exit unmaps everything).
//   - A creator that dies without unwinding (SIGKILL, abort) leaves its names behind. Names carry
//     the creator's pid ("/<prefix>-<pid>-<counter>-<random>"), so cleanup_stale_segments()
//     removes those whose process no longer runs; processes that create or open weight sync
//     segments call it at start-up.
//   - An unnamed segment (create_unnamed) has no name to leak: it is a memfd of its creator,
//     gone with the creator and the last mapping.
//
// Every failure throws ooze::IoError naming the segment, its size and the system's reason.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace ooze {

// The prefix of weight sync segment names: "/ooze-ws-<pid>-<counter>-<random>".
inline constexpr char kSegmentPrefix[] = "ooze-ws";

class SharedMemorySegment {
 public:
  // Creates a new segment of `nbytes` (zero allowed) named "/<name_prefix>-<pid>-<counter>-
  // <random>" and maps it read-write. Its memory is reserved up front, so a full /dev/shm fails
  // here with an IoError rather than later with SIGBUS. `name_prefix` is letters, digits, '.',
  // '_' and '-', without the leading '/'.
  static SharedMemorySegment create(int64_t nbytes,
                                    const std::string& name_prefix = kSegmentPrefix);
  // Creates a segment with no name in /dev/shm (a memfd): others open it as
  // "/proc/<pid>/fd/<n>", its name(), while this object lives, and its memory goes back when
  // this process and every mapping are gone, however the process ends (a SIGKILL leaks nothing).
  // For memory that lives as long as its creator: a colocated engine's parameters.
  static SharedMemorySegment create_unnamed(int64_t nbytes);
  // Maps the existing segment `name` (with its leading '/'), which must hold exactly `nbytes`,
  // private and copy-on-write (see above). Fails when the name is gone (never created, or
  // already unlinked by its creator) or the size differs.
  static SharedMemorySegment open(const std::string& name, int64_t nbytes);
  // Maps the existing segment `name` shared and writable, like its creator: what this process
  // writes, the creator and every shared mapping see. How a trainer writes a colocated engine's
  // parameters where the engine reads them (weight_sync/weight_receiver.h).
  static SharedMemorySegment open_writable(const std::string& name, int64_t nbytes);

  SharedMemorySegment() = default;  // no segment: empty name, size 0
  ~SharedMemorySegment();           // unmaps (once no view remains); the creator also unlinks
  SharedMemorySegment(SharedMemorySegment&& other) noexcept;
  SharedMemorySegment& operator=(SharedMemorySegment&& other) noexcept;
  SharedMemorySegment(const SharedMemorySegment&) = delete;
  SharedMemorySegment& operator=(const SharedMemorySegment&) = delete;

  const std::string& name() const { return name_; }
  int64_t size() const { return size_; }
  void* data() const;  // nullptr when the size is 0
  // The inode of the segment's file: two names or descriptors reach the same segment when their
  // inodes agree. 0 for a segment of size 0.
  uint64_t inode() const { return inode_; }
  bool is_creator() const { return creator_; }
  bool is_unlinked() const { return unlinked_; }

  // A 1-D uint8 CPU tensor of size() elements viewing the mapping; it (and every view of it)
  // keeps the mapping alive after this object is destroyed or unlinked.
  at::Tensor as_tensor() const;

  // Removes the name from /dev/shm: later open() calls fail, mappings stay valid. Called by the
  // creator once receivers have opened the segment; idempotent. A name already removed by
  // someone else counts as unlinked.
  void unlink();

 private:
  struct Mapping;
  static SharedMemorySegment open_mapped(const std::string& name, int64_t nbytes, bool writable);
  void release();  // what the destructor does: unlink (creator), close the descriptor

  std::string name_;
  int64_t size_ = 0;
  std::shared_ptr<Mapping> mapping_;  // null when the size is 0
  bool creator_ = false;
  bool unlinked_ = false;
  uint64_t inode_ = 0;
  int descriptor_ = -1;  // an unnamed segment's creator keeps its memfd open for others to open
};

// Where a range of this process's memory lies in an unnamed segment it created and still holds:
// a peer process on this host reaches those bytes by opening "/proc/<pid>/fd/<descriptor>" (the
// inode must match) and mapping it, then copies them as fast as its own memory. Collectives on
// one host read their peers' tensors that way (comm/same_host_collectives.h).
struct UnnamedSegmentPlace {
  int descriptor;
  uint64_t inode;
  uint64_t offset;  // of the range's first byte from the segment's
  int64_t size;     // of the whole segment
};
// nullopt unless [address, address + bytes) lies wholly inside one such segment.
std::optional<UnnamedSegmentPlace> find_unnamed_segment(const void* address, size_t bytes);
// The segment at `place` in the process `pid` on this host, mapped shared and writable (and
// populated): "/proc/<pid>/fd/<descriptor>" opened, its inode checked. Throws IoError when it
// cannot be opened or its inode differs (the descriptor was closed and reused since `place` was
// published).
SharedMemorySegment open_unnamed_segment_of(int64_t pid, const UnnamedSegmentPlace& place);

// A 1-D uint8 tensor of `nbytes` on `device` that collectives on this host read at memory speed.
// On the CPU it lies in a new unnamed segment, which lives as long as the tensor and its views.
// Where no segment can be made (a file-size limit, `ulimit -f`, applies to segments too), and on
// other devices, it lies in ordinary memory (after a warning, on the CPU): peers then read it
// through the kernel, slower, and nothing else changes.
at::Tensor empty_for_same_host_peers(int64_t nbytes, c10::Device device = c10::kCPU);

// Unlinks every /dev/shm entry "<name_prefix>-<pid>-..." whose process <pid> no longer runs (or
// is a zombie) and returns how many it removed. Segments of running processes, including this
// one, and names that do not follow the pattern are left alone. A pid reused by an unrelated
// process keeps its old segments until that process exits too; pids are only meaningful within
// one pid namespace, so processes sharing /dev/shm must share a pid namespace.
int64_t cleanup_stale_segments(const std::string& name_prefix = kSegmentPrefix);

}  // namespace ooze
