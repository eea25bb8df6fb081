// Hostile input against the actor runtime. Every frame a worker or the head receives comes from
// a socket other processes can write to, so it must be bounded and validated: garbage,
// truncated frames, unknown methods and wrong argument types get an error reply or are dropped,
// and the process keeps serving. Raw ZeroMQ sockets (no runtime client) send tens of thousands
// of random and mutated frames to a live worker and to the head; the archive's bounds are
// checked directly, without processes.
//
// Frames are written byte by byte here (Bytes, header_bytes, tensor_bytes) instead of with the
// encoder under test; HandWrittenFramesMatchTheEncoder pins that layout to the real one.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <new>
#include <random>
#include <string>
#include <tuple>
#include <vector>
#include <zmq.hpp>

#include "actors/protocol.h"
#include "actors/runtime.h"
#include "actors/transport.h"
#include "actors/wire.h"
#include "core/logging.h"
#include "core/tensor_serialization.h"
#include "core/timer.h"
#include "tests/actors/test_actors.h"

// ---- allocation probe ------------------------------------------------------------------------
// Records the largest operator-new request made while a probe is active: a decoder that trusted
// a lying length prefix would ask for what the prefix announced.
namespace {
std::atomic<bool> probe_active{false};
std::atomic<std::size_t> probe_largest{0};
}  // namespace

[[gnu::noinline]] void* operator new(std::size_t size) {
  if (probe_active.load(std::memory_order_relaxed)) {
    std::size_t seen = probe_largest.load(std::memory_order_relaxed);
    while (size > seen && !probe_largest.compare_exchange_weak(seen, size)) {
    }
  }
  void* memory = std::malloc(size == 0 ? 1 : size);
  if (memory == nullptr) throw std::bad_alloc();
  return memory;
}
// Not inlined: GCC would then see malloc in one place and free in another and warn.
[[gnu::noinline]] void operator delete(void* memory) noexcept { std::free(memory); }
[[gnu::noinline]] void operator delete(void* memory, std::size_t) noexcept { std::free(memory); }

namespace ooze::actors {
namespace fuzz_test {

using testing::Counter;
using Clock = std::chrono::steady_clock;
using Frame = std::vector<std::string>;  // the parts of one multipart message

constexpr auto kCallTimeout = std::chrono::seconds(10);
constexpr auto kReplyTimeout = std::chrono::milliseconds(10000);
constexpr uint64_t kSeed = 0x00f00d5eed;
constexpr int kGarbageFrames = 10000;
constexpr int kMutatedFrames = 10000;
constexpr int kFramesBetweenLivenessChecks = 2500;

// The largest allocation `decode` makes.
std::size_t largest_allocation(const std::function<void()>& decode) {
  probe_largest = 0;
  probe_active = true;
  try {
    decode();
  } catch (...) {
    probe_active = false;
    throw;
  }
  probe_active = false;
  return probe_largest.load();
}

// ---- frames written by hand ------------------------------------------------------------------

// Little-endian bytes of plain values (cereal's binary layout: raw values, uint64 lengths).
class Bytes {
 public:
  template <class T>
  Bytes& put(T value) {
    static_assert(std::is_arithmetic_v<T>);
    char raw[sizeof(T)];
    std::memcpy(raw, &value, sizeof(T));
    text_.append(raw, sizeof(T));
    return *this;
  }
  Bytes& put_string(const std::string& value) {
    put<uint64_t>(value.size());
    text_ += value;
    return *this;
  }
  Bytes& raw(const std::string& bytes) {
    text_ += bytes;
    return *this;
  }
  const std::string& str() const { return text_; }

 private:
  std::string text_;
};

// Offsets inside a header: magic 0-3, version 4-5, kind 6, id 7-14, method length 15-22,
// method, ok, then the blob count in the last four bytes.
constexpr std::size_t kKindOffset = 6;
constexpr std::size_t kMethodLengthOffset = 15;

std::string header_bytes(uint64_t id, const std::string& method, uint32_t blobs = 0,
                         uint8_t kind = 1, uint32_t magic = kWireMagic,
                         uint16_t version = kWireVersion) {
  return Bytes()
      .put<uint32_t>(magic)
      .put<uint16_t>(version)
      .put<uint8_t>(kind)
      .put<uint64_t>(id)
      .put_string(method)
      .put<uint8_t>(1)  // ok
      .put<uint32_t>(blobs)
      .str();
}

Frame request(uint64_t id, const std::string& method, const std::string& body,
              const std::vector<std::string>& blobs = {}) {
  Frame frame{header_bytes(id, method, static_cast<uint32_t>(blobs.size())), body};
  frame.insert(frame.end(), blobs.begin(), blobs.end());
  return frame;
}

// A tensor as core/tensor_serialization.h lays it out: dtype code (0x80: bytes out of band),
// rank, sizes, byte count, then the bytes or the out-of-band index (`tail`).
std::string tensor_bytes(uint8_t code, const std::vector<int64_t>& sizes, uint64_t nbytes,
                         const std::string& tail) {
  Bytes bytes;
  bytes.put<uint8_t>(code).put<uint32_t>(static_cast<uint32_t>(sizes.size()));
  for (int64_t size : sizes) bytes.put<int64_t>(size);
  return bytes.put<uint64_t>(nbytes).raw(tail).str();
}

constexpr uint8_t kFloat32Code = 1;
constexpr uint8_t kOutOfBand = 0x80;
constexpr uint64_t kSharedMemoryIndex = uint64_t{1} << 63;

// `count` float32 values i % 7, and their sum computed in double.
std::string float_bytes(int count, double* sum) {
  Bytes bytes;
  *sum = 0;
  for (int i = 0; i < count; ++i) {
    bytes.put<float>(static_cast<float>(i % 7));
    *sum += i % 7;
  }
  return bytes.str();
}

// Counter.sum's argument with 8192 floats (32 KiB) out of band, as blob 0.
constexpr int kBlobFloats = 8192;
std::string out_of_band_tensor_body(uint64_t index = 0, uint64_t nbytes = kBlobFloats * 4) {
  return tensor_bytes(kFloat32Code | kOutOfBand, {kBlobFloats}, nbytes,
                      Bytes().put<uint64_t>(index).str());
}

std::string method_name_of_length(std::size_t length) { return std::string(length, 'm'); }

// ---- a raw peer ------------------------------------------------------------------------------

// A DEALER socket that talks to a worker or the head with no help from the runtime's client.
class RawPeer {
 public:
  explicit RawPeer(const std::string& endpoint) : socket_(zmq_context(), zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::sndhwm, 0);
    socket_.set(zmq::sockopt::rcvhwm, 0);
    socket_.set(zmq::sockopt::sndtimeo, 10000);
    socket_.connect(endpoint);
  }

  void send(const Frame& frame) {
    for (std::size_t i = 0; i < frame.size(); ++i) {
      auto flags = i + 1 < frame.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
      if (!socket_.send(zmq::buffer(frame[i]), flags)) {
        throw RuntimeError("a raw send did not go out within 10 s: the server stopped reading");
      }
    }
  }

  // Takes every message that has arrived, waiting up to `wait` for the first.
  void collect(std::chrono::milliseconds wait = std::chrono::milliseconds(0)) {
    if (wait.count() > 0) {
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, wait);
    }
    while (true) {
      std::string rejected;
      auto message = receive_message(socket_, nullptr, &rejected);
      if (message) {
        received.push_back(std::move(*message));
      } else if (rejected.empty()) {
        return;
      } else {
        malformed += 1;
      }
    }
  }

  // Collects until `done()` holds; false when `timeout` passed first.
  bool collect_until(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
    auto deadline = Clock::now() + timeout;
    while (!done()) {
      if (Clock::now() > deadline) return false;
      collect(std::chrono::milliseconds(20));
    }
    return true;
  }

  std::vector<Message> received;
  int malformed = 0;  // messages from the server that do not decode: always a bug

 private:
  zmq::socket_t socket_;
};

// What came back: ok replies, and error replies by their ErrorReply type.
struct ReplyTally {
  int ok = 0;
  std::map<std::string, int> errors;
  int undecodable_errors = 0;
  int not_replies = 0;

  void count(std::vector<Message>& messages) {
    for (Message& message : messages) {
      if (message.header.kind != MessageKind::kReply) {
        not_replies += 1;
      } else if (message.header.ok) {
        ok += 1;
      } else {
        ErrorReply error;
        try {
          from_wire(message.body, error);
          errors[error.type] += 1;
        } catch (const WireFormatError&) {
          undecodable_errors += 1;
        }
      }
    }
    messages.clear();
  }
  int total() const {
    int sum = ok + undecodable_errors + not_replies;
    for (const auto& [type, count] : errors) sum += count;
    return sum;
  }
  int error_count(const std::string& type) const {
    auto found = errors.find(type);
    return found == errors.end() ? 0 : found->second;
  }
  std::string describe() const {
    std::string text = "ok=" + std::to_string(ok);
    for (const auto& [type, count] : errors) text += " " + type + "=" + std::to_string(count);
    if (undecodable_errors > 0) text += " undecodable=" + std::to_string(undecodable_errors);
    if (not_replies > 0) text += " events=" + std::to_string(not_replies);
    return text;
  }
};

void report(const char* what, int frames, double seconds, const ReplyTally& tally) {
  std::printf("[   FUZZ   ] %s: %d frames in %.2f s (%.0f frames/s); replies: %s\n", what, frames,
              seconds, frames / seconds, tally.describe().c_str());
  std::fflush(stdout);
}

// ---- the fuzzer ------------------------------------------------------------------------------

// Random frames and mutations of valid ones, from a fixed seed so a failure reproduces.
class FrameFuzzer {
 public:
  // `methods`: names a mutation may put in a header; `bodies`: bodies of other types it may
  // swap in.
  FrameFuzzer(uint64_t seed, std::vector<std::string> methods, std::vector<std::string> bodies)
      : random_(seed), methods_(std::move(methods)), bodies_(std::move(bodies)) {}

  std::size_t below(std::size_t n) {
    return std::uniform_int_distribution<std::size_t>(0, n - 1)(random_);
  }

  std::string random_bytes(std::size_t n) {
    std::string bytes(n, '\0');
    for (char& byte : bytes) byte = static_cast<char>(random_());
    return bytes;
  }

  // 1-6 parts of 0..2 KiB (one part in 20: 64 KiB). A quarter of the frames start with a
  // well-formed request header naming a random method (so they reach the method lookup:
  // `well_formed` is set), another quarter with just the right magic and version.
  Frame garbage(bool* well_formed) {
    Frame frame(1 + below(6));
    for (std::string& part : frame) part = random_bytes(below(20) == 0 ? 64 * 1024 : below(2049));
    *well_formed = false;
    std::size_t shape = below(4);
    if (shape == 0 && frame.size() >= 2) {
      std::string method = random_bytes(below(41));
      frame[0] = header_bytes(random_(), method, static_cast<uint32_t>(frame.size() - 2));
      *well_formed = true;
    } else if (shape == 1 && frame[0].size() >= 7) {
      frame[0].replace(0, 6, header_bytes(0, "").substr(0, 6));
      frame[0][kKindOffset] = static_cast<char>(below(4));
    }
    return frame;
  }

  // `frame` with 1-4 random edits.
  Frame mutate(Frame frame) {
    int edits = 1 + static_cast<int>(below(4));
    for (int i = 0; i < edits; ++i) edit(frame);
    return frame;
  }

 private:
  std::string& some_part(Frame& frame) { return frame[below(frame.size())]; }

  void edit(Frame& frame) {
    if (frame.empty()) frame.push_back("");
    switch (below(13)) {
      case 0: {  // flip a bit
        std::string& part = some_part(frame);
        if (!part.empty()) part[below(part.size())] ^= static_cast<char>(1 << below(8));
        break;
      }
      case 1: {  // overwrite a byte with a boundary value
        static const uint8_t values[] = {0, 1, 2, 0x7f, 0x80, 0xfe, 0xff};
        std::string& part = some_part(frame);
        if (!part.empty()) part[below(part.size())] = static_cast<char>(values[below(7)]);
        break;
      }
      case 2: {  // insert bytes
        std::string& part = some_part(frame);
        part.insert(below(part.size() + 1), random_bytes(1 + below(16)));
        break;
      }
      case 3: {  // delete bytes
        std::string& part = some_part(frame);
        if (!part.empty()) part.erase(below(part.size()), 1 + below(16));
        break;
      }
      case 4: {  // truncate
        std::string& part = some_part(frame);
        part.resize(below(part.size() + 1));
        break;
      }
      case 5:  // one more part
        frame.push_back(random_bytes(below(65)));
        break;
      case 6:  // one part fewer
        if (frame.size() > 1) frame.erase(frame.begin() + below(frame.size()));
        break;
      case 7:  // a part twice
        frame.insert(frame.begin() + below(frame.size() + 1), some_part(frame));
        break;
      case 8: {  // announce a wrong blob count
        static const uint32_t counts[] = {0, 1, 2, 3, 4096, 4097, 0xffffffffu};
        std::string& header = frame[0];
        uint32_t count = below(2) == 0 ? counts[below(7)] : static_cast<uint32_t>(random_());
        if (header.size() >= 4) std::memcpy(&header[header.size() - 4], &count, 4);
        break;
      }
      case 9: {  // a huge length prefix: at the body's start, the method's length, or anywhere
        std::string& part = some_part(frame);
        uint64_t lengths[] = {uint64_t{1} << 60,  uint64_t{1} << 62, ~uint64_t{0},
                              uint64_t{1} << 32,  part.size() + 1,   uint64_t{1} << 30,
                              uint64_t{INT64_MAX}};
        uint64_t length = lengths[below(7)];
        std::size_t where = below(3) == 0 ? kMethodLengthOffset : below(2) == 0 ? 0 : below(64);
        if (part.size() < where + 8) part.resize(where + 8);
        std::memcpy(&part[where], &length, 8);
        break;
      }
      case 10:  // another method (unknown, or known with the wrong body)
        frame[0] = header_bytes(random_(), methods_[below(methods_.size())],
                                static_cast<uint32_t>(frame.size() >= 2 ? frame.size() - 2 : 0));
        break;
      case 11:  // a body of another type
        if (frame.size() < 2) frame.push_back("");
        frame[1] = bodies_[below(bodies_.size())];
        break;
      case 12:  // another message kind
        if (frame[0].size() > kKindOffset) frame[0][kKindOffset] = static_cast<char>(below(6));
        break;
    }
  }

  std::mt19937_64 random_;
  std::vector<std::string> methods_;
  std::vector<std::string> bodies_;
};

// Method names that exist nowhere, or almost look like one that does.
std::vector<std::string> unknown_method_names() {
  return {"",
          "Counter",
          "Counter.",
          "counter.add",
          "Counter.addd",
          "Counter.ad",
          "Counter.add ",
          std::string("Counter.add\0x", 13),
          "Gate.block",
          "BrokenConstructor.get",
          "no_such_method",
          "kv_get ",
          std::string("kv_get\0", 7),
          method_name_of_length(kMaxMethodName),
          method_name_of_length(kMaxMethodName + 1)};
}

// Bodies of many types, some lying about their lengths.
std::vector<std::string> foreign_bodies() {
  double ignored = 0;
  return {"",
          Bytes().put<int32_t>(5).str(),
          Bytes().put<int16_t>(5).str(),
          Bytes().put<int64_t>(5).str(),
          Bytes().put<double>(5.0).str(),
          Bytes().put<int32_t>(1).put<int32_t>(2).str(),
          Bytes().put_string("five").str(),
          Bytes().put_string("").str(),
          Bytes().put<uint64_t>(uint64_t{1} << 60).raw("HOME").str(),
          Bytes().put<uint64_t>(2).put<int64_t>(1).put<int64_t>(2).str(),
          Bytes().put_string("key").put_string("value").str(),
          Bytes().put_string("key").put<int64_t>(INT64_MAX).str(),
          Bytes().put_string("key").put<int64_t>(-1).str(),
          tensor_bytes(kFloat32Code, {4}, 16, float_bytes(4, &ignored)),
          tensor_bytes(0x7f, {4}, 16, std::string(16, '\0')),
          tensor_bytes(kFloat32Code, {int64_t{1} << 40}, uint64_t{1} << 42, ""),
          out_of_band_tensor_body(7),
          out_of_band_tensor_body(kSharedMemoryIndex)};
}

// ---- the live runtime ------------------------------------------------------------------------

class LiveFuzzTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    at::set_num_threads(1);
    RuntimeOptions options;
    options.worker_executable = testing::worker_program();
    options.resources = {{"CPU", 8}};
    options.log_to_driver = false;
    init(options);
    // Every dropped frame is worth a warning in production; here there are tens of thousands.
    set_log_level(LogLevel::ERROR);
  }
  static void TearDownTestSuite() {
    set_log_level(LogLevel::INFO);
    shutdown();
  }

  // A Counter whose worker does not log a line per dropped frame.
  static ActorHandle<Counter> quiet_counter(int start) {
    ActorOptions options;
    options.env = {{"OOZE_LOG_LEVEL", "error"}};
    auto counter = spawn<Counter>(options, start);
    counter.wait_ready(std::chrono::seconds(30));
    return counter;
  }

  // The actor answers a correct call through the normal API, from the same process.
  static void expect_same_process(const ActorHandle<Counter>& counter, int pid) {
    EXPECT_EQ(counter.call(&Counter::pid).get(kCallTimeout), pid);
    ActorInfo info = counter.info();
    EXPECT_EQ(info.state, ActorState::kAlive);
    EXPECT_EQ(info.restarts, 0);
    EXPECT_EQ(info.pid, pid);
    EXPECT_EQ(::kill(pid, 0), 0);
  }

  static std::vector<std::string> worker_methods() {
    std::vector<std::string> methods = unknown_method_names();
    for (const char* known : {"Counter.add", "Counter.get", "Counter.pid", "Counter.env",
                              "Counter.twice", "Counter.sum", "Counter.fail"}) {
      methods.push_back(known);
    }
    return methods;
  }

  // Valid calls of Counter's side-effect-free (or counter-only) methods; exit_now, sleep_ms and
  // spawn_child are never named, and no edit of these names can spell them.
  static std::vector<Frame> worker_templates() {
    double ignored = 0;
    std::string blob = float_bytes(kBlobFloats, &ignored);
    return {request(1, "Counter.add", Bytes().put<int32_t>(5).str()), request(2, "Counter.get", ""),
            request(3, "Counter.env", Bytes().put_string("HOME").str()),
            request(4, "Counter.twice",
                    tensor_bytes(kFloat32Code, {2, 2}, 16, float_bytes(4, &ignored))),
            request(5, "Counter.sum", out_of_band_tensor_body(), {blob})};
  }

  static std::vector<std::string> head_methods() {
    std::vector<std::string> methods = unknown_method_names();
    methods.push_back("Counter.add");
    for (const char* known :
         {method::kKvGet, method::kKvPut, method::kGetActor, method::kWaitPlacementGroup,
          method::kStatus, method::kHeartbeat, method::kActorSpec, method::kRemovePlacementGroup,
          method::kRegisterClient, method::kWorkerLog}) {
      methods.push_back(known);
    }
    return methods;
  }

  // Valid control requests with no effect beyond the key-value store: nothing that registers
  // a node, creates or kills an actor, or reserves resources.
  static std::vector<Frame> head_templates() {
    return {request(1, method::kKvGet, Bytes().put_string("fuzz/key").put<int64_t>(0).str()),
            request(2, method::kKvPut, Bytes().put_string("fuzz/key").put_string("value").str()),
            request(3, method::kGetActor, Bytes().put_string("nobody").str()),
            request(4, method::kWaitPlacementGroup,
                    Bytes().put_string("no-group").put<int64_t>(0).str()),
            request(5, method::kStatus, ""),
            request(6, method::kHeartbeat, ""),
            request(7, method::kActorSpec, Bytes().put_string("no-actor").str()),
            request(8, method::kRemovePlacementGroup, Bytes().put_string("no-group").str()),
            request(9, method::kWorkerLog,
                    Bytes()
                        .put_string("no-actor")
                        .put_string("no-owner")
                        .put_string("(fuzz)")
                        .put<uint64_t>(1)
                        .put_string("a line")
                        .put<uint8_t>(0)
                        .str())};
  }
};

// Sends `count` random frames round-robin over `peers`; calls `check` every few thousand.
// Returns how many were well-formed requests (each owed exactly one UnknownMethod reply).
int send_garbage(FrameFuzzer& fuzzer, std::vector<RawPeer>& peers, int count,
                 const std::function<void()>& check) {
  int well_formed = 0;
  for (int i = 0; i < count; ++i) {
    bool is_request = false;
    Frame frame = fuzzer.garbage(&is_request);
    well_formed += is_request ? 1 : 0;
    RawPeer& peer = peers[i % peers.size()];
    peer.send(frame);
    peer.collect();
    if ((i + 1) % kFramesBetweenLivenessChecks == 0) check();
  }
  return well_formed;
}

void send_mutations(FrameFuzzer& fuzzer, const std::vector<Frame>& templates,
                    std::vector<RawPeer>& peers, int count, const std::function<void()>& check) {
  for (int i = 0; i < count; ++i) {
    RawPeer& peer = peers[i % peers.size()];
    peer.send(fuzzer.mutate(templates[fuzzer.below(templates.size())]));
    peer.collect();
    if ((i + 1) % kFramesBetweenLivenessChecks == 0) check();
  }
}

// Sends a valid `method` request from every peer, then collects until each peer has the
// marker's reply. A server handles one peer's frames in order, so by then it has handled every
// frame sent before it; a quiet period would not prove that on a loaded machine, and a
// mutated call still in flight could run after the checks that follow. Markers are not tallied.
bool collect_through_marker(std::vector<RawPeer>& peers, const std::string& method,
                            ReplyTally* tally) {
  constexpr uint64_t kMarkerId = ~uint64_t{0};
  std::vector<bool> answered(peers.size(), false);
  for (RawPeer& peer : peers) peer.send(request(kMarkerId, method, ""));
  auto deadline = Clock::now() + kReplyTimeout;
  while (std::find(answered.begin(), answered.end(), false) != answered.end()) {
    if (Clock::now() > deadline) return false;
    for (std::size_t i = 0; i < peers.size(); ++i) {
      peers[i].collect(std::chrono::milliseconds(10));
      auto& received = peers[i].received;
      for (auto it = received.begin(); it != received.end();) {
        if (it->header.id == kMarkerId) {
          answered[i] = true;
          it = received.erase(it);
        } else {
          ++it;
        }
      }
      tally->count(received);
    }
  }
  return true;
}

int malformed_messages(const std::vector<RawPeer>& peers) {
  int sum = 0;
  for (const RawPeer& peer : peers) sum += peer.malformed;
  return sum;
}

TEST_F(LiveFuzzTest, WorkerSurvivesRandomGarbage) {
  auto counter = quiet_counter(0);
  int pid = counter.call(&Counter::pid).get(kCallTimeout);
  std::vector<RawPeer> peers;
  for (int i = 0; i < 3; ++i) peers.emplace_back(counter.info().endpoint);
  FrameFuzzer fuzzer(kSeed, worker_methods(), foreign_bodies());

  auto start = Clock::now();
  int well_formed = send_garbage(fuzzer, peers, kGarbageFrames, [&] {
    EXPECT_EQ(counter.call(&Counter::get).get(kCallTimeout), 0);
  });
  // A well-formed request naming no method gets an UnknownMethod reply; nothing else does.
  ReplyTally tally;
  bool all_answered = collect_through_marker(peers, "Counter.get", &tally);
  report("worker, random garbage", kGarbageFrames, seconds_since(start), tally);

  EXPECT_TRUE(all_answered);
  EXPECT_GT(well_formed, 1000);
  EXPECT_EQ(tally.error_count("UnknownMethod"), well_formed) << tally.describe();
  EXPECT_EQ(tally.total(), well_formed) << tally.describe();
  EXPECT_EQ(malformed_messages(peers), 0);
  // Garbage never changed the counter, and the same process still serves.
  EXPECT_EQ(counter.call(&Counter::add, 5).get(kCallTimeout), 5);
  expect_same_process(counter, pid);
}

TEST_F(LiveFuzzTest, WorkerSurvivesMutatedCalls) {
  auto counter = quiet_counter(0);
  int pid = counter.call(&Counter::pid).get(kCallTimeout);
  std::vector<RawPeer> peers;
  for (int i = 0; i < 3; ++i) peers.emplace_back(counter.info().endpoint);
  FrameFuzzer fuzzer(kSeed + 1, worker_methods(), foreign_bodies());
  std::vector<Frame> templates = worker_templates();

  auto start = Clock::now();
  send_mutations(fuzzer, templates, peers, kMutatedFrames,
                 [&] { counter.call(&Counter::get).get(kCallTimeout); });
  ReplyTally tally;
  EXPECT_TRUE(collect_through_marker(peers, "Counter.get", &tally));
  report("worker, mutated calls", kMutatedFrames, seconds_since(start), tally);

  // Mutations reached every outcome: calls that still decode, bad arguments, unknown methods.
  EXPECT_GT(tally.ok, 100) << tally.describe();
  EXPECT_GT(tally.error_count("WireFormatError"), 100) << tally.describe();
  EXPECT_GT(tally.error_count("UnknownMethod"), 100) << tally.describe();
  EXPECT_LE(tally.total(), kMutatedFrames);
  EXPECT_EQ(tally.undecodable_errors, 0);
  EXPECT_EQ(tally.not_replies, 0);
  for (const auto& [type, count] : tally.errors) {
    EXPECT_TRUE(type == "WireFormatError" || type == "UnknownMethod" || type == "RemoteError")
        << type << " x" << count;
  }
  EXPECT_EQ(malformed_messages(peers), 0);
  // Mutated adds that still decoded moved the counter by unknown amounts: the state must
  // still be consistent from here on.
  int value = counter.call(&Counter::get).get(kCallTimeout);
  EXPECT_EQ(counter.call(&Counter::add, 1).get(kCallTimeout), value + 1);
  expect_same_process(counter, pid);
}

// One frame and what it must get back: "ok", an ErrorReply type, or "" (dropped, no reply).
struct Expected {
  Frame frame;
  std::string outcome;
};

// Sends every frame (ids 1..n) from one peer and checks each outcome; returns the replies by id.
std::map<uint64_t, Message> expect_outcomes(RawPeer& peer, const std::vector<Expected>& cases) {
  std::size_t owed = 0;
  for (const Expected& expected : cases) {
    peer.send(expected.frame);
    owed += expected.outcome.empty() ? 0 : 1;
  }
  std::map<uint64_t, Message> replies;
  auto take = [&] {
    for (Message& message : peer.received) replies[message.header.id] = std::move(message);
    peer.received.clear();
  };
  EXPECT_TRUE(peer.collect_until(
      [&] {
        take();
        return replies.size() >= owed;
      },
      kReplyTimeout))
      << replies.size() << " of " << owed << " replies arrived";
  peer.collect(std::chrono::milliseconds(300));  // a dropped frame answered late would show
  take();
  EXPECT_EQ(peer.malformed, 0);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    uint64_t id = i + 1;
    const std::string& outcome = cases[i].outcome;
    auto found = replies.find(id);
    if (outcome.empty()) {
      EXPECT_EQ(found, replies.end()) << "frame " << id << " should have been dropped";
      continue;
    }
    if (found == replies.end()) {
      ADD_FAILURE() << "frame " << id << " got no reply; expected " << outcome;
      continue;
    }
    const Message& reply = found->second;
    EXPECT_EQ(reply.header.kind, MessageKind::kReply);
    if (outcome == "ok") {
      EXPECT_TRUE(reply.header.ok) << "frame " << id;
      continue;
    }
    EXPECT_FALSE(reply.header.ok) << "frame " << id;
    ErrorReply error;
    try {
      from_wire(reply.body, error);
    } catch (const WireFormatError& malformed) {
      ADD_FAILURE() << "frame " << id << ": error reply does not decode: " << malformed.what();
      continue;
    }
    EXPECT_EQ(error.type, outcome) << "frame " << id << ": " << error.message;
    EXPECT_FALSE(error.message.empty());
  }
  EXPECT_EQ(replies.size(), owed);
  return replies;
}

// Frames the receiving loop must drop: the message is malformed, or not a request.
void add_dropped_variants(std::vector<Expected>* cases, const std::string& method,
                          const std::string& body) {
  auto id = [&] { return static_cast<uint64_t>(cases->size() + 1); };
  cases->push_back({{header_bytes(id(), method, 0, /*kind=*/2), body}, ""});
  cases->push_back({{header_bytes(id(), method, 0, /*kind=*/3), body}, ""});
  cases->push_back({{header_bytes(id(), method, 0, /*kind=*/0), body}, ""});
  cases->push_back({{header_bytes(id(), method, 0, /*kind=*/9), body}, ""});
  cases->push_back({{header_bytes(id(), method, 0, 1, /*magic=*/0x12345678), body}, ""});
  cases->push_back({{header_bytes(id(), method, 0, 1, kWireMagic, /*version=*/2), body}, ""});
  cases->push_back({{header_bytes(id(), method_name_of_length(kMaxMethodName + 1)), body}, ""});
  cases->push_back({{header_bytes(id(), method, /*blobs=*/1), body}, ""});
  cases->push_back({{header_bytes(id(), method, /*blobs=*/0), body, "extra part"}, ""});
  cases->push_back({{header_bytes(id(), method, /*blobs=*/kMaxBlobs + 1), body}, ""});
  cases->push_back({{header_bytes(id(), method)}, ""});  // no body part
  cases->push_back({{header_bytes(id(), method) + "x", body}, ""});
  std::string truncated = header_bytes(id(), method);
  truncated.pop_back();
  cases->push_back({{truncated, body}, ""});
}

TEST_F(LiveFuzzTest, WorkerRepliesWithErrorsToWrongTypesAndUnknownMethods) {
  auto counter = quiet_counter(100);
  int pid = counter.call(&Counter::pid).get(kCallTimeout);
  RawPeer peer(counter.info().endpoint);
  double blob_sum = 0;
  std::string blob = float_bytes(kBlobFloats, &blob_sum);

  std::vector<Expected> cases;
  auto add = [&](const std::string& outcome, const std::string& method, const std::string& body,
                 const std::vector<std::string>& blobs = {}) {
    cases.push_back({request(cases.size() + 1, method, body, blobs), outcome});
  };
  // The one call that changes the counter.
  add("ok", "Counter.add", Bytes().put<int32_t>(5).str());
  add("ok", "Counter.sum", out_of_band_tensor_body(), {blob});
  // Arguments of the wrong type, truncated, with trailing bytes, or lying about lengths.
  const std::string bad = "WireFormatError";
  add(bad, "Counter.add", Bytes().put_string("five").str());
  add(bad, "Counter.add", Bytes().put<int64_t>(5).str());
  add(bad, "Counter.add", Bytes().put<int16_t>(5).str());
  add(bad, "Counter.add", "");
  add(bad, "Counter.env", Bytes().put<int32_t>(5).str());
  add(bad, "Counter.env", Bytes().put<uint64_t>(uint64_t{1} << 60).raw("HOME").str());
  add(bad, "Counter.env", Bytes().put<uint64_t>(~uint64_t{0}).raw("HOME").str());
  add(bad, "Counter.fail", Bytes().put<uint64_t>(uint64_t{1} << 62).str());
  add(bad, "Counter.sum", Bytes().put<int32_t>(5).str());
  add(bad, "Counter.sum", tensor_bytes(0x7f, {4}, 16, std::string(16, '\0')));
  add(bad, "Counter.sum", tensor_bytes(kFloat32Code, std::vector<int64_t>(1000, 1), 4, "abcd"));
  add(bad, "Counter.sum", tensor_bytes(kFloat32Code, {-1}, 4, "abcd"));
  add(bad, "Counter.sum", tensor_bytes(kFloat32Code, {4}, 17, std::string(17, '\0')));
  add(bad, "Counter.sum", tensor_bytes(kFloat32Code, {int64_t{1} << 40}, uint64_t{1} << 42, ""));
  add(bad, "Counter.sum", tensor_bytes(kFloat32Code, {int64_t{1} << 28}, uint64_t{1} << 30, ""));
  add(bad, "Counter.sum", tensor_bytes(kFloat32Code, {INT64_MAX, 2}, 8, ""));
  add(bad, "Counter.sum", out_of_band_tensor_body(7));
  add(bad, "Counter.sum", out_of_band_tensor_body(0), {blob.substr(1)});
  add(bad, "Counter.sum", out_of_band_tensor_body(0, 0), {blob});
  add(bad, "Counter.sum", out_of_band_tensor_body(kSharedMemoryIndex), {"OOZESHM1/ooze-1-999999"});
  add(bad, "Counter.sum", out_of_band_tensor_body(kSharedMemoryIndex), {"OOZESHM1/ooze-../../x"});
  add(bad, "Counter.sum", out_of_band_tensor_body(kSharedMemoryIndex), {"not a descriptor"});
  add(bad, "Counter.sum", out_of_band_tensor_body(kSharedMemoryIndex | 3), {blob});
  // Methods the class does not have.
  for (const std::string& name : unknown_method_names()) {
    if (name.size() <= kMaxMethodName) add("UnknownMethod", name, Bytes().put<int32_t>(5).str());
  }
  // Malformed or not requests: dropped. Each would add 1000 if it ran.
  add_dropped_variants(&cases, "Counter.add", Bytes().put<int32_t>(1000).str());

  auto start = Clock::now();
  std::map<uint64_t, Message> replies = expect_outcomes(peer, cases);
  std::printf("[   FUZZ   ] worker, exact outcomes: %zu frames in %.2f s\n", cases.size(),
              seconds_since(start));

  // The add saw 100 and nothing else ever changed the counter.
  ASSERT_EQ(replies.count(1), 1u);
  ASSERT_EQ(replies[1].body.size(), sizeof(int32_t));
  int32_t added = 0;
  std::memcpy(&added, replies[1].body.data(), sizeof(added));
  EXPECT_EQ(added, 105);
  ASSERT_EQ(replies.count(2), 1u);
  ASSERT_EQ(replies[2].body.size(), sizeof(double));
  double sum = 0;
  std::memcpy(&sum, replies[2].body.data(), sizeof(sum));
  EXPECT_DOUBLE_EQ(sum, blob_sum);
  EXPECT_EQ(counter.call(&Counter::get).get(kCallTimeout), 105);
  expect_same_process(counter, pid);
}

TEST_F(LiveFuzzTest, HeadSurvivesGarbageAndMutatedControlRequests) {
  auto counter = quiet_counter(0);
  int pid = counter.call(&Counter::pid).get(kCallTimeout);
  auto head_serves = [&] {
    std::string key = "fuzz/check/" + random_id();
    kv_put(key, "alive");
    EXPECT_EQ(kv_get(key, kCallTimeout), "alive");
  };

  // Exact outcomes first, from one peer (the head answers one peer's requests in order).
  RawPeer exact_peer(head_endpoint());
  std::vector<Expected> cases;
  auto add = [&](const std::string& outcome, const std::string& method, const std::string& body) {
    cases.push_back({request(cases.size() + 1, method, body), outcome});
  };
  const std::string bad = "WireFormatError";
  add("ok", method::kKvPut, Bytes().put_string("fuzz/exact").put_string("v1").str());
  add("ok", method::kKvGet, Bytes().put_string("fuzz/exact").put<int64_t>(0).str());
  add("ok", method::kStatus, "");
  add("ok", method::kHeartbeat, "");
  add("NotFound", method::kKvGet, Bytes().put_string("fuzz/absent").put<int64_t>(0).str());
  add("NotFound", method::kGetActor, Bytes().put_string("nobody").str());
  add(bad, method::kKvGet, Bytes().put<int32_t>(5).str());
  add(bad, method::kKvGet, Bytes().put_string("fuzz/exact").put<int64_t>(0).raw("x").str());
  add(bad, method::kKvPut, Bytes().put<uint64_t>(uint64_t{1} << 60).raw("k").str());
  add(bad, method::kKvPut, Bytes().put_string("k").put<uint64_t>(~uint64_t{0}).str());
  add(bad, method::kKvPut, "");
  add(bad, method::kGetActor, "");
  add(bad, method::kRegisterClient, Bytes().put<int32_t>(5).str());
  add(bad, method::kWaitPlacementGroup, Bytes().put_string("g").str());
  add(bad, method::kWorkerLog,
      Bytes()
          .put_string("a")
          .put_string("o")
          .put_string("p")
          .put<uint64_t>(uint64_t{1} << 62)
          .str());
  for (const std::string& name : unknown_method_names()) {
    if (name.size() <= kMaxMethodName) add("UnknownMethod", name, "");
  }
  add_dropped_variants(&cases, method::kKvPut,
                       Bytes().put_string("fuzz/dropped").put_string("x").str());
  std::map<uint64_t, Message> replies = expect_outcomes(exact_peer, cases);
  // kv_get answered with the KeyValue the kv_put before it stored.
  ASSERT_EQ(replies.count(2), 1u);
  EXPECT_EQ(replies[2].body, Bytes().put_string("fuzz/exact").put_string("v1").str());
  EXPECT_THROW(kv_get("fuzz/dropped", std::chrono::milliseconds(200)), GetTimeoutError);

  // Then volume: garbage and mutated control requests from several peers.
  std::vector<RawPeer> peers;
  for (int i = 0; i < 3; ++i) peers.emplace_back(head_endpoint());
  FrameFuzzer fuzzer(kSeed + 2, head_methods(), foreign_bodies());
  auto start = Clock::now();
  int well_formed = send_garbage(fuzzer, peers, kGarbageFrames, head_serves);
  ReplyTally garbage_tally;
  EXPECT_TRUE(collect_through_marker(peers, method::kHeartbeat, &garbage_tally));
  report("head, random garbage", kGarbageFrames, seconds_since(start), garbage_tally);
  EXPECT_EQ(garbage_tally.error_count("UnknownMethod"), well_formed) << garbage_tally.describe();
  EXPECT_EQ(garbage_tally.total(), well_formed) << garbage_tally.describe();

  start = Clock::now();
  send_mutations(fuzzer, head_templates(), peers, kMutatedFrames, head_serves);
  ReplyTally mutation_tally;
  EXPECT_TRUE(collect_through_marker(peers, method::kHeartbeat, &mutation_tally));
  report("head, mutated control requests", kMutatedFrames, seconds_since(start), mutation_tally);
  EXPECT_GT(mutation_tally.ok, 100) << mutation_tally.describe();
  EXPECT_GT(mutation_tally.error_count("WireFormatError"), 100) << mutation_tally.describe();
  EXPECT_GT(mutation_tally.error_count("UnknownMethod"), 100) << mutation_tally.describe();
  EXPECT_EQ(mutation_tally.undecodable_errors, 0);
  EXPECT_EQ(malformed_messages(peers), 0);

  // The runtime still works end to end: the store, a new actor, the old one.
  head_serves();
  auto fresh = spawn<Counter>({}, 41);
  EXPECT_EQ(fresh.call(&Counter::add, 1).get(kCallTimeout), 42);
  EXPECT_EQ(counter.call(&Counter::add, 2).get(kCallTimeout), 2);
  expect_same_process(counter, pid);
}

TEST_F(LiveFuzzTest, HeadCutsOffPartsAboveTheControlLimit) {
  constexpr std::size_t kMiB = 1 << 20;
  static_assert(kMaxControlPartBytes == int64_t{64} << 20, "the sizes below straddle the limit");
  RawPeer peer(head_endpoint());
  auto kv_put_frame = [](uint64_t id, const std::string& key, std::size_t value_bytes) {
    return request(id, method::kKvPut,
                   Bytes().put_string(key).put_string(std::string(value_bytes, 'v')).str());
  };
  auto start = Clock::now();
  // Just under the limit: stored and answered.
  peer.send(kv_put_frame(1, "fuzz/under-limit", 60 * kMiB));
  ASSERT_TRUE(peer.collect_until([&] { return !peer.received.empty(); }, kReplyTimeout));
  EXPECT_EQ(peer.received[0].header.id, 1u);
  EXPECT_TRUE(peer.received[0].header.ok);
  peer.received.clear();
  // 65 MiB: ZeroMQ drops the connection at the part's size prefix; the head never sees it.
  peer.send(kv_put_frame(2, "fuzz/over-limit", 65 * kMiB));
  peer.collect(std::chrono::milliseconds(1000));
  EXPECT_TRUE(peer.received.empty());
  double seconds = seconds_since(start);

  // The head still serves, this peer included (ZeroMQ reconnects it), and stored nothing.
  peer.send(request(3, method::kHeartbeat, ""));
  ASSERT_TRUE(peer.collect_until([&] { return !peer.received.empty(); }, kReplyTimeout));
  for (const Message& reply : peer.received) EXPECT_NE(reply.header.id, 2u) << "stored 65 MiB";
  EXPECT_EQ(peer.received.back().header.id, 3u);
  EXPECT_THROW(kv_get("fuzz/over-limit", std::chrono::milliseconds(200)), GetTimeoutError);
  std::string stored = kv_get("fuzz/under-limit", kCallTimeout);
  EXPECT_EQ(stored.size(), 60 * kMiB);
  EXPECT_EQ(stored.find_first_not_of('v'), std::string::npos);
  auto counter = spawn<Counter>({}, 1);
  EXPECT_EQ(counter.call(&Counter::add, 1).get(kCallTimeout), 2);
  std::printf("[   FUZZ   ] head, 60 MiB + 65 MiB parts in %.2f s\n", seconds);
}

// ---- the archive's bounds, without processes ------------------------------------------------

TEST(WireBoundsTest, HandWrittenFramesMatchTheEncoder) {
  WireHeader header;
  header.kind = MessageKind::kRequest;
  header.id = 0x0102030405060708;
  header.method = "Counter.add";
  header.blobs = 3;
  EXPECT_EQ(to_wire(header), header_bytes(header.id, "Counter.add", 3));
  EXPECT_EQ(to_wire(std::tuple<int>(5)), Bytes().put<int32_t>(5).str());
  EXPECT_EQ(to_wire(KeyValue{"k", "v"}), Bytes().put_string("k").put_string("v").str());
  EXPECT_EQ(to_wire(WaitRequest{"k", 7}), Bytes().put_string("k").put<int64_t>(7).str());

  at::Tensor small = at::arange(4, at::kFloat).remainder(7).reshape({2, 2});
  double ignored = 0;
  EXPECT_EQ(to_wire(std::tuple<at::Tensor>(small)),
            tensor_bytes(kFloat32Code, {2, 2}, 16, float_bytes(4, &ignored)));
  at::Tensor large = at::arange(kBlobFloats, at::kFloat).remainder(7);
  Payload payload = to_payload(std::tuple<at::Tensor>(large));
  EXPECT_EQ(payload.bytes, out_of_band_tensor_body(0));
  ASSERT_EQ(payload.blobs.size(), 1u);
  EXPECT_EQ(payload.blobs[0].to_string(), float_bytes(kBlobFloats, &ignored));
}

TEST(WireBoundsTest, StringLengthBeyondTheFrameIsRefusedWithoutAllocating) {
  for (uint64_t length :
       {uint64_t{1} << 62, uint64_t{1} << 60, uint64_t{1} << 30, ~uint64_t{0}, uint64_t{9}}) {
    std::string frame = Bytes().put<uint64_t>(length).raw("abcdefgh").str();
    std::string value;
    std::size_t largest = largest_allocation([&] {
      try {
        from_wire(frame, value);
        ADD_FAILURE() << "a string of " << length << " bytes in an 8-byte frame was accepted";
      } catch (const WireFormatError& error) {
        EXPECT_NE(std::string(error.what()).find("length prefix"), std::string::npos)
            << error.what();
      }
    });
    EXPECT_LT(largest, 4096u) << "length prefix " << length;
  }
  // The largest honest length still decodes, and the probe does see what that allocates.
  std::string value;
  from_wire(Bytes().put<uint64_t>(8).raw("abcdefgh").str(), value);
  EXPECT_EQ(value, "abcdefgh");
  std::string honest = Bytes().put<uint64_t>(1 << 16).raw(std::string(1 << 16, 'x')).str();
  EXPECT_GE(largest_allocation([&] { from_wire(honest, value); }), std::size_t{1} << 16);
  EXPECT_EQ(value.size(), std::size_t{1} << 16);
}

TEST(WireBoundsTest, ContainerLengthBeyondTheFrameIsRefusedWithoutAllocating) {
  std::string payload = Bytes().put<int64_t>(1).put<int64_t>(2).str();  // 16 bytes
  auto refused = [&](auto value, uint64_t length) {
    std::string frame = Bytes().put<uint64_t>(length).raw(payload).str();
    std::size_t largest = largest_allocation(
        [&] { EXPECT_THROW(from_wire(frame, value), WireFormatError) << "length " << length; });
    // At most one element per byte left was believed: 16 int64 for this frame.
    EXPECT_LE(largest, 16u * 64) << "length " << length;
  };
  for (uint64_t length : {uint64_t{1} << 62, uint64_t{1} << 61, uint64_t{1} << 30, uint64_t{17}}) {
    refused(std::vector<int64_t>(), length);
    refused(std::vector<std::string>(), length);
    refused(std::map<std::string, std::string>(), length);
    refused(std::vector<std::vector<int64_t>>(), length);
  }
  // A length the bytes could hold as bytes but not as int64 values: truncated, not overread.
  refused(std::vector<int64_t>(), 16);
  std::vector<int64_t> values;
  from_wire(Bytes().put<uint64_t>(2).raw(payload).str(), values);
  EXPECT_EQ(values, (std::vector<int64_t>{1, 2}));
}

TEST(WireBoundsTest, TrailingBytesAreRefused) {
  int value = 0;
  EXPECT_THROW(from_wire(Bytes().put<int32_t>(5).raw("x").str(), value), WireFormatError);
  KeyValue entry;
  std::string frame = Bytes().put_string("k").put_string("v").str();
  EXPECT_THROW(from_wire(frame + std::string(1, '\0'), entry), WireFormatError);
  try {
    from_wire(frame + "xyz", entry);
    FAIL() << "trailing bytes were accepted";
  } catch (const WireFormatError& error) {
    EXPECT_NE(std::string(error.what()).find("3 unexpected trailing bytes"), std::string::npos)
        << error.what();
  }
  from_wire(frame, entry);
  EXPECT_EQ(entry.key, "k");
  EXPECT_EQ(entry.value, "v");
}

TEST(WireBoundsTest, EveryTruncationIsRefused) {
  std::vector<std::pair<std::string, std::function<void(const std::string&)>>> frames = {
      {header_bytes(7, "Counter.add", 2),
       [](const std::string& bytes) {
         WireHeader header;
         from_wire(bytes, header);
       }},
      {Bytes().put_string("a key").put_string("a value").str(),
       [](const std::string& bytes) {
         KeyValue entry;
         from_wire(bytes, entry);
       }},
      {tensor_bytes(kFloat32Code, {2, 2}, 16, std::string(16, '\1')), [](const std::string& bytes) {
         std::tuple<at::Tensor> tensor;
         from_wire(bytes, tensor);
       }}};
  for (const auto& [frame, decode] : frames) {
    for (std::size_t length = 0; length < frame.size(); ++length) {
      EXPECT_THROW(decode(frame.substr(0, length)), WireFormatError) << "length " << length;
    }
    EXPECT_NO_THROW(decode(frame));
  }
}

TEST(WireBoundsTest, DecodeHeaderRejectsBadFields) {
  auto decode = [](const std::string& bytes) {
    return decode_header(zmq::message_t(bytes.data(), bytes.size()));
  };
  auto rejects = [&](const std::string& bytes, const std::string& reason) {
    try {
      decode(bytes);
      ADD_FAILURE() << "accepted a header that should fail with \"" << reason << "\"";
    } catch (const WireFormatError& error) {
      EXPECT_NE(std::string(error.what()).find(reason), std::string::npos) << error.what();
    }
  };
  WireHeader good = decode(header_bytes(42, "Counter.add", 2));
  EXPECT_EQ(good.id, 42u);
  EXPECT_EQ(good.method, "Counter.add");
  EXPECT_EQ(good.blobs, 2u);

  rejects(header_bytes(1, "m", 0, 1, /*magic=*/0x4f4f5a46), "bad magic");
  rejects(header_bytes(1, "m", 0, 1, kWireMagic, /*version=*/0), "wire version 0");
  rejects(header_bytes(1, "m", 0, 1, kWireMagic, /*version=*/2), "wire version 2");
  for (uint8_t kind : {0, 4, 255}) {
    rejects(header_bytes(1, "m", 0, kind), "unknown message kind " + std::to_string(kind));
  }
  EXPECT_NO_THROW(decode(header_bytes(1, method_name_of_length(kMaxMethodName))));
  rejects(header_bytes(1, method_name_of_length(kMaxMethodName + 1)), "method name too long");
  EXPECT_NO_THROW(decode(header_bytes(1, "m", kMaxBlobs)));
  rejects(header_bytes(1, "m", kMaxBlobs + 1), "too many blobs");
  rejects(header_bytes(1, "m", 0xffffffffu), "too many blobs");
  // Oversized: refused on its size before any decoding.
  rejects(header_bytes(1, "m") + std::string(kMaxHeaderBytes, 'x'), "exceeds the limit");
  // A method length that runs past the part.
  std::string lying = header_bytes(1, "m");
  uint64_t huge = uint64_t{1} << 60;
  std::memcpy(&lying[kMethodLengthOffset], &huge, sizeof(huge));
  rejects(lying, "length prefix");
}

TEST(WireBoundsTest, ReceiveMessageRejectsWrongPartCounts) {
  zmq::socket_t server(zmq_context(), zmq::socket_type::pair);
  zmq::socket_t client(zmq_context(), zmq::socket_type::pair);
  std::string endpoint = "inproc://fuzz-test-part-counts";
  server.bind(endpoint);
  client.connect(endpoint);
  auto send = [&](const Frame& frame) {
    for (std::size_t i = 0; i < frame.size(); ++i) {
      client.send(zmq::buffer(frame[i]),
                  i + 1 < frame.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  };
  auto receive = [&](std::string* rejected) {
    zmq::pollitem_t item{server.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(2000));
    return receive_message(server, nullptr, rejected);
  };
  auto rejects = [&](const Frame& frame, const std::string& reason) {
    send(frame);
    std::string rejected;
    EXPECT_FALSE(receive(&rejected).has_value());
    EXPECT_NE(rejected.find(reason), std::string::npos) << rejected;
  };
  rejects({header_bytes(1, "m")}, "needs a header and a body");
  rejects({header_bytes(1, "m", 2), "body", "blob"}, "announces 2 blobs, message has 1");
  rejects({header_bytes(1, "m", 0), "body", "blob"}, "announces 0 blobs, message has 1");
  // More parts than any header may announce: refused, and drained to the end.
  Frame flood{header_bytes(1, "m", kMaxBlobs), "body"};
  flood.resize(2 + kMaxBlobs + 10, "x");
  rejects(flood, "announces");
  // The next message starts clean.
  send({header_bytes(9, "m", 2), "body", "blob 0", "blob 1"});
  std::string rejected;
  auto message = receive(&rejected);
  ASSERT_TRUE(message.has_value()) << rejected;
  EXPECT_EQ(message->header.id, 9u);
  EXPECT_EQ(message->body, "body");
  ASSERT_EQ(message->blobs.size(), 2u);
  EXPECT_EQ(message->blobs[1].to_string(), "blob 1");
}

}  // namespace fuzz_test
}  // namespace ooze::actors
