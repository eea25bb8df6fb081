// Metrics a loss returns for the trainer to log (pg_loss, pg_clipfrac, ppo_kl, kl_loss, tis, ...).
//
// Every micro-batch returns its share of each step-level metric. A share with Reduction::kSum is
// already scaled by the step's global counts (see loss_aggregation.h), so the step's value is the
// sum over micro-batches and over data-parallel ranks (all_reduce SUM); kMax and kMin shares
// combine with MAX and MIN. merge() does the micro-batch part:
//
//   LossMetrics step;
//   for (...) step.merge(policy_loss(inputs, options, scale).metrics);
//   // then all-reduce each entry with its reduction across DP ranks, and log step.to_map()
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ooze::algorithms {

class LossMetrics {
 public:
  enum class Reduction { kSum, kMax, kMin };
  struct Entry {
    double value = 0;
    Reduction reduction = Reduction::kSum;
  };

  // Adds `value` under `name`, combining with an existing entry by its reduction. Throws
  // ooze::Error when `name` exists with another reduction.
  void add(const std::string& name, double value, Reduction reduction = Reduction::kSum);
  // Combines every entry of `other` into this one, as add() does.
  void merge(const LossMetrics& other);

  bool contains(const std::string& name) const { return entries_.count(name) > 0; }
  // entries().at(name).value; throws ooze::Error naming the metrics there are when missing.
  double get(const std::string& name) const;
  const std::map<std::string, Entry>& entries() const { return entries_; }
  std::map<std::string, double> to_map() const;

 private:
  std::map<std::string, Entry> entries_;
};

// What every loss returns: the micro-batch loss to call backward() on (already multiplied by
// LossScale::gradient_factor(), see loss_aggregation.h) and its metrics.
struct LossOutput {
  at::Tensor loss;
  LossMetrics metrics;
};

// Collects scalar metric tensors during a loss and copies them to the host in one transfer (one
// device synchronisation per loss instead of one per metric). Tensors are detached.
class PendingMetrics {
 public:
  void add(const std::string& name, const at::Tensor& scalar,
           LossMetrics::Reduction reduction = LossMetrics::Reduction::kSum);
  LossMetrics resolve() const;

 private:
  std::vector<std::pair<std::string, LossMetrics::Reduction>> names_;
  std::vector<at::Tensor> values_;
};

}  // namespace ooze::algorithms
