#include "core/shared_memory_segment.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <regex>
#include <string>
#include <vector>

#include "tests/support/expect_error.h"
#include "tests/support/file_size_limit.h"

namespace ooze {
namespace shared_memory_segment_test {

using ooze::testing::error_message_of;
namespace fs = std::filesystem;

constexpr int kLineTimeoutMs = 10000;

// The byte pattern processes write with a plain loop; tests compare against pattern_tensor(),
// built independently with tensor ops.
uint8_t pattern_byte(int64_t i) { return static_cast<uint8_t>((i * 31 + 7) % 256); }

at::Tensor pattern_tensor(int64_t n) {
  return at::arange(n, at::kLong).mul(31).add(7).remainder(256).to(at::kByte);
}

void write_pattern(void* data, int64_t n) {
  auto* bytes = static_cast<uint8_t*>(data);
  for (int64_t i = 0; i < n; ++i) bytes[i] = pattern_byte(i);
}

bool holds_pattern(const void* data, int64_t n) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  for (int64_t i = 0; i < n; ++i) {
    if (bytes[i] != pattern_byte(i)) return false;
  }
  return true;
}

bool in_dev_shm(const std::string& name) { return fs::exists("/dev/shm" + name); }

int dev_shm_entries_starting_with(const std::string& start) {
  int count = 0;
  for (const auto& entry : fs::directory_iterator("/dev/shm")) {
    if (entry.path().filename().string().rfind(start, 0) == 0) ++count;
  }
  return count;
}

int open_descriptors() {
  int count = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator("/proc/self/fd")) ++count;
  return count;
}

// Mappings of this process whose file name contains `part` (unlinked ones included).
int mappings_of(const std::string& part) {
  std::ifstream maps("/proc/self/maps");
  int count = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.find("/dev/shm/" + part) != std::string::npos) ++count;
  }
  return count;
}

void write_line(int fd, const std::string& text) {
  std::string line = text + "\n";
  ASSERT_EQ(write(fd, line.data(), line.size()), static_cast<ssize_t>(line.size()));
}

// One line from `fd`, or "" when the other end closed it or nothing came within the timeout.
std::string read_line(int fd) {
  std::string line;
  char c;
  while (true) {
    pollfd ready{fd, POLLIN, 0};
    if (poll(&ready, 1, kLineTimeoutMs) <= 0) return "";
    if (read(fd, &c, 1) != 1) return "";
    if (c == '\n') return line;
    line += c;
  }
}

// A forked process running `body` with two pipes to the test: it reads from `in` and writes to
// `out`. Its exit code is what `body` returns (99 when it throws). Only plain system calls and
// SharedMemorySegment run in the child, never GoogleTest assertions.
struct Child {
  pid_t pid = -1;
  int to_child = -1;
  int from_child = -1;

  static Child start(const std::function<int(int in, int out)>& body) {
    int down[2], up[2];
    if (pipe(down) != 0 || pipe(up) != 0) throw std::runtime_error("pipe failed");
    Child child;
    child.pid = fork();
    if (child.pid < 0) throw std::runtime_error("fork failed");
    if (child.pid == 0) {
      close(down[1]);
      close(up[0]);
      int code = 99;
      try {
        code = body(down[0], up[1]);
      } catch (...) {
      }
      _exit(code);
    }
    close(down[0]);
    close(up[1]);
    child.to_child = down[1];
    child.from_child = up[0];
    return child;
  }

  // The exit code, or 128 + signal.
  int wait() {
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return -1;
    pid = -1;
    close(to_child);
    close(from_child);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  void kill_now() {
    kill(pid, SIGKILL);
    wait();
  }
};

TEST(SharedMemorySegment, ChildCreatesParentReadsChildUnlinks) {
  constexpr int64_t kBytes = (1 << 20) + 3;
  Child child = Child::start([](int in, int out) {
    auto segment = SharedMemorySegment::create(kBytes);
    write_pattern(segment.data(), kBytes);
    std::string line = segment.name() + "\n";
    if (write(out, line.data(), line.size()) < 0) return 2;
    if (read_line(in) != "opened") return 3;
    // The receiver wrote into its view: a private copy, never the creator's bytes.
    if (!holds_pattern(segment.data(), kBytes)) return 4;
    segment.unlink();
    if (in_dev_shm(segment.name()) || !segment.is_unlinked()) return 5;
    line = "unlinked\n";
    if (write(out, line.data(), line.size()) < 0) return 6;
    return 0;
  });

  std::string name = read_line(child.from_child);
  ASSERT_TRUE(std::regex_match(
      name, std::regex("/ooze-ws-" + std::to_string(child.pid) + "-[0-9]+-[0-9a-f]{8}")))
      << name;
  auto segment = SharedMemorySegment::open(name, kBytes);
  EXPECT_FALSE(segment.is_creator());
  at::Tensor view = segment.as_tensor();
  EXPECT_EQ(view.scalar_type(), at::kByte);
  EXPECT_TRUE(view.device().is_cpu());
  ASSERT_EQ(view.dim(), 1);
  ASSERT_EQ(view.numel(), kBytes);
  EXPECT_EQ(view.data_ptr(), segment.data());
  at::Tensor expected = pattern_tensor(kBytes);
  EXPECT_TRUE(view.equal(expected));
  view.slice(0, 0, 4096).fill_(0);

  write_line(child.to_child, "opened");
  EXPECT_EQ(read_line(child.from_child), "unlinked");
  EXPECT_EQ(child.wait(), 0);
  EXPECT_FALSE(in_dev_shm(name));

  std::string message = error_message_of<IoError>([&] { SharedMemorySegment::open(name, kBytes); });
  EXPECT_CONTAINS(message, name);
  EXPECT_CONTAINS(message, std::to_string(kBytes) + " bytes");
  EXPECT_CONTAINS(message, std::strerror(ENOENT));
  EXPECT_CONTAINS(message, "already unlinked");

  // The mapping outlives the name and the creator.
  EXPECT_TRUE(view.slice(0, 4096).equal(expected.slice(0, 4096)));
  EXPECT_EQ(view.slice(0, 0, 4096).sum().item<int64_t>(), 0);
}

// A colocated engine's parameters: the engine creates an unnamed segment, the trainer maps it
// writable and writes into it, and the engine reads the trainer's bytes where they lie. Nothing
// appears in /dev/shm, and a killed creator takes its memory's name with it.
TEST(SharedMemorySegment, AnUnnamedSegmentIsWrittenByAnotherProcessAndLeavesWithItsCreator) {
  constexpr int64_t kBytes = (1 << 20) + 5;
  Child child = Child::start([](int in, int out) {
    auto segment = SharedMemorySegment::create_unnamed(kBytes);
    std::string line = segment.name() + "\n";
    if (write(out, line.data(), line.size()) < 0) return 2;
    if (read_line(in) != "written") return 3;
    if (!holds_pattern(segment.data(), kBytes)) return 4;  // the writer's bytes, in place
    line = "checked\n";
    if (write(out, line.data(), line.size()) < 0) return 5;
    pause();  // until killed
    return 0;
  });
  const std::string name = read_line(child.from_child);
  ASSERT_TRUE(
      std::regex_match(name, std::regex("/proc/" + std::to_string(child.pid) + "/fd/[0-9]+")))
      << name;
  at::Tensor view;
  {
    auto segment = SharedMemorySegment::open_writable(name, kBytes);
    EXPECT_FALSE(segment.is_creator());
    view = segment.as_tensor();
    view.copy_(pattern_tensor(kBytes));
  }
  write_line(child.to_child, "written");
  EXPECT_EQ(read_line(child.from_child), "checked");
  const std::string childs_names = std::string(kSegmentPrefix) + "-" + std::to_string(child.pid);
  EXPECT_EQ(dev_shm_entries_starting_with(childs_names), 0);
  child.kill_now();

  const std::string message =
      error_message_of<IoError>([&] { SharedMemorySegment::open_writable(name, kBytes); });
  EXPECT_CONTAINS(message, name);
  EXPECT_CONTAINS(message, "its creator has exited");
  EXPECT_TRUE(view.equal(pattern_tensor(kBytes)));  // this mapping outlives the creator
  EXPECT_EQ(dev_shm_entries_starting_with(childs_names), 0);
}

// What collectives on one host look up (comm/same_host_collectives.h): where a range lies in an
// unnamed segment this process holds. Nothing for a range running past its end, for ordinary
// memory or a named segment, or once the segment is let go (then its descriptor is closed too).
TEST(FindUnnamedSegment, FindsARangeInsideAnUnnamedSegmentThisProcessHolds) {
  constexpr int64_t kBytes = 3 * 4096 + 100;
  at::Tensor buffer = empty_for_same_host_peers(kBytes);
  const auto whole = find_unnamed_segment(buffer.data_ptr(), kBytes);
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(whole->offset, 0u);
  EXPECT_EQ(whole->size, kBytes);
  // The descriptor reaches the segment's file, as a peer opening it through /proc does.
  const std::string path = "/proc/self/fd/" + std::to_string(whole->descriptor);
  struct stat info {};
  ASSERT_EQ(stat(path.c_str(), &info), 0) << path;
  EXPECT_EQ(static_cast<uint64_t>(info.st_ino), whole->inode);

  at::Tensor view = buffer.narrow(0, 4096 + 7, 500);
  const auto inside = find_unnamed_segment(view.data_ptr(), 500);
  ASSERT_TRUE(inside.has_value());
  EXPECT_EQ(inside->offset, 4096u + 7);
  EXPECT_EQ(inside->inode, whole->inode);
  EXPECT_TRUE(find_unnamed_segment(view.data_ptr(), kBytes - 4096 - 7).has_value());
  EXPECT_FALSE(find_unnamed_segment(view.data_ptr(), kBytes - 4096 - 7 + 1).has_value());

  at::Tensor ordinary = at::empty({kBytes}, at::kByte);
  EXPECT_FALSE(find_unnamed_segment(ordinary.data_ptr(), 1).has_value());
  SharedMemorySegment named = SharedMemorySegment::create(kBytes);
  EXPECT_FALSE(find_unnamed_segment(named.data(), 1).has_value());

  // A segment object gone while a view of it lives: its memory stays, peers can no longer open it.
  SharedMemorySegment segment = SharedMemorySegment::create_unnamed(kBytes);
  at::Tensor outliving = segment.as_tensor();
  EXPECT_TRUE(find_unnamed_segment(outliving.data_ptr(), 1).has_value());
  { SharedMemorySegment moved = std::move(segment); }
  EXPECT_FALSE(find_unnamed_segment(outliving.data_ptr(), 1).has_value());

  // The tensor owns its segment: let go with its last view.
  void* address = buffer.data_ptr();
  buffer = at::Tensor();
  view = at::Tensor();
  EXPECT_FALSE(find_unnamed_segment(address, 1).has_value());
  struct stat after {};
  EXPECT_TRUE(stat(path.c_str(), &after) != 0 || after.st_ino != whole->inode);
}

// A segment is a file, so a file-size limit (`ulimit -f`, as the checkpoint tests use for a full
// disk) refuses one. A buffer for same-host peers then lies in ordinary memory: the run goes on,
// only its peers read it through the kernel.
TEST(FindUnnamedSegment, ABufferForPeersWhereNoSegmentCanBeMadeLiesInOrdinaryMemory) {
  constexpr int64_t kBytes = 1 << 20;
  at::Tensor buffer;
  {
    ::ooze::testing::FileSizeLimit limit(64 << 10);
    EXPECT_CONTAINS(error_message_of<IoError>([&] { SharedMemorySegment::create_unnamed(kBytes); }),
                    "File too large");
    buffer = empty_for_same_host_peers(kBytes);
  }
  ASSERT_EQ(buffer.numel(), kBytes);
  EXPECT_FALSE(find_unnamed_segment(buffer.data_ptr(), kBytes).has_value());
  buffer.fill_(7);
  EXPECT_EQ(buffer.sum().item<int64_t>(), 7 * kBytes);
  EXPECT_TRUE(find_unnamed_segment(empty_for_same_host_peers(kBytes).data_ptr(), 1).has_value());
}

TEST(SharedMemorySegment, NamesCarryPidCounterAndRandomAndAreUnique) {
  auto first = SharedMemorySegment::create(4096);
  auto second = SharedMemorySegment::create(4096);
  std::regex form("/ooze-ws-" + std::to_string(getpid()) + "-([0-9]+)-[0-9a-f]{8}");
  std::smatch first_match, second_match;
  ASSERT_TRUE(std::regex_match(first.name(), first_match, form)) << first.name();
  ASSERT_TRUE(std::regex_match(second.name(), second_match, form)) << second.name();
  EXPECT_LT(std::stoull(first_match[1].str()), std::stoull(second_match[1].str()));
  EXPECT_NE(first.name(), second.name());
  EXPECT_TRUE(first.is_creator());
  EXPECT_FALSE(first.is_unlinked());
  EXPECT_EQ(first.size(), 4096);
  EXPECT_NE(first.data(), nullptr);
  EXPECT_EQ(fs::file_size("/dev/shm" + first.name()), 4096u);

  auto custom = SharedMemorySegment::create(1, "ooze-ws-custom_1.x");
  EXPECT_EQ(custom.name().rfind("/ooze-ws-custom_1.x-" + std::to_string(getpid()) + "-", 0), 0u)
      << custom.name();
}

TEST(SharedMemorySegment, CreatorWritesReachReceiversAndReceiverWritesStayPrivate) {
  auto creator = SharedMemorySegment::create(8192);
  creator.as_tensor().copy_(pattern_tensor(8192));
  auto receiver = SharedMemorySegment::open(creator.name(), 8192);
  auto other_receiver = SharedMemorySegment::open(creator.name(), 8192);
  EXPECT_TRUE(receiver.as_tensor().equal(pattern_tensor(8192)));
  receiver.as_tensor().fill_(1);
  EXPECT_TRUE(creator.as_tensor().equal(pattern_tensor(8192)));
  EXPECT_TRUE(other_receiver.as_tensor().equal(pattern_tensor(8192)));
  EXPECT_EQ(receiver.as_tensor().sum().item<int64_t>(), 8192);
}

TEST(SharedMemorySegment, TheCreatorUnlinksOnDestructionAndAReceiverDoesNot) {
  std::string name;
  {
    auto creator = SharedMemorySegment::create(100);
    name = creator.name();
    { auto receiver = SharedMemorySegment::open(name, 100); }
    EXPECT_TRUE(in_dev_shm(name)) << "a receiver must not remove the creator's segment";
    SharedMemorySegment moved = std::move(creator);
    EXPECT_TRUE(creator.name().empty());
    EXPECT_FALSE(creator.is_creator());
    EXPECT_EQ(moved.name(), name);
    EXPECT_TRUE(moved.is_creator());
    SharedMemorySegment assigned;
    assigned = std::move(moved);
    EXPECT_TRUE(in_dev_shm(name));
    EXPECT_EQ(assigned.name(), name);
  }
  EXPECT_FALSE(in_dev_shm(name));

  // Assigning over a creator releases its segment.
  auto creator = SharedMemorySegment::create(100);
  std::string replaced = creator.name();
  creator = SharedMemorySegment::create(100);
  EXPECT_FALSE(in_dev_shm(replaced));
  EXPECT_TRUE(in_dev_shm(creator.name()));
}

TEST(SharedMemorySegment, UnlinkIsIdempotentAndKeepsMappingsValid) {
  auto creator = SharedMemorySegment::create(4096);
  creator.as_tensor().copy_(pattern_tensor(4096));
  auto receiver = SharedMemorySegment::open(creator.name(), 4096);
  creator.unlink();
  EXPECT_TRUE(creator.is_unlinked());
  EXPECT_FALSE(in_dev_shm(creator.name()));
  EXPECT_NO_THROW(creator.unlink());
  EXPECT_NO_THROW(receiver.unlink());  // already gone: counts as unlinked
  EXPECT_TRUE(receiver.is_unlinked());
  EXPECT_TRUE(receiver.as_tensor().equal(pattern_tensor(4096)));
  creator.as_tensor().fill_(9);  // shared: a page the receiver has not written still follows
  EXPECT_EQ(receiver.as_tensor()[17].item<int64_t>(), 9);
  EXPECT_THROW(SharedMemorySegment::open(creator.name(), 4096), IoError);
}

TEST(SharedMemorySegment, HundredSyncsLeaveNoEntryMappingOrDescriptorBehind) {
  const std::string own = std::string(kSegmentPrefix) + "-" + std::to_string(getpid()) + "-";
  const int entries = dev_shm_entries_starting_with(own);
  const int descriptors = open_descriptors();
  const int mappings = mappings_of(own);
  std::vector<at::Tensor> kept;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 100; ++i) {
    const int64_t bytes = (64 << 10) + i;
    auto creator = SharedMemorySegment::create(bytes);
    creator.as_tensor().fill_(i);
    auto receiver = SharedMemorySegment::open(creator.name(), bytes);
    at::Tensor received = receiver.as_tensor();
    ASSERT_EQ(received.sum().item<int64_t>(), bytes * i) << i;
    if (i % 2 == 0) creator.unlink();  // otherwise the destructor does
    if (i % 10 == 0) kept.push_back(received.slice(0, 10, 20));
  }
  EXPECT_EQ(dev_shm_entries_starting_with(own), entries);
  EXPECT_EQ(mappings_of(own), mappings + 10);  // the kept views
  for (size_t k = 0; k < kept.size(); ++k) {
    EXPECT_EQ(kept[k].sum().item<int64_t>(), 10 * static_cast<int64_t>(k) * 10);
  }
  kept.clear();
  EXPECT_EQ(mappings_of(own), mappings);
  EXPECT_EQ(open_descriptors(), descriptors);
  auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "100 create/open/unlink cycles of 64 KiB: " << seconds * 1e3 << " ms\n";
}

TEST(SharedMemorySegment, AViewOutlivesTheSegmentObjects) {
  constexpr int64_t kBytes = 1 << 20;
  at::Tensor creator_view, receiver_view;
  std::string name;
  {
    auto creator = SharedMemorySegment::create(kBytes);
    name = creator.name();
    creator.as_tensor().copy_(pattern_tensor(kBytes));
    auto receiver = SharedMemorySegment::open(name, kBytes);
    creator_view = creator.as_tensor().slice(0, 1000, 2000);
    receiver_view = receiver.as_tensor().view({1024, 1024}).select(0, 5);
  }
  EXPECT_FALSE(in_dev_shm(name));
  const std::string file = name.substr(1);
  EXPECT_EQ(mappings_of(file), 2);
  EXPECT_TRUE(creator_view.equal(pattern_tensor(kBytes).slice(0, 1000, 2000)));
  EXPECT_TRUE(receiver_view.equal(pattern_tensor(kBytes).slice(0, 5 * 1024, 6 * 1024)));
  creator_view.add_(1);  // still writable
  EXPECT_TRUE(creator_view.equal(pattern_tensor(kBytes).slice(0, 1000, 2000).add(1)));
  creator_view = at::Tensor();
  EXPECT_EQ(mappings_of(file), 1);
  receiver_view = at::Tensor();
  EXPECT_EQ(mappings_of(file), 0);
}

TEST(SharedMemorySegment, ZeroByteSegmentsHaveANameAndNoMapping) {
  auto creator = SharedMemorySegment::create(0);
  EXPECT_EQ(creator.size(), 0);
  EXPECT_EQ(creator.data(), nullptr);
  EXPECT_TRUE(in_dev_shm(creator.name()));
  at::Tensor empty = creator.as_tensor();
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_EQ(empty.scalar_type(), at::kByte);
  auto receiver = SharedMemorySegment::open(creator.name(), 0);
  EXPECT_EQ(receiver.data(), nullptr);
  EXPECT_EQ(receiver.as_tensor().numel(), 0);
  std::string message =
      error_message_of<IoError>([&] { SharedMemorySegment::open(creator.name(), 8); });
  EXPECT_CONTAINS(message, creator.name());
  EXPECT_CONTAINS(message, "holds 0 bytes");
  creator.unlink();
  EXPECT_FALSE(in_dev_shm(creator.name()));
  EXPECT_EQ(SharedMemorySegment().as_tensor().numel(), 0);
}

TEST(SharedMemorySegment, OpenFailuresNameTheSegmentTheSizeAndTheReason) {
  const std::string missing = "/ooze-ws-" + std::to_string(getpid()) + "-999999999-deadbeef";
  std::string message = error_message_of<IoError>([&] { SharedMemorySegment::open(missing, 123); });
  EXPECT_CONTAINS(message, missing);
  EXPECT_CONTAINS(message, "123 bytes");
  EXPECT_CONTAINS(message, std::strerror(ENOENT));

  auto creator = SharedMemorySegment::create(100);
  message = error_message_of<IoError>([&] { SharedMemorySegment::open(creator.name(), 101); });
  EXPECT_CONTAINS(message, creator.name());
  EXPECT_CONTAINS(message, "101 bytes");
  EXPECT_CONTAINS(message, "holds 100 bytes");

  for (const std::string& bad : std::vector<std::string>{"", "/", "ooze-ws-1-2-3", "/ooze/ws",
                                                         "/" + std::string(300, 'a')}) {
    message = error_message_of<IoError>([&] { SharedMemorySegment::open(bad, 10); });
    EXPECT_CONTAINS(message, "segment " + bad + " (10 bytes)");
  }
  message = error_message_of<IoError>([&] { SharedMemorySegment::open(creator.name(), -1); });
  EXPECT_CONTAINS(message, "-1 bytes");
  message = error_message_of<IoError>([] { SharedMemorySegment::create(-5); });
  EXPECT_CONTAINS(message, "-5 bytes");
  for (const std::string& bad :
       std::vector<std::string>{"", "a/b", "has space", std::string(201, 'p')}) {
    message = error_message_of<IoError>([&] { SharedMemorySegment::create(8, bad); });
    EXPECT_CONTAINS(message, "prefix '" + bad + "'");
    EXPECT_THROW(cleanup_stale_segments(bad), IoError);
  }
}

TEST(SharedMemorySegment, ASegmentLargerThanDevShmFailsAtCreateAndLeavesNoEntry) {
  struct statvfs shm {};
  ASSERT_EQ(statvfs("/dev/shm", &shm), 0);
  if (shm.f_blocks == 0) GTEST_SKIP() << "/dev/shm has no size limit";
  const int64_t too_big = 2 * static_cast<int64_t>(shm.f_blocks) * shm.f_frsize;
  const std::string own = std::string(kSegmentPrefix) + "-" + std::to_string(getpid()) + "-";
  const int entries = dev_shm_entries_starting_with(own);
  std::string message = error_message_of<IoError>([&] { SharedMemorySegment::create(too_big); });
  EXPECT_CONTAINS(message, std::to_string(too_big) + " bytes");
  EXPECT_CONTAINS(message, "/" + own);
  EXPECT_CONTAINS(message, std::strerror(ENOSPC));
  EXPECT_CONTAINS(message, "--shm-size");
  EXPECT_EQ(dev_shm_entries_starting_with(own), entries);
}

TEST(CleanupStaleSegments, RemovesSegmentsOfDeadProcessesOnly) {
  // A prefix of this test process alone, so that concurrent tests do not change the counts.
  const std::string prefix = "ooze-wstest" + std::to_string(getpid());
  constexpr int64_t kBytes = 10000;
  // Creates `count` segments, reports their names, then waits to be killed.
  auto creator = [&](int count, bool exit_without_cleanup) {
    return [=](int in, int out) {
      std::vector<SharedMemorySegment> segments;
      std::string names;
      for (int i = 0; i < count; ++i) {
        segments.push_back(SharedMemorySegment::create(kBytes, prefix));
        write_pattern(segments.back().data(), kBytes);
        names += segments.back().name() + "\n";
      }
      if (write(out, names.data(), names.size()) < 0) return 2;
      if (exit_without_cleanup) _exit(0);  // like a crash: no destructor runs
      char c;
      return read(in, &c, 1) >= 0 ? 0 : 3;  // blocks until killed or the test ends
    };
  };
  Child killed = Child::start(creator(2, false));
  Child live = Child::start(creator(1, false));
  Child zombie = Child::start(creator(1, true));
  std::vector<std::string> killed_names = {read_line(killed.from_child),
                                           read_line(killed.from_child)};
  std::string live_name = read_line(live.from_child);
  std::string zombie_name = read_line(zombie.from_child);
  for (const auto& name : {killed_names[0], killed_names[1], live_name, zombie_name}) {
    ASSERT_TRUE(in_dev_shm(name)) << name;
  }
  // A receiver holding a mapping keeps its bytes after the creator dies and the name goes.
  auto received = SharedMemorySegment::open(killed_names[0], kBytes);
  at::Tensor view = received.as_tensor();
  kill(killed.pid, SIGKILL);
  const pid_t dead_pid = killed.pid;
  ASSERT_EQ(killed.wait(), 128 + SIGKILL);
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, zombie.pid, &info, WEXITED | WNOWAIT), 0);  // exited, not reaped

  auto own = SharedMemorySegment::create(kBytes, prefix);
  // Names cleanup must not touch: no pid, a pid followed by no '-', another prefix.
  std::vector<std::string> decoys = {
      "/" + prefix + "-notapid-1", "/" + prefix + "-" + std::to_string(dead_pid),
      "/" + prefix + "x-" + std::to_string(dead_pid) + "-0-00000000"};
  for (const auto& decoy : decoys) {
    int fd = shm_open(decoy.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    ASSERT_GE(fd, 0) << decoy << ": " << std::strerror(errno);
    close(fd);
  }

  EXPECT_EQ(cleanup_stale_segments(prefix), 3);
  EXPECT_FALSE(in_dev_shm(killed_names[0]));
  EXPECT_FALSE(in_dev_shm(killed_names[1]));
  EXPECT_FALSE(in_dev_shm(zombie_name));
  EXPECT_TRUE(in_dev_shm(live_name));
  EXPECT_TRUE(in_dev_shm(own.name()));
  for (const auto& decoy : decoys) EXPECT_TRUE(in_dev_shm(decoy)) << decoy;
  EXPECT_TRUE(view.equal(pattern_tensor(kBytes)));
  EXPECT_EQ(cleanup_stale_segments(prefix), 0);

  live.kill_now();
  EXPECT_EQ(zombie.wait(), 0);
  EXPECT_EQ(cleanup_stale_segments(prefix), 1);
  EXPECT_FALSE(in_dev_shm(live_name));
  EXPECT_TRUE(in_dev_shm(own.name()));
  for (const auto& decoy : decoys) shm_unlink(decoy.c_str());
}

TEST(CleanupStaleSegments, AChildThatExitsNormallyLeavesNothingToCleanUp) {
  const std::string prefix = "ooze-wstest" + std::to_string(getpid()) + "n";
  Child child = Child::start([&](int, int out) {
    auto segment = SharedMemorySegment::create(4096, prefix);
    std::string line = segment.name() + "\n";
    return write(out, line.data(), line.size()) < 0 ? 2 : 0;
  });
  std::string name = read_line(child.from_child);
  EXPECT_FALSE(name.empty());
  EXPECT_EQ(child.wait(), 0);
  EXPECT_FALSE(in_dev_shm(name));
  EXPECT_EQ(cleanup_stale_segments(prefix), 0);
}

}  // namespace shared_memory_segment_test
}  // namespace ooze
