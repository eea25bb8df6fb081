// The engine's scheduling policy, apart from the loop that runs it (engine/engine.cpp): which
// sequences compute which tokens in the next forward.
//
//   1. Running sequences first, oldest first: a decoding sequence feeds its one new token; one
//      still computing its prompt takes a chunk of what is left of the step's prefill budget.
//      A sequence that needs a block when none is free preempts the newest running sequence
//      (possibly itself): its blocks are freed and it waits to be recomputed.
//   2. Then waiting sequences, first come first served (no overtaking, so a long prompt is
//      never starved): each takes its cached prefix, then a chunk of the remaining budget,
//      while blocks and running slots last.
//
// Budgets: chunked_prefill_size bounds the prompt tokens of one step (decodes are not
// counted: they are always scheduled); max_running bounds the sequences holding blocks.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "engine/block_manager.h"
#include "engine/sequence.h"

namespace ooze::engine {

struct ScheduledChunk {
  Sequence* sequence = nullptr;
  int64_t num_tokens = 0;  // tokens[table.num_tokens - num_tokens .. table.num_tokens) this step
  bool completes = false;  // reaches the end of tokens: its last position is sampled
};

struct ScheduledStep {
  std::vector<ScheduledChunk> chunks;
  std::vector<BlockCopy> copies;  // copy-on-write, before the forward
  int64_t prefill_tokens = 0;
  bool empty() const { return chunks.empty(); }
};

class Scheduler {
 public:
  Scheduler(BlockManager& blocks, int64_t max_running, int64_t chunked_prefill_size);

  void add_waiting(std::unique_ptr<Sequence> sequence);
  // Plans the next forward and reserves its blocks. Sequences preempted on the way are back
  // in the waiting queue (their count is returned by num_preemptions()).
  ScheduledStep schedule();

  // The forked children of `parent` (fan_out - 1 new sequences sharing its blocks) join the
  // running set right after it; parent.fan_out becomes 1. Returns them in index order.
  std::vector<Sequence*> fork(Sequence& parent);
  // Frees a sequence's blocks and removes it (running or waiting); returns it to the caller.
  std::unique_ptr<Sequence> remove(Sequence* sequence);
  // Moves every running sequence back to waiting (blocks freed), oldest first in the queue.
  void preempt_all();

  const std::vector<std::unique_ptr<Sequence>>& running() const { return running_; }
  const std::deque<std::unique_ptr<Sequence>>& waiting() const { return waiting_; }
  int64_t num_running_samples() const;  // forked-to-be sequences count fan_out times
  int64_t num_preemptions() const { return preemptions_; }

 private:
  bool reserve(Sequence& sequence, int64_t count, ScheduledStep& step);
  void preempt(size_t running_index);

  BlockManager& blocks_;
  int64_t max_running_;
  int64_t chunked_prefill_size_;
  uint64_t next_arrival_ = 0;
  int64_t preemptions_ = 0;
  std::vector<std::unique_ptr<Sequence>> running_;  // in admission (arrival) order
  std::deque<std::unique_ptr<Sequence>> waiting_;
};

}  // namespace ooze::engine
