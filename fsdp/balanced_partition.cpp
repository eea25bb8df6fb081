#include "fsdp/balanced_partition.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <queue>
#include <string>
#include <utility>

#include "core/error.h"

namespace ooze::fsdp {
namespace {

constexpr int64_t kPaddingItem = -1;  // zero-weight filler that evens out equal_counts groups

struct Part {
  int64_t sum = 0;
  std::vector<int64_t> items;
};

// k parts, kept heaviest first.
using PartialSolution = std::vector<Part>;

void sort_heaviest_first(PartialSolution& parts) {
  // On equal sums the part with more items goes first, so that combining pairs it with a part
  // holding fewer: item counts stay even too.
  std::stable_sort(parts.begin(), parts.end(), [](const Part& a, const Part& b) {
    if (a.sum != b.sum) return a.sum > b.sum;
    return a.items.size() > b.items.size();
  });
}

int64_t spread(const PartialSolution& parts) { return parts.front().sum - parts.back().sum; }

// Heaviest part of `a` with the lightest of `b`, and so on down.
PartialSolution combine(PartialSolution a, PartialSolution b) {
  const size_t k = a.size();
  for (size_t j = 0; j < k; ++j) {
    Part& target = a[j];
    Part& source = b[k - 1 - j];
    target.sum += source.sum;
    // Append the shorter list to the longer so that each index is copied O(log n) times overall.
    if (target.items.size() < source.items.size()) std::swap(target.items, source.items);
    target.items.insert(target.items.end(), source.items.begin(), source.items.end());
  }
  sort_heaviest_first(a);
  return a;
}

// Swaps an item of the heaviest part with a lighter item of another part, choosing the swap that
// evens the two best, provided it lowers the heaviest part; false when no swap does. Swapping
// weights a > b with a - b < (heavier sum - lighter sum) strictly lowers the sum of squared part
// sums, so repeating this terminates. Item counts do not change.
bool improve_by_one_swap(std::vector<Part>& parts, const std::vector<int64_t>& weights) {
  size_t heaviest = 0;
  for (size_t p = 1; p < parts.size(); ++p) {
    if (parts[p].sum > parts[heaviest].sum) heaviest = p;
  }
  std::vector<size_t> lighter;
  for (size_t p = 0; p < parts.size(); ++p) {
    if (parts[p].sum < parts[heaviest].sum) lighter.push_back(p);
  }
  std::stable_sort(lighter.begin(), lighter.end(),
                   [&](size_t a, size_t b) { return parts[a].sum < parts[b].sum; });
  const std::vector<int64_t>& heavy_items = parts[heaviest].items;
  for (size_t other : lighter) {
    const int64_t gap = parts[heaviest].sum - parts[other].sum;
    // (weight, position) of the lighter part's items, sorted, to find for each heavy item a the
    // light item b closest to a - gap / 2.
    std::vector<std::pair<int64_t, size_t>> light;
    for (size_t j = 0; j < parts[other].items.size(); ++j) {
      light.emplace_back(weights[parts[other].items[j]], j);
    }
    std::sort(light.begin(), light.end());
    int64_t best_error = gap;  // |2 (a - b) - gap| < gap  <=>  0 < a - b < gap
    size_t best_heavy = 0, best_light = 0;
    for (size_t i = 0; i < heavy_items.size() && !light.empty(); ++i) {
      const int64_t a = weights[heavy_items[i]];
      auto above =
          std::lower_bound(light.begin(), light.end(), std::make_pair(a - gap / 2, size_t{0}));
      for (auto candidate : {above - (above == light.begin() ? 0 : 1), above}) {
        if (candidate == light.end()) continue;
        const int64_t error = std::abs(2 * (a - candidate->first) - gap);
        if (error < best_error) {
          best_error = error;
          best_heavy = i;
          best_light = candidate->second;
        }
      }
    }
    if (best_error < gap) {
      int64_t& from = parts[heaviest].items[best_heavy];
      int64_t& to = parts[other].items[best_light];
      const int64_t delta = weights[from] - weights[to];
      std::swap(from, to);
      parts[heaviest].sum -= delta;
      parts[other].sum += delta;
      return true;
    }
  }
  return false;
}

}  // namespace

std::vector<std::vector<int64_t>> karmarkar_karp_partition(const std::vector<int64_t>& weights,
                                                           int64_t num_parts, bool equal_counts) {
  if (num_parts < 1) {
    throw Error("karmarkar_karp_partition: num_parts = " + std::to_string(num_parts) +
                " must be at least 1");
  }
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] < 0) {
      throw Error("karmarkar_karp_partition: weight of item " + std::to_string(i) + " is " +
                  std::to_string(weights[i]) + "; weights (sequence lengths) must be >= 0");
    }
  }
  const size_t k = static_cast<size_t>(num_parts);
  if (weights.empty()) return std::vector<std::vector<int64_t>>(k);

  // Items in increasing weight (ties by index, for determinism).
  std::vector<int64_t> order(weights.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return weights[a] < weights[b]; });

  std::vector<PartialSolution> solutions;
  if (equal_counts) {
    // Pad to a multiple of k with zero-weight fillers; as the lightest items they share the
    // first group, so no part gets more than one of them.
    std::vector<int64_t> padded(order.size() % k == 0 ? 0 : k - order.size() % k, kPaddingItem);
    padded.insert(padded.end(), order.begin(), order.end());
    for (size_t start = 0; start < padded.size(); start += k) {
      PartialSolution parts(k);
      for (size_t j = 0; j < k; ++j) {
        const int64_t item = padded[start + j];
        parts[j].sum = item == kPaddingItem ? 0 : weights[item];
        parts[j].items.push_back(item);
      }
      sort_heaviest_first(parts);
      solutions.push_back(std::move(parts));
    }
  } else {
    for (int64_t item : order) {
      PartialSolution parts(k);
      parts[0].sum = weights[item];
      parts[0].items.push_back(item);
      solutions.push_back(std::move(parts));
    }
  }

  // Max-heap on (spread, -id): the largest spread first, the oldest solution on ties.
  using Entry = std::pair<int64_t, int64_t>;
  std::priority_queue<Entry> heap;
  for (size_t id = 0; id < solutions.size(); ++id) {
    heap.emplace(spread(solutions[id]), -static_cast<int64_t>(id));
  }
  while (heap.size() > 1) {
    const int64_t first = -heap.top().second;
    heap.pop();
    const int64_t second = -heap.top().second;
    heap.pop();
    solutions.push_back(combine(std::move(solutions[first]), std::move(solutions[second])));
    heap.emplace(spread(solutions.back()), -static_cast<int64_t>(solutions.size() - 1));
  }

  PartialSolution& result = solutions[-heap.top().second];
  for (Part& part : result) {
    part.items.erase(std::remove(part.items.begin(), part.items.end(), kPaddingItem),
                     part.items.end());
  }
  // Differencing leaves some imbalance when the spreads it combines cannot cancel the largest
  // ones (notably with equal_counts on long-tailed weights, where groups of adjacent items have
  // little spread); pairwise swaps remove most of it. Bounded so the cost stays O(n) swaps.
  const size_t max_swaps = 4 * weights.size() + 16;
  for (size_t swaps = 0; swaps < max_swaps && improve_by_one_swap(result, weights); ++swaps) {
  }
  sort_heaviest_first(result);
  std::vector<std::vector<int64_t>> parts;
  parts.reserve(k);
  for (Part& part : result) {
    std::sort(part.items.begin(), part.items.end());
    parts.push_back(std::move(part.items));
  }
  return parts;
}

}  // namespace ooze::fsdp
