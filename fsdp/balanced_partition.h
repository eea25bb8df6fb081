// Balanced k-way partitioning of weighted items (sequence lengths) by the Karmarkar–Karp largest
// differencing method. Used to spread a rollout batch over data-parallel ranks and a rank's share
// over micro-batches so that every part carries about the same number of tokens.
#pragma once

#include <cstdint>
#include <vector>

namespace ooze::fsdp {

// Splits items 0 .. weights.size()-1 into `num_parts` parts with nearly equal weight sums.
//
// The largest differencing method (Karmarkar & Karp 1982, k-way form): every item starts as a
// partial solution of k parts, one holding the item and the others empty. The spread of a partial
// solution is its heaviest part minus its lightest. Repeatedly take the two partial solutions with
// the largest spreads and combine them part by part, the heaviest part of one with the lightest of
// the other, the second heaviest with the second lightest, and so on. Large differences cancel
// early while small items are left to even out the rest; the last partial solution is the answer.
// Its heaviest part is at most (4/3 - 1/(3k)) times the optimum (Michiels et al. 2003). A local
// search then swaps single items between the heaviest part and a lighter one while that lowers the
// heaviest part (it never makes things worse and keeps item counts). O(n log n + n k log k) for
// the differencing, at most 4n + 16 swaps of O(n log n) each after it.
//
// equal_counts: each initial partial solution is instead a group of k items of adjacent weight,
// one per part, so combining keeps the counts equal: every part gets exactly n/k items when k
// divides n, otherwise floor(n/k) or ceil(n/k).
//
// Returns `num_parts` parts, heaviest first, each listing item indices in increasing order. Parts
// are empty when there are fewer items than parts. Deterministic. Throws ooze::Error when
// num_parts < 1 or a weight is negative.
std::vector<std::vector<int64_t>> karmarkar_karp_partition(const std::vector<int64_t>& weights,
                                                           int64_t num_parts, bool equal_counts);

}  // namespace ooze::fsdp
