#include "comm/peer_memory.h"

#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "comm/comm_error.h"
#include "core/error.h"

namespace ooze::comm {
namespace {

// Peers of the same boot share this id; a peer on another machine (or VM) has its own.
std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

// The word peers read (and write back) to prove they can: random per process, so that reading
// some other process that happens to have the announced pid (another pid namespace) cannot pass.
uint64_t& probe_word() {
  static uint64_t word = [] {
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32) ^ device() ^ static_cast<uint64_t>(getpid());
  }();
  return word;
}

// What a rank publishes: its pid and where its probe word is, with the word's value.
struct Probe {
  pid_t pid = 0;
  uint64_t address = 0;
  uint64_t word = 0;
};

Probe parse(const std::string& text) {
  Probe probe;
  std::istringstream in(text);
  in >> probe.pid >> probe.address >> probe.word;
  return probe;
}

}  // namespace

std::unique_ptr<PeerMemory> PeerMemory::connect(Store& store, int rank, int size,
                                                std::chrono::milliseconds timeout,
                                                std::string* why_not) {
  auto refuse = [&](const std::string& reason) -> std::unique_ptr<PeerMemory> {
    if (why_not) *why_not = reason;
    return nullptr;
  };
  if (size < 2) return refuse("a group of one has no peers");
  // First the hosts, so that a rank relaxes its ptrace policy (below) only for peers that may
  // use it: those of the same boot.
  const std::string boot = boot_id();
  store.set("peer_memory_host/" + std::to_string(rank), boot);
  for (int r = 0; r < size; ++r) {
    if (store.get("peer_memory_host/" + std::to_string(r), timeout) != boot) {
      return refuse("rank " + std::to_string(r) + " runs on another host");
    }
  }
  // Under Yama's ptrace_scope 1 a process may read only its descendants unless it names a
  // reader; ranks are siblings, so each lets any process of its user read it, as MPI's
  // cross-memory transports do.
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);

  const uint64_t& word = probe_word();
  std::ostringstream mine;
  mine << getpid() << ' ' << reinterpret_cast<uint64_t>(&word) << ' ' << word;
  store.set("peer_memory/" + std::to_string(rank), mine.str());

  std::vector<Probe> peers(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    peers[static_cast<size_t>(r)] = parse(store.get("peer_memory/" + std::to_string(r), timeout));
  }
  std::string problem;
  for (int r = 0; r < size && problem.empty(); ++r) {
    const Probe& peer = peers[static_cast<size_t>(r)];
    if (r == rank) continue;
    uint64_t read_back = 0;
    iovec local{&read_back, sizeof(read_back)};
    iovec remote{reinterpret_cast<void*>(peer.address), sizeof(read_back)};
    const ssize_t got = process_vm_readv(peer.pid, &local, 1, &remote, 1, 0);
    if (got != static_cast<ssize_t>(sizeof(read_back))) {
      problem = "rank " + std::to_string(rank) + " cannot read rank " + std::to_string(r) +
                " (pid " + std::to_string(peer.pid) + "): " + std::strerror(errno);
    } else if (read_back != peer.word) {
      problem = "rank " + std::to_string(r) + " (pid " + std::to_string(peer.pid) +
                ") is in another pid namespace";
    } else if (process_vm_writev(peer.pid, &local, 1, &remote, 1, 0) !=
               static_cast<ssize_t>(sizeof(read_back))) {
      problem = "rank " + std::to_string(rank) + " cannot write to rank " + std::to_string(r) +
                " (pid " + std::to_string(peer.pid) + "): " + std::strerror(errno);
    }
  }
  // Every rank learns every verdict, so all of them decide alike.
  store.set("peer_memory_verdict/" + std::to_string(rank), problem.empty() ? "ok" : problem);
  for (int r = 0; r < size; ++r) {
    const std::string verdict = store.get("peer_memory_verdict/" + std::to_string(r), timeout);
    if (verdict != "ok") return refuse(verdict);
  }
  std::vector<pid_t> pids;
  for (const Probe& peer : peers) pids.push_back(peer.pid);
  return std::unique_ptr<PeerMemory>(new PeerMemory(rank, std::move(pids)));
}

void PeerMemory::read(int peer, uint64_t remote, void* local, size_t bytes) const {
  transfer(/*reading=*/true, peer, remote, local, bytes);
}

void PeerMemory::write(int peer, uint64_t remote, const void* local, size_t bytes) const {
  transfer(/*reading=*/false, peer, remote, const_cast<void*>(local), bytes);
}

void PeerMemory::transfer(bool reading, int peer, uint64_t remote, void* local,
                          size_t bytes) const {
  const pid_t pid = pids_[static_cast<size_t>(peer)];
  char* here = static_cast<char*>(local);
  while (bytes > 0) {
    iovec mine{here, bytes};
    iovec theirs{reinterpret_cast<void*>(remote), bytes};
    const ssize_t moved = reading ? process_vm_readv(pid, &mine, 1, &theirs, 1, 0)
                                  : process_vm_writev(pid, &mine, 1, &theirs, 1, 0);
    if (moved <= 0) {
      const int error = moved < 0 ? errno : EIO;
      throw CommError(std::string(reading ? "reading " : "writing ") + std::to_string(bytes) +
                      " bytes " + (reading ? "of" : "to") + " rank " + std::to_string(peer) +
                      " (pid " + std::to_string(pid) + ") failed: " + std::strerror(error));
    }
    // The kernel stops short only at an unmapped page or a signal; go on from there.
    here += moved;
    remote += static_cast<uint64_t>(moved);
    bytes -= static_cast<size_t>(moved);
  }
}

char* PeerMemory::map_segment(int peer, const UnnamedSegmentPlace& place) {
  auto found = mapped_.find({peer, place.inode});
  if (found == mapped_.end()) {
    // A segment the peer let go has no descriptor there any more (or another file has it).
    for (auto it = mapped_.begin(); it != mapped_.end();) {
      struct stat info {};
      const bool let_go = it->first.first == peer && (stat(it->second.name().c_str(), &info) != 0 ||
                                                      info.st_ino != it->first.second);
      it = let_go ? mapped_.erase(it) : std::next(it);
    }
    try {
      // Shared and populated: the peer's pages themselves, with no fault on the first copy.
      SharedMemorySegment segment =
          open_unnamed_segment_of(pids_[static_cast<size_t>(peer)], place);
      found = mapped_.emplace(std::make_pair(peer, place.inode), std::move(segment)).first;
    } catch (const IoError&) {
      return nullptr;
    }
  }
  return static_cast<char*>(found->second.data()) + place.offset;
}

}  // namespace ooze::comm
