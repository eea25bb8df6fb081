#include "models/ring_attention.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "core/error.h"
#include "models/causal_attention.h"

namespace ooze::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Point-to-point tags: K/V blocks and their gradient accumulators travel side by side.
constexpr uint32_t kKeyValueTag = 0;
constexpr uint32_t kGradientTag = 1;

// What the backward needs besides tensors; travels in a capsule (saved_data holds IValues).
struct AttentionState : torch::CustomClassHolder {
  std::shared_ptr<comm::Communicator> group;
  std::vector<int64_t> local_offsets;
  double scale = 1;
  ContextParallelImpl impl = ContextParallelImpl::kRing;
};

// Where queries of rank `query_rank` meet keys of rank `key_rank` within one sequence whose
// local share starts at `begin` and has two chunks of `chunk` tokens. Rank r holds chunks r and
// 2C-1-r, so: the same rank is plain causal on local order; for an earlier key rank, both query
// chunks see its first chunk entirely and its second not at all; for a later key rank, only the
// second query chunk sees anything, and it sees both key chunks entirely.
struct BlockPart {
  int64_t query_begin, query_count, key_begin, key_count;
  bool causal;
};
BlockPart block_part(int64_t begin, int64_t chunk, int query_rank, int key_rank) {
  if (key_rank == query_rank) return {begin, 2 * chunk, begin, 2 * chunk, true};
  if (key_rank < query_rank) return {begin, 2 * chunk, begin, chunk, false};
  return {begin + chunk, chunk, begin, 2 * chunk, false};
}

// [n, heads, d] -> [kv_heads, group * n, d]: query head h = kv_head * group + g reads kv_head.
at::Tensor heads_to_groups(const at::Tensor& x, int64_t kv_heads) {
  const int64_t n = x.size(0), heads = x.size(1), d = x.size(2), group = heads / kv_heads;
  return x.reshape({n, kv_heads, group, d}).permute({1, 2, 0, 3}).reshape({kv_heads, group * n, d});
}
// The inverse: [kv_heads, group * n, d] -> [n, heads, d].
at::Tensor groups_to_heads(const at::Tensor& x, int64_t n) {
  const int64_t kv_heads = x.size(0), d = x.size(2), group = x.size(1) / n;
  return x.view({kv_heads, group, n, d}).permute({2, 0, 1, 3}).reshape({n, kv_heads * group, d});
}
// Per-query statistics [n, heads] <-> [kv_heads, group * n].
at::Tensor stats_to_groups(const at::Tensor& x, int64_t kv_heads) {
  const int64_t n = x.size(0), heads = x.size(1), group = heads / kv_heads;
  return x.reshape({n, kv_heads, group}).permute({1, 2, 0}).reshape({kv_heads, group * n});
}
at::Tensor stats_to_heads(const at::Tensor& x, int64_t n) {
  const int64_t kv_heads = x.size(0), group = x.size(1) / n;
  return x.view({kv_heads, group, n}).permute({2, 0, 1}).reshape({n, kv_heads * group});
}

// Scores [kv_heads, group * n, num_keys] of grouped queries against keys [num_keys, kvh, d].
// With `causal`, query j (0-based in this block) is at key position first_query + j and keys
// after it are masked out.
at::Tensor block_scores(const at::Tensor& queries, const at::Tensor& keys, int64_t n, bool causal,
                        int64_t first_query, double scale) {
  const int64_t kv_heads = keys.size(1), num_keys = keys.size(0);
  at::Tensor scores = at::bmm(queries, keys.permute({1, 2, 0})) * scale;
  if (causal) {
    const auto options = at::TensorOptions().dtype(at::kLong).device(keys.device());
    const at::Tensor future = at::arange(num_keys, options).unsqueeze(0) >
                              at::arange(first_query, first_query + n, options).unsqueeze(1);
    scores = scores.view({kv_heads, -1, n, num_keys})
                 .masked_fill(future, -std::numeric_limits<float>::infinity())
                 .view({kv_heads, -1, num_keys});
  }
  return scores;
}

// Row blocks of at most kMaxScoreElements scores: calls body(start, count, num_keys).
template <class Body>
void for_query_blocks(int64_t num_queries, int64_t num_keys, int64_t heads, bool causal,
                      const Body& body) {
  const int64_t block =
      std::max<int64_t>(1, kMaxScoreElements / (heads * std::max<int64_t>(num_keys, 1)));
  for (int64_t start = 0; start < num_queries; start += block) {
    const int64_t count = std::min(block, num_queries - start);
    body(start, count, causal ? std::min(num_keys, start + count) : num_keys);
  }
}

// Attends q [Lq, heads, d] to k, v [Lk, kvh, d] (all fp32) and merges the result into the
// running output `out` [Lq, heads, d] and log-sum-exp `lse` [Lq, heads] (views, updated in
// place; lse starts at -inf, out at 0).
void attend_and_merge(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                      double scale, const at::Tensor& out, const at::Tensor& lse) {
  const int64_t kv_heads = k.size(1);
  for_query_blocks(
      q.size(0), k.size(0), q.size(1), causal, [&](int64_t start, int64_t n, int64_t num_keys) {
        const at::Tensor queries = heads_to_groups(q.narrow(0, start, n), kv_heads);
        const at::Tensor keys = k.narrow(0, 0, num_keys);
        const at::Tensor scores = block_scores(queries, keys, n, causal, start, scale);
        const at::Tensor block_lse = at::logsumexp(scores, -1);  // [kvh, g * n]
        const at::Tensor probs = (scores - block_lse.unsqueeze(-1)).exp_();
        const at::Tensor block_out =
            groups_to_heads(at::bmm(probs, v.narrow(0, 0, num_keys).permute({1, 0, 2})), n);
        const at::Tensor new_lse = stats_to_heads(block_lse, n);
        at::Tensor running_out = out.narrow(0, start, n);
        at::Tensor running_lse = lse.narrow(0, start, n);
        const at::Tensor merged_lse = at::logaddexp(running_lse, new_lse);
        running_out.mul_((running_lse - merged_lse).exp_().unsqueeze(-1))
            .add_(block_out * (new_lse - merged_lse).exp_().unsqueeze(-1));
        running_lse.copy_(merged_lse);
      });
}

// The gradients of one attend_and_merge given the final output's log-sum-exp `lse` and
// delta = rowsum(dout * out) [Lq, heads]: adds into dq [Lq, heads, d] and dk, dv [Lk, kvh, d].
void attend_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& dout, const at::Tensor& lse, const at::Tensor& delta,
                     bool causal, double scale, const at::Tensor& dq, const at::Tensor& dk,
                     const at::Tensor& dv) {
  const int64_t kv_heads = k.size(1);
  for_query_blocks(
      q.size(0), k.size(0), q.size(1), causal, [&](int64_t start, int64_t n, int64_t num_keys) {
        const at::Tensor queries = heads_to_groups(q.narrow(0, start, n), kv_heads);
        const at::Tensor keys = k.narrow(0, 0, num_keys);
        const at::Tensor values = v.narrow(0, 0, num_keys);
        const at::Tensor grad_out = heads_to_groups(dout.narrow(0, start, n), kv_heads);
        const at::Tensor scores = block_scores(queries, keys, n, causal, start, scale);
        const at::Tensor probs =
            (scores - stats_to_groups(lse.narrow(0, start, n), kv_heads).unsqueeze(-1)).exp_();
        // dV = P^T dO; dP = dO V^T; dS = P (dP - delta); dQ = scale dS K; dK = scale dS^T Q.
        dv.narrow(0, 0, num_keys).add_(at::bmm(probs.transpose(1, 2), grad_out).permute({1, 0, 2}));
        const at::Tensor grad_probs = at::bmm(grad_out, values.permute({1, 2, 0}));
        const at::Tensor grad_scores =
            probs
                .mul_(grad_probs -
                      stats_to_groups(delta.narrow(0, start, n), kv_heads).unsqueeze(-1))
                .mul_(scale);
        dq.narrow(0, start, n)
            .add_(groups_to_heads(at::bmm(grad_scores, keys.permute({1, 0, 2})), n));
        dk.narrow(0, 0, num_keys)
            .add_(at::bmm(grad_scores.transpose(1, 2), queries).permute({1, 0, 2}));
      });
}

// The local queries (of `query_rank`) against the key/value block kv [2, T_local, kvh, d] of
// `key_rank`, sequence by sequence.
void forward_against(const AttentionState& state, int query_rank, int key_rank, const at::Tensor& q,
                     const at::Tensor& kv, const at::Tensor& out, const at::Tensor& lse) {
  const std::vector<int64_t>& offsets = state.local_offsets;
  for (size_t s = 0; s + 1 < offsets.size(); ++s) {
    const int64_t chunk = (offsets[s + 1] - offsets[s]) / 2;
    if (chunk == 0) continue;
    const BlockPart p = block_part(offsets[s], chunk, query_rank, key_rank);
    attend_and_merge(
        q.narrow(0, p.query_begin, p.query_count), kv[0].narrow(0, p.key_begin, p.key_count),
        kv[1].narrow(0, p.key_begin, p.key_count), p.causal, state.scale,
        out.narrow(0, p.query_begin, p.query_count), lse.narrow(0, p.query_begin, p.query_count));
  }
}

// Gradients of forward_against: adds into dq [T_local, heads, d] and dkv [2, T_local, kvh, d].
void backward_against(const AttentionState& state, int query_rank, int key_rank,
                      const at::Tensor& q, const at::Tensor& kv, const at::Tensor& dout,
                      const at::Tensor& lse, const at::Tensor& delta, const at::Tensor& dq,
                      const at::Tensor& dkv) {
  const std::vector<int64_t>& offsets = state.local_offsets;
  for (size_t s = 0; s + 1 < offsets.size(); ++s) {
    const int64_t chunk = (offsets[s + 1] - offsets[s]) / 2;
    if (chunk == 0) continue;
    const BlockPart p = block_part(offsets[s], chunk, query_rank, key_rank);
    auto queries = [&](const at::Tensor& x) { return x.narrow(0, p.query_begin, p.query_count); };
    auto keys = [&](const at::Tensor& x) { return x.narrow(0, p.key_begin, p.key_count); };
    attend_backward(queries(q), keys(kv[0]), keys(kv[1]), queries(dout), queries(lse),
                    queries(delta), p.causal, state.scale, queries(dq), keys(dkv[0]), keys(dkv[1]));
  }
}

int next_rank(const comm::Communicator& g) { return (g.rank() + 1) % g.size(); }
int previous_rank(const comm::Communicator& g) { return (g.rank() + g.size() - 1) % g.size(); }

// Runs the ring: at step s this rank holds the K/V block of rank - s and calls
// body(key_rank, kv) while the block of rank - s - 1 is on its way.
template <class Body>
void ring_over_blocks(comm::Communicator& group, at::Tensor kv, const Body& body) {
  const int size = group.size(), rank = group.rank();
  for (int step = 0; step < size; ++step) {
    comm::WorkPtr send, receive;
    at::Tensor incoming;
    if (step + 1 < size) {
      incoming = at::empty_like(kv);
      send = group.send_async(kv, next_rank(group), kKeyValueTag);
      receive = group.recv_async(incoming, previous_rank(group), kKeyValueTag);
    }
    body((rank - step + size) % size, kv);
    if (step + 1 < size) {
      receive->wait();
      send->wait();
      kv = std::move(incoming);
    }
  }
}

std::pair<at::Tensor, at::Tensor> ring_forward(const AttentionState& state, const at::Tensor& q,
                                               const at::Tensor& kv) {
  comm::Communicator& group = *state.group;
  at::Tensor out = at::zeros(q.sizes(), q.options());
  at::Tensor lse =
      at::full({q.size(0), q.size(1)}, -std::numeric_limits<float>::infinity(), q.options());
  ring_over_blocks(group, kv, [&](int key_rank, const at::Tensor& block) {
    forward_against(state, group.rank(), key_rank, q, block.to(at::kFloat), out, lse);
  });
  return {out, lse};
}

// Backward of the ring: the K/V blocks go around again; the gradient accumulator of each block
// follows it one step behind (it leaves once this rank's share is added), so after a full turn
// every rank receives the complete gradient of its own block.
std::pair<at::Tensor, at::Tensor> ring_backward(const AttentionState& state, const at::Tensor& q,
                                                const at::Tensor& kv, const at::Tensor& dout,
                                                const at::Tensor& lse, const at::Tensor& delta) {
  comm::Communicator& group = *state.group;
  const int size = group.size();
  at::Tensor dq = at::zeros(q.sizes(), q.options());
  at::Tensor arriving;  // the accumulator of the block this rank is about to work on
  comm::WorkPtr arrival;
  std::vector<comm::WorkPtr> sends;
  at::Tensor own;
  ring_over_blocks(group, kv, [&](int key_rank, const at::Tensor& block) {
    at::Tensor dkv = at::zeros(block.sizes(), q.options());
    backward_against(state, group.rank(), key_rank, q, block.to(at::kFloat), dout, lse, delta, dq,
                     dkv);
    if (size == 1) {
      own = dkv;
      return;
    }
    if (arrival) {
      arrival->wait();
      dkv.add_(arriving);
    }
    sends.push_back(group.send_async(dkv, next_rank(group), kGradientTag));
    arriving = at::empty_like(dkv);
    arrival = group.recv_async(arriving, previous_rank(group), kGradientTag);
  });
  if (size > 1) {
    arrival->wait();
    own = arriving;
    for (const comm::WorkPtr& send : sends) send->wait();
  }
  return {dq, own};
}

// The all-gather variant: every rank's K/V blocks at once [C, 2, T_local, kvh, d].
at::Tensor gather_blocks(comm::Communicator& group, const at::Tensor& kv) {
  std::vector<int64_t> shape{group.size()};
  shape.insert(shape.end(), kv.sizes().begin(), kv.sizes().end());
  at::Tensor gathered = at::empty(shape, kv.options());
  group.all_gather(gathered.view({-1}), kv.view({-1}));
  return gathered;
}

std::pair<at::Tensor, at::Tensor> all_gather_forward(const AttentionState& state,
                                                     const at::Tensor& q, const at::Tensor& kv) {
  comm::Communicator& group = *state.group;
  const at::Tensor gathered = gather_blocks(group, kv).to(at::kFloat);
  at::Tensor out = at::zeros(q.sizes(), q.options());
  at::Tensor lse =
      at::full({q.size(0), q.size(1)}, -std::numeric_limits<float>::infinity(), q.options());
  for (int step = 0; step < group.size(); ++step) {
    const int key_rank = (group.rank() + step) % group.size();
    forward_against(state, group.rank(), key_rank, q, gathered[key_rank], out, lse);
  }
  return {out, lse};
}

std::pair<at::Tensor, at::Tensor> all_gather_backward(const AttentionState& state,
                                                      const at::Tensor& q, const at::Tensor& kv,
                                                      const at::Tensor& dout, const at::Tensor& lse,
                                                      const at::Tensor& delta) {
  comm::Communicator& group = *state.group;
  // Gathered again rather than kept from forward: C times the K/V memory only for a moment.
  const at::Tensor gathered = gather_blocks(group, kv).to(at::kFloat);
  at::Tensor dq = at::zeros(q.sizes(), q.options());
  at::Tensor dkv_all = at::zeros(gathered.sizes(), q.options());
  for (int key_rank = 0; key_rank < group.size(); ++key_rank) {
    backward_against(state, group.rank(), key_rank, q, gathered[key_rank], dout, lse, delta, dq,
                     dkv_all[key_rank]);
  }
  at::Tensor own = at::empty(kv.sizes(), q.options());
  // Flat views: the collectives see element counts, not shapes.
  group.reduce_scatter(own.view({-1}), dkv_all.view({-1}), comm::ReduceOp::SUM);
  return {dq, own};
}

// Inputs in autograd order: q, k, v, then the state (not a variable).
class ContextParallelAttentionFunction
    : public torch::autograd::Function<ContextParallelAttentionFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const c10::intrusive_ptr<AttentionState>& state) {
    const at::Tensor kv = at::stack({k, v}).contiguous();
    const at::Tensor query = q.to(at::kFloat).contiguous();
    auto [out, lse] = state->impl == ContextParallelImpl::kRing
                          ? ring_forward(*state, query, kv)
                          : all_gather_forward(*state, query, kv);
    const at::Tensor result = out.to(q.scalar_type());
    ctx->saved_data["state"] = at::IValue::make_capsule(state);
    ctx->save_for_backward({q, k, v, out, lse});
    return result;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const auto state =
        c10::static_intrusive_pointer_cast<AttentionState>(ctx->saved_data["state"].toCapsule());
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const at::Tensor kv = at::stack({k, v}).contiguous();
    const at::Tensor query = q.to(at::kFloat).contiguous();
    const at::Tensor dout = grad_outputs[0].to(at::kFloat).contiguous();
    const at::Tensor delta = (dout * out).sum(-1);
    // Every rank runs the same communication whatever gradients its caller asked for.
    auto [dq, dkv] = state->impl == ContextParallelImpl::kRing
                         ? ring_backward(*state, query, kv, dout, lse, delta)
                         : all_gather_backward(*state, query, kv, dout, lse, delta);
    return {dq.to(q.scalar_type()), dkv[0].to(k.scalar_type()), dkv[1].to(v.scalar_type()),
            at::Tensor()};
  }
};

void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const ContextParallelSplit& split, const comm::Communicator& group) {
  auto describe = [](const at::Tensor& t) {
    return t.defined() ? c10::str(t.sizes()) : std::string("undefined");
  };
  if (!q.defined() || !k.defined() || !v.defined() || q.dim() != 3 || k.dim() != 3 ||
      k.sizes() != v.sizes() || q.size(0) != k.size(0) || q.size(2) != k.size(2) ||
      k.size(1) == 0 || q.size(1) % k.size(1) != 0) {
    throw Error(
        "context parallel attention: expected q [T, heads, head_dim] and k, v [T, "
        "kv_heads, head_dim] with heads a multiple of kv_heads, got q " +
        describe(q) + ", k " + describe(k) + ", v " + describe(v));
  }
  if (!at::isFloatingType(q.scalar_type()) || k.scalar_type() != q.scalar_type() ||
      v.scalar_type() != q.scalar_type()) {
    throw Error(std::string("context parallel attention: q, k and v must share one floating "
                            "dtype, got ") +
                c10::toString(q.scalar_type()) + ", " + c10::toString(k.scalar_type()) + ", " +
                c10::toString(v.scalar_type()));
  }
  if (split.cp_size != group.size() || split.cp_rank != group.rank()) {
    throw Error("context parallel attention: the split was made for rank " +
                std::to_string(split.cp_rank) + " of " + std::to_string(split.cp_size) +
                " but group '" + group.name() + "' has this process as rank " +
                std::to_string(group.rank()) + " of " + std::to_string(group.size()) +
                "; split with the CP group's rank and size");
  }
  if (q.size(0) != split.num_local_tokens()) {
    throw Error("context parallel attention: q has " + std::to_string(q.size(0)) +
                " tokens but the split gives this rank " +
                std::to_string(split.num_local_tokens()) +
                "; pass the local tokens (ContextParallelSplit::shard)");
  }
}

}  // namespace

const char* context_parallel_impl_name(ContextParallelImpl impl) {
  return impl == ContextParallelImpl::kRing ? "ring" : "allgather";
}

at::Tensor context_parallel_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const ContextParallelSplit& split,
                                      std::shared_ptr<comm::Communicator> group, double scale,
                                      ContextParallelImpl impl) {
  if (!group) throw Error("context parallel attention: the CP group is null");
  check_inputs(q, k, v, split, *group);
  // Every rank has the same local layout, so all of them skip an empty micro-batch alike.
  if (q.size(0) == 0) return q.mul(0);
  auto state = c10::make_intrusive<AttentionState>();
  state->group = std::move(group);
  state->local_offsets = split.local_offsets;
  state->scale = scale;
  state->impl = impl;
  return ContextParallelAttentionFunction::apply(q, k, v, state);
}

}  // namespace ooze::models
