#include "algorithms/loss_metrics.h"

#include <algorithm>

#include "core/error.h"

namespace ooze::algorithms {
namespace {

const char* reduction_name(LossMetrics::Reduction reduction) {
  switch (reduction) {
    case LossMetrics::Reduction::kSum:
      return "sum";
    case LossMetrics::Reduction::kMax:
      return "max";
    case LossMetrics::Reduction::kMin:
      return "min";
  }
  return "?";
}

}  // namespace

void LossMetrics::add(const std::string& name, double value, Reduction reduction) {
  auto found = entries_.find(name);
  if (found == entries_.end()) {
    entries_[name] = Entry{value, reduction};
    return;
  }
  Entry& entry = found->second;
  if (entry.reduction != reduction) {
    throw Error("LossMetrics: metric '" + name + "' is combined by " +
                reduction_name(entry.reduction) + " but was added with " +
                reduction_name(reduction) + "; a metric keeps one reduction");
  }
  switch (reduction) {
    case Reduction::kSum:
      entry.value += value;
      break;
    case Reduction::kMax:
      entry.value = std::max(entry.value, value);
      break;
    case Reduction::kMin:
      entry.value = std::min(entry.value, value);
      break;
  }
}

void LossMetrics::merge(const LossMetrics& other) {
  for (const auto& [name, entry] : other.entries_) add(name, entry.value, entry.reduction);
}

double LossMetrics::get(const std::string& name) const {
  auto found = entries_.find(name);
  if (found != entries_.end()) return found->second.value;
  std::string names;
  for (const auto& [known, entry] : entries_) names += (names.empty() ? "" : ", ") + known;
  throw Error("LossMetrics: no metric '" + name +
              "'; there are: " + (names.empty() ? "none" : names));
}

std::map<std::string, double> LossMetrics::to_map() const {
  std::map<std::string, double> out;
  for (const auto& [name, entry] : entries_) out[name] = entry.value;
  return out;
}

void PendingMetrics::add(const std::string& name, const at::Tensor& scalar,
                         LossMetrics::Reduction reduction) {
  names_.emplace_back(name, reduction);
  values_.push_back(scalar.detach().reshape({}).to(at::kDouble));
}

LossMetrics PendingMetrics::resolve() const {
  LossMetrics metrics;
  if (values_.empty()) return metrics;
  at::Tensor host = at::stack(values_).to(at::kCPU).contiguous();
  const double* data = host.data_ptr<double>();
  for (size_t i = 0; i < names_.size(); ++i) {
    metrics.add(names_[i].first, data[i], names_[i].second);
  }
  return metrics;
}

}  // namespace ooze::algorithms
