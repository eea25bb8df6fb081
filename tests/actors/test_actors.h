// Actor classes for the runtime's tests (registered in test_actors.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ooze::actors::testing {

// Where the test programs are: the worker program every test driver starts.
std::string worker_program();
// Whether process `pid` has exited (gone, or a zombie nobody reaped yet).
bool process_gone(int pid);

class Counter {
 public:
  explicit Counter(int start) : value_(start) {}
  int add(int delta) { return value_ += delta; }
  int get() const { return value_; }
  int pid() const;
  std::string env(const std::string& name) const;
  // Throws std::invalid_argument(message).
  int fail(const std::string& message);
  // Ends the process with `code` at once.
  int exit_now(int code);
  int sleep_ms(int milliseconds);
  // Writes `line` to stdout and `line` + "!" to stderr.
  int print(const std::string& line);
  // Doubles the tensor (sent and returned out of band when large).
  at::Tensor twice(const at::Tensor& tensor);
  double sum(const at::Tensor& tensor);
  // Spawns a Counter of its own and returns that actor's pid.
  int spawn_child();

 private:
  int value_;
};

class BrokenConstructor {
 public:
  explicit BrokenConstructor(const std::string& message);
  int get() const { return 0; }
};

// Two calls at once: block() waits until release() is called (max_concurrency 2).
class Gate {
 public:
  Gate() = default;
  int block();
  int release();

 private:
  std::atomic<bool> open_{false};
};

// A base class whose methods an actor class (TimedTally) inherits.
class Tally {
 public:
  virtual ~Tally() = default;
  int add(int delta) { return total_ += delta; }
  const int& total() const { return total_; }
  virtual std::string kind() const { return "tally"; }

 private:
  int total_ = 0;
};

class TimedTally : public Tally {
 public:
  std::string kind() const override { return "timed"; }
  // Adds the whole seconds of `duration`.
  int add_seconds(std::chrono::milliseconds duration) {
    return add(static_cast<int>(duration.count() / 1000));
  }
};

// Uses the head's key-value store through KvStore from inside a worker, as a rank of a
// collective group does.
class StoreUser {
 public:
  StoreUser() = default;
  // Waits for `start_key` to be set, then adds 1 to `key` `times` times; returns what each add
  // returned, in order.
  std::vector<int64_t> count(const std::string& start_key, const std::string& key, int times);
  // Sets `key` to `value` after sleeping `delay_ms`.
  int set_later(const std::string& key, const std::string& value, int delay_ms);
  std::string get(const std::string& key, int timeout_ms);
  // Forms the Gloo group `group` of `size` ranks through the head's store and returns the sum of
  // every rank's `value` (an all-reduce).
  double all_reduce_sum(const std::string& group, int rank, int size, double value);
};

}  // namespace ooze::actors::testing
