#include "tests/actors/test_actors.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <thread>

#include "actors/kv_store.h"
#include "actors/runtime.h"
#include "comm/gloo_communicator.h"
#include "core/tensor_serialization.h"

namespace ooze::actors::testing {

std::string worker_program() { return OOZE_ACTORS_TEST_WORKER; }

bool process_gone(int pid) {
  if (::kill(pid, 0) != 0) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  auto close = text.rfind(')');  // the state follows the command name
  return close != std::string::npos && text.size() > close + 2 && text[close + 2] == 'Z';
}

int Counter::pid() const { return static_cast<int>(getpid()); }

std::string Counter::env(const std::string& name) const {
  const char* value = std::getenv(name.c_str());
  return value == nullptr ? "<unset>" : value;
}

int Counter::fail(const std::string& message) { throw std::invalid_argument(message); }

int Counter::exit_now(int code) {
  std::fflush(stdout);
  _exit(code);
}

int Counter::sleep_ms(int milliseconds) {
  std::this_thread::sleep_for(std::chrono::milliseconds(milliseconds));
  return milliseconds;
}

int Counter::print(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "%s!\n", line.c_str());
  return 0;
}

at::Tensor Counter::twice(const at::Tensor& tensor) { return tensor * 2; }

double Counter::sum(const at::Tensor& tensor) { return tensor.sum().item<double>(); }

int Counter::spawn_child() {
  auto child = spawn<Counter>({}, 0);
  return child.call(&Counter::pid).get();
}

BrokenConstructor::BrokenConstructor(const std::string& message) {
  throw std::runtime_error(message);
}

int Gate::block() {
  while (!open_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return 1;
}

int Gate::release() {
  open_ = true;
  return 2;
}

std::vector<int64_t> StoreUser::count(const std::string& start_key, const std::string& key,
                                      int times) {
  KvStore store;
  store.get(start_key, std::chrono::seconds(60));
  std::vector<int64_t> seen;
  for (int i = 0; i < times; ++i) seen.push_back(store.add(key, 1));
  return seen;
}

int StoreUser::set_later(const std::string& key, const std::string& value, int delay_ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  KvStore().set(key, value);
  return delay_ms;
}

std::string StoreUser::get(const std::string& key, int timeout_ms) {
  return KvStore().get(key, std::chrono::milliseconds(timeout_ms));
}

double StoreUser::all_reduce_sum(const std::string& group, int rank, int size, double value) {
  at::set_num_threads(1);
  auto store = std::make_shared<comm::PrefixStore>(group, std::make_shared<KvStore>());
  auto communicator =
      comm::make_gloo_communicator(store, rank, size, "sum", std::chrono::seconds(60));
  at::Tensor tensor = at::full({8}, value, at::kDouble);
  communicator->all_reduce(tensor, comm::ReduceOp::SUM);
  return tensor[7].item<double>();
}

namespace {

const auto counter_class = ActorClass<Counter>("Counter")
                               .constructor<int>()
                               .method("add", &Counter::add)
                               .method("get", &Counter::get)
                               .method("pid", &Counter::pid)
                               .method("env", &Counter::env)
                               .method("fail", &Counter::fail)
                               .method("exit_now", &Counter::exit_now)
                               .method("sleep_ms", &Counter::sleep_ms)
                               .method("print", &Counter::print)
                               .method("twice", &Counter::twice)
                               .method("sum", &Counter::sum)
                               .method("spawn_child", &Counter::spawn_child);

const auto broken_class = ActorClass<BrokenConstructor>("BrokenConstructor")
                              .constructor<std::string>()
                              .method("get", &BrokenConstructor::get);

const auto gate_class =
    ActorClass<Gate>("Gate").method("block", &Gate::block).method("release", &Gate::release);

// Inherited methods registered in both spellings: the base's (&Tally::total) and the derived
// class's (&TimedTally::add, which C++ types as a method of Tally).
const auto timed_tally_class = ActorClass<TimedTally>("TimedTally")
                                   .method("add", &TimedTally::add)
                                   .method("total", &Tally::total)
                                   .method("kind", &TimedTally::kind)
                                   .method("add_seconds", &TimedTally::add_seconds);

const auto store_user_class = ActorClass<StoreUser>("StoreUser")
                                  .method("count", &StoreUser::count)
                                  .method("set_later", &StoreUser::set_later)
                                  .method("get", &StoreUser::get)
                                  .method("all_reduce_sum", &StoreUser::all_reduce_sum);

}  // namespace
}  // namespace ooze::actors::testing
