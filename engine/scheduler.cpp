#include "engine/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace ooze::engine {

Scheduler::Scheduler(BlockManager& blocks, int64_t max_running, int64_t chunked_prefill_size)
    : blocks_(blocks), max_running_(max_running), chunked_prefill_size_(chunked_prefill_size) {
  if (max_running < 1 || chunked_prefill_size < 1) {
    throw Error("Scheduler: max_running_requests (" + std::to_string(max_running) +
                ") and chunked_prefill_size (" + std::to_string(chunked_prefill_size) +
                ") must both be >= 1");
  }
}

void Scheduler::add_waiting(std::unique_ptr<Sequence> sequence) {
  waiting_.push_back(std::move(sequence));
}

int64_t Scheduler::num_running_samples() const {
  int64_t count = 0;
  for (const auto& sequence : running_) count += sequence->fan_out;
  return count;
}

bool Scheduler::reserve(Sequence& sequence, int64_t count, ScheduledStep& step) {
  return blocks_.append(sequence.table, count, step.copies);
}

void Scheduler::preempt(size_t running_index) {
  std::unique_ptr<Sequence> sequence = std::move(running_[running_index]);
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(running_index));
  blocks_.free(sequence->table);
  ++preemptions_;
  // Readmitted before anything that arrived later: FCFS order is kept across preemptions.
  waiting_.push_front(std::move(sequence));
}

void Scheduler::preempt_all() {
  while (!running_.empty()) preempt(running_.size() - 1);
}

ScheduledStep Scheduler::schedule() {
  ScheduledStep step;
  int64_t budget = chunked_prefill_size_;

  // 1. Running sequences, oldest first.
  for (size_t i = 0; i < running_.size();) {
    Sequence& sequence = *running_[i];
    const int64_t remaining = sequence.remaining();
    const bool decoding = remaining == 1;
    const int64_t count = decoding ? 1 : std::min(remaining, budget);
    if (count == 0) {  // mid-prompt, and this step's prefill budget is spent
      ++i;
      continue;
    }
    bool reserved = reserve(sequence, count, step);
    // Out of blocks: the newest running sequences make room, down to this one itself.
    while (!reserved && running_.size() - 1 > i) {
      preempt(running_.size() - 1);
      reserved = reserve(sequence, count, step);
    }
    if (!reserved) {
      preempt(i);
      continue;
    }
    if (!decoding) {
      budget -= count;
      step.prefill_tokens += count;
    }
    step.chunks.push_back({&sequence, count, sequence.remaining() == 0});
    ++i;
  }

  // 2. Waiting sequences, first come first served, while budget, slots and blocks last. A
  // small reserve of blocks keeps the running sequences decoding for a while.
  while (!waiting_.empty() && budget > 0) {
    const int64_t reserve_blocks = running_.empty() ? 0 : blocks_.num_blocks() / 100;
    Sequence& sequence = *waiting_.front();
    if (num_running_samples() + sequence.fan_out > max_running_) break;
    if (sequence.table.blocks.empty() && sequence.table.num_tokens == 0) {
      // A prompt being scored computes the positions it scores.
      const int64_t scored_from = sequence.next_scored_position();
      const int64_t cached = blocks_.match_prefix(sequence.table, sequence.tokens,
                                                  scored_from >= 0 ? scored_from : INT64_MAX);
      if (!sequence.counted_prompt)
        sequence.cached_tokens = std::min(cached, sequence.prompt_length);
    }
    const int64_t count = std::min(sequence.remaining(), budget);
    if (blocks_.blocks_needed(sequence.table, count) + reserve_blocks > blocks_.num_free_blocks() ||
        !reserve(sequence, count, step)) {
      blocks_.free(sequence.table);  // give the matched prefix back; retried next step
      break;
    }
    budget -= count;
    step.prefill_tokens += count;
    sequence.arrival = next_arrival_++;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    step.chunks.push_back({running_.back().get(), count, running_.back()->remaining() == 0});
  }
  return step;
}

std::vector<Sequence*> Scheduler::fork(Sequence& parent) {
  std::vector<Sequence*> children;
  auto position = std::find_if(running_.begin(), running_.end(),
                               [&](const auto& s) { return s.get() == &parent; });
  if (position == running_.end()) throw Error("Scheduler::fork: the sequence is not running");
  std::vector<std::unique_ptr<Sequence>> forked;
  for (int64_t index = 1; index < parent.fan_out; ++index) {
    auto child = std::make_unique<Sequence>(parent);  // copies tokens, text, output, table
    child->table = blocks_.fork(parent.table);
    child->index = parent.index + index;
    child->fan_out = 1;
    child->output.index = child->index;
    children.push_back(child.get());
    forked.push_back(std::move(child));
  }
  parent.fan_out = 1;
  running_.insert(position + 1, std::make_move_iterator(forked.begin()),
                  std::make_move_iterator(forked.end()));
  return children;
}

std::unique_ptr<Sequence> Scheduler::remove(Sequence* sequence) {
  auto take = [&](auto& container) -> std::unique_ptr<Sequence> {
    auto position = std::find_if(container.begin(), container.end(),
                                 [&](const auto& s) { return s.get() == sequence; });
    if (position == container.end()) return nullptr;
    std::unique_ptr<Sequence> owned = std::move(*position);
    container.erase(position);
    return owned;
  };
  std::unique_ptr<Sequence> owned = take(running_);
  if (!owned) owned = take(waiting_);
  if (!owned) throw Error("Scheduler::remove: unknown sequence");
  blocks_.free(owned->table);
  return owned;
}

}  // namespace ooze::engine
