// Wall-clock timing on the steady clock, for step-time breakdowns:
//
//   std::map<std::string, double> times;  // seconds per phase, loggable by MetricsSink
//   { ScopedTimer t(times, "time/forward"); forward(); }
//   { ScopedTimer t(times, "time/backward"); backward(); }
//
// Neither class is thread-safe: give each thread its own accumulator map.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <utility>

namespace ooze {

// Seconds on the steady clock since `start`.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

class Timer {
 public:
  Timer() : start_(Clock::now()) {}

  void reset() { start_ = Clock::now(); }
  // Seconds since construction or the last reset().
  double elapsed() const { return seconds_since(start_); }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_;
};

// Adds the seconds between construction and destruction to totals[name].
class ScopedTimer {
 public:
  ScopedTimer(std::map<std::string, double>& totals, std::string name)
      : totals_(totals), name_(std::move(name)) {}
  ~ScopedTimer() { totals_[name_] += timer_.elapsed(); }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  std::map<std::string, double>& totals_;
  std::string name_;
  Timer timer_;
};

}  // namespace ooze
