// KvStore: comm::Store over the head's key-value store, from the driver and from actors in
// their own worker processes: set/get/add/check/wait, atomic adds under concurrency, timeouts
// that name the missing keys, a Gloo group formed through it, and the head's answers to
// malformed store requests.
#include "actors/kv_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "actors/runtime.h"
#include "actors/transport.h"
#include "actors/wire.h"
#include "comm/comm_error.h"
#include "tests/actors/test_actors.h"

namespace ooze::actors {
namespace kv_store_test {

using testing::StoreUser;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

class KvStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    RuntimeOptions options;
    options.worker_executable = testing::worker_program();
    options.resources = {{"CPU", 16}};
    init(options);
  }
  static void TearDownTestSuite() { shutdown(); }

  // Keys no other test (or earlier run against the same head) uses.
  std::string prefix_ = "kv-test/" + random_id() + "/";
};

int64_t elapsed_ms(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
}

std::string int64_bytes(int64_t value) {
  return std::string(reinterpret_cast<const char*>(&value), sizeof(value));
}

TEST_F(KvStoreTest, SetGetAddCheckFromTheDriver) {
  KvStore store;
  const std::string a = prefix_ + "a", b = prefix_ + "b", n = prefix_ + "n";
  store.set(a, std::string("x\0y", 3));
  EXPECT_EQ(store.get(a, milliseconds(1000)), std::string("x\0y", 3));
  EXPECT_EQ(store.get(a, milliseconds(0)), std::string("x\0y", 3));  // set: no wait needed
  EXPECT_TRUE(store.check({a}));
  EXPECT_FALSE(store.check({a, b}));
  EXPECT_TRUE(store.check({}));
  store.wait({a, a}, milliseconds(0));  // all set: returns at once, repeats or not
  store.set(a, "overwritten");
  EXPECT_EQ(store.get(a, milliseconds(1000)), "overwritten");

  // add: starts from 0, returns the new value, and is what kv_get and get see (8 bytes, as
  // comm::TcpStore keeps it).
  EXPECT_FALSE(store.check({n}));
  EXPECT_EQ(store.add(n, 5), 5);
  EXPECT_TRUE(store.check({n}));
  EXPECT_EQ(store.add(n, -2), 3);
  EXPECT_EQ(store.add(n, 0), 3);
  EXPECT_EQ(store.get(n, milliseconds(1000)), int64_bytes(3));
  EXPECT_EQ(kv_get(n, milliseconds(1000)), int64_bytes(3));
  // A value that is not an 8-byte integer counts as 0, as in comm::TcpStore.
  store.set(b, "text");
  EXPECT_EQ(store.add(b, 7), 7);
  // The sum wraps instead of overflowing.
  const std::string wrap = prefix_ + "wrap";
  EXPECT_EQ(store.add(wrap, std::numeric_limits<int64_t>::max()),
            std::numeric_limits<int64_t>::max());
  EXPECT_EQ(store.add(wrap, 1), std::numeric_limits<int64_t>::min());

  // The same store as the runtime's kv_put / kv_get.
  kv_put(prefix_ + "from-kv-put", "1");
  EXPECT_EQ(store.get(prefix_ + "from-kv-put", milliseconds(1000)), "1");
}

TEST_F(KvStoreTest, PrefixStoreNamespacesKeys) {
  auto base = std::make_shared<KvStore>();
  comm::PrefixStore group(prefix_ + "group", base);
  group.set("k", "v");
  EXPECT_EQ(base->get(prefix_ + "group/k", milliseconds(1000)), "v");
  EXPECT_FALSE(base->check({prefix_ + "k"}));
  EXPECT_EQ(group.add("count", 2), 2);
  EXPECT_EQ(base->add(prefix_ + "group/count", 1), 3);
}

TEST_F(KvStoreTest, DriverGetAndWaitReturnWhenAnActorSetsTheKeyLater) {
  auto user = spawn<StoreUser>({});
  user.wait_ready();
  KvStore store;
  const std::string late = prefix_ + "late";
  auto start = Clock::now();
  auto setting = user.call(&StoreUser::set_later, late, std::string("value"), 300);
  EXPECT_EQ(store.get(late, milliseconds(20000)), "value");
  EXPECT_GE(elapsed_ms(start), 250);
  EXPECT_EQ(setting.get(), 300);

  const std::string first = prefix_ + "first", second = prefix_ + "second";
  store.set(first, "1");
  start = Clock::now();
  setting = user.call(&StoreUser::set_later, second, std::string("2"), 300);
  store.wait({first, second}, milliseconds(20000));
  EXPECT_GE(elapsed_ms(start), 250);
  EXPECT_TRUE(store.check({first, second}));
  setting.get();
}

TEST_F(KvStoreTest, ActorGetReturnsWhatTheDriverSetsLater) {
  auto user = spawn<StoreUser>({});
  const std::string key = prefix_ + "for-the-actor";
  auto got = user.call(&StoreUser::get, key, 20000);
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_FALSE(got.ready());
  KvStore().set(key, "hello actor");
  EXPECT_EQ(got.get(), "hello actor");
}

TEST_F(KvStoreTest, AddsFromTwoActorsAndTheDriverAtOnceAreAtomic) {
  constexpr int kTimes = 300;
  auto one = spawn<StoreUser>({});
  auto two = spawn<StoreUser>({});
  one.wait_ready();
  two.wait_ready();
  const std::string start = prefix_ + "start", counter = prefix_ + "counter";
  // Both actors block on `start`, so their adds and the driver's all run at the same time.
  auto first = one.call(&StoreUser::count, start, counter, kTimes);
  auto second = two.call(&StoreUser::count, start, counter, kTimes);
  std::this_thread::sleep_for(milliseconds(200));
  KvStore store;
  store.set(start, "go");
  std::vector<int64_t> seen;
  for (int i = 0; i < kTimes; ++i) seen.push_back(store.add(counter, 1));
  for (auto* future : {&first, &second}) {
    std::vector<int64_t> theirs = future->get();
    ASSERT_EQ(theirs.size(), static_cast<size_t>(kTimes));
    EXPECT_TRUE(std::is_sorted(theirs.begin(), theirs.end()));
    seen.insert(seen.end(), theirs.begin(), theirs.end());
  }
  // Every add saw a distinct value: none was lost or applied twice.
  std::sort(seen.begin(), seen.end());
  std::vector<int64_t> expected(3 * kTimes);
  std::iota(expected.begin(), expected.end(), 1);
  EXPECT_EQ(seen, expected);
  EXPECT_EQ(store.add(counter, 0), 3 * kTimes);
}

TEST_F(KvStoreTest, GetAndWaitTimeOutWithCommTimeoutErrorNamingTheMissingKeys) {
  KvStore store;
  const std::string present = prefix_ + "present", absent = prefix_ + "absent",
                    other = prefix_ + "other-absent";
  store.set(present, "1");

  auto start = Clock::now();
  try {
    store.get(absent, milliseconds(300));
    FAIL() << "expected CommTimeoutError";
  } catch (const comm::CommTimeoutError& error) {
    EXPECT_NE(std::string(error.what()).find("'" + absent + "'"), std::string::npos)
        << error.what();
  }
  EXPECT_GE(elapsed_ms(start), 300);
  EXPECT_LT(elapsed_ms(start), 5000);

  start = Clock::now();
  try {
    store.wait({present, absent, other}, milliseconds(300));
    FAIL() << "expected CommTimeoutError";
  } catch (const comm::CommTimeoutError& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("'" + absent + "'"), std::string::npos) << message;
    EXPECT_NE(message.find("'" + other + "'"), std::string::npos) << message;
    EXPECT_EQ(message.find("'" + present + "'"), std::string::npos) << message;
  }
  EXPECT_GE(elapsed_ms(start), 300);
  EXPECT_LT(elapsed_ms(start), 5000);

  // No time to wait: a missing key times out at once (not NotFound).
  start = Clock::now();
  EXPECT_THROW(store.get(absent, milliseconds(0)), comm::CommTimeoutError);
  EXPECT_THROW(store.wait({absent}, milliseconds(0)), comm::CommTimeoutError);
  EXPECT_LT(elapsed_ms(start), 2000);
}

TEST_F(KvStoreTest, TimeoutInsideAnActorIsACommTimeoutErrorNamingTheKey) {
  auto user = spawn<StoreUser>({});
  const std::string never = prefix_ + "never";
  try {
    user.call(&StoreUser::get, never, 300).get();
    FAIL() << "expected RemoteError";
  } catch (const RemoteError& error) {
    EXPECT_NE(error.type().find("CommTimeoutError"), std::string::npos) << error.type();
    EXPECT_NE(error.remote_message().find("'" + never + "'"), std::string::npos) << error.what();
  }
}

TEST_F(KvStoreTest, EveryWaiterWakesWhenItsLastKeyIsSet) {
  // The rendezvous pattern: each of N parties sets its key, then waits for all N.
  constexpr int kParties = 8;
  std::vector<std::string> keys;
  for (int i = 0; i < kParties; ++i) keys.push_back(prefix_ + "joined/" + std::to_string(i));
  std::vector<std::string> with_repeats = keys;
  with_repeats.push_back(keys[0]);
  KvStore store;
  std::vector<std::thread> parties;
  std::vector<int> done(kParties, 0);
  auto start = Clock::now();
  for (int i = 0; i < kParties; ++i) {
    parties.emplace_back([&, i] {
      std::this_thread::sleep_for(milliseconds(20 * i));
      store.set(keys[i], "1");
      store.wait(i % 2 == 0 ? keys : with_repeats, milliseconds(20000));
      done[i] = 1;
    });
  }
  for (std::thread& party : parties) party.join();
  EXPECT_EQ(std::count(done.begin(), done.end(), 1), kParties);
  EXPECT_LT(elapsed_ms(start), 10000);
}

TEST_F(KvStoreTest, GlooGroupOfTwoActorsFormsThroughTheHeadsStore) {
  auto zero = spawn<StoreUser>({});
  auto one = spawn<StoreUser>({});
  const std::string group = prefix_ + "gloo";
  auto sum_zero = zero.call(&StoreUser::all_reduce_sum, group, 0, 2, 1.5);
  auto sum_one = one.call(&StoreUser::all_reduce_sum, group, 1, 2, 2.0);
  EXPECT_DOUBLE_EQ(sum_zero.get(), 3.5);
  EXPECT_DOUBLE_EQ(sum_one.get(), 3.5);
}

// ---- the head's side, through a raw socket --------------------------------------------------

// One request to the head; returns its reply (fails the test after 10 s without one).
Message ask_head_raw(zmq::socket_t& socket, uint64_t id, const std::string& method,
                     const std::string& body) {
  Message request;
  request.header.kind = MessageKind::kRequest;
  request.header.id = id;
  request.header.method = method;
  request.body = body;
  send_message(socket, std::move(request));
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < deadline) {
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, milliseconds(100));
    std::string rejected;
    while (auto reply = receive_message(socket, nullptr, &rejected)) {
      if (reply->header.kind == MessageKind::kReply && reply->header.id == id) {
        return std::move(*reply);
      }
    }
  }
  ADD_FAILURE() << "the head did not answer " << method;
  return Message{};
}

std::string error_type(const Message& reply) {
  if (reply.header.ok) return "ok";
  ErrorReply error;
  from_wire(reply.body, error);
  return error.type;
}

TEST_F(KvStoreTest, HeadAnswersMalformedStoreRequestsAndKeepsServing) {
  zmq::socket_t socket = connect_socket(zmq::socket_type::dealer, head_endpoint(), Security::none(),
                                        kMaxControlPartBytes);
  uint64_t id = 0;
  EXPECT_EQ(error_type(ask_head_raw(socket, ++id, method::kKvAdd, "")), "WireFormatError");
  EXPECT_EQ(error_type(ask_head_raw(socket, ++id, method::kKvAdd, to_wire(std::string("k")))),
            "WireFormatError");
  EXPECT_EQ(error_type(ask_head_raw(socket, ++id, method::kKvWait, "")), "WireFormatError");
  uint64_t huge = uint64_t{1} << 60;  // a key count no frame could hold
  std::string lying(sizeof(huge), '\0');
  std::memcpy(&lying[0], &huge, sizeof(huge));
  EXPECT_EQ(error_type(ask_head_raw(socket, ++id, method::kKvWait, lying + "k")),
            "WireFormatError");

  // Well-formed ones are answered with what protocol.h says.
  const std::string key = prefix_ + "raw";
  Message added = ask_head_raw(socket, ++id, method::kKvAdd, to_wire(KvAdd{key, 41}));
  ASSERT_TRUE(added.header.ok);
  int64_t sum = 0;
  from_wire(added.body, sum);
  EXPECT_EQ(sum, 41);
  Message waited = ask_head_raw(socket, ++id, method::kKvWait,
                                to_wire(KvWait{{key, prefix_ + "raw-absent"}, 0}));
  ASSERT_TRUE(waited.header.ok);
  std::vector<std::string> missing;
  from_wire(waited.body, missing);
  EXPECT_EQ(missing, std::vector<std::string>{prefix_ + "raw-absent"});

  EXPECT_EQ(kv_add(key, 1), 42);
}

}  // namespace kv_store_test
}  // namespace ooze::actors
