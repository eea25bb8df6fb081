#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "core/checksum.h"
#include "core/error.h"
#include "models/log_softmax.h"

namespace ooze::engine {
namespace {

std::string shape_text(const at::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

void check_arguments(const at::Tensor& logits, const std::vector<SamplingRow>& rows) {
  const std::string where = "sample_tokens: ";
  if (!logits.defined() || logits.dim() != 2) {
    throw Error(where + "logits must be a 2-D tensor [rows, vocab], got " +
                (logits.defined() ? shape_text(logits) : std::string("an undefined tensor")));
  }
  if (!at::isFloatingType(logits.scalar_type())) {
    throw Error(where + "logits must be floating point, got " +
                std::string(c10::toString(logits.scalar_type())));
  }
  if (static_cast<int64_t>(rows.size()) != logits.size(0)) {
    throw Error(where + "got " + std::to_string(rows.size()) + " sampling rows for logits " +
                shape_text(logits) + "; pass one SamplingRow per logits row");
  }
  if (logits.size(0) > 0 && logits.size(1) == 0) {
    throw Error(where + "logits have an empty vocabulary dimension " + shape_text(logits));
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const SamplingRow& row = rows[i];
    const std::string at_row = where + "row " + std::to_string(i) + ": ";
    if (!(row.temperature >= 0.0) || !std::isfinite(row.temperature)) {
      throw Error(at_row + "temperature must be finite and >= 0 (0 samples greedily), got " +
                  std::to_string(row.temperature));
    }
    if (!(row.top_p > 0.0 && row.top_p <= 1.0)) {
      throw Error(at_row + "top_p must lie in (0, 1], got " + std::to_string(row.top_p));
    }
    if (!(row.min_p >= 0.0 && row.min_p <= 1.0)) {
      throw Error(at_row + "min_p must lie in [0, 1], got " + std::to_string(row.min_p));
    }
    if (row.top_k < -1) {
      throw Error(at_row + "top_k must be -1 or 0 (off) or positive, got " +
                  std::to_string(row.top_k));
    }
    if (row.top_logprobs_num < 0) {
      throw Error(at_row + "top_logprobs_num must be >= 0, got " +
                  std::to_string(row.top_logprobs_num));
    }
  }
}

at::Tensor long_tensor(const std::vector<int64_t>& values, const at::Device& device) {
  return torch::tensor(values, torch::dtype(at::kLong)).to(device);
}

// [n, 1] column of per-row parameters, on the logits' device.
at::Tensor column(const std::vector<double>& values, at::ScalarType dtype,
                  const at::Device& device) {
  return torch::tensor(values, torch::dtype(at::kDouble))
      .to(dtype)
      .view({static_cast<int64_t>(values.size()), 1})
      .to(device);
}
at::Tensor column(const std::vector<int64_t>& values, const at::Device& device) {
  return long_tensor(values, device).view({static_cast<int64_t>(values.size()), 1});
}

// int64 keys, unique within a row, whose descending order is value descending then token id
// ascending. A float sort or topk leaves the order of equal values unspecified, and bf16 logits
// tie often; these keys make the order (and so the sampled token) exact on every device.
// values: [n, width] fp32 with no NaN.
at::Tensor descending_order_keys(const at::Tensor& values) {
  // Adding +0 turns -0 into +0, so the two zeros tie as they compare.
  at::Tensor bits = (values + 0.0).contiguous().view(at::kInt).to(at::kLong);
  // Negative floats order backwards as integers: flip their magnitude bits.
  bits = at::where(bits < 0, bits.bitwise_xor(0x7FFFFFFF), bits);
  const int64_t width = values.size(1);
  at::Tensor reversed_ids =
      at::arange(width, values.options().dtype(at::kLong)).neg_().add_((int64_t{1} << 32) - 1);
  return bits.mul_(int64_t{1} << 32).add_(reversed_ids);
}

// The token ids of each row's `width` largest values, in descending order (ties: lowest id).
at::Tensor top_ids(const at::Tensor& values, int64_t width) {
  at::Tensor keys = descending_order_keys(values);
  if (width >= values.size(1)) {
    return std::get<1>(keys.sort(/*dim=*/1, /*descending=*/true));
  }
  return std::get<1>(keys.topk(width, /*dim=*/1, /*largest=*/true, /*sorted=*/true));
}

// Rows (indices into `rows`) whose sampling runs together, and how many sorted candidates each
// needs: the whole vocabulary, or the largest top_k among them.
struct SamplingGroup {
  std::vector<int64_t> members;
  int64_t width = 0;
};

// Draws one token for each row of `probs` ([n, V] fp32, the tempered distribution over the whole
// vocabulary) from its top-k / top-p / min-p filtered, renormalised distribution by inverse CDF.
// Returns the token ids [n]. Every step is row-wise, so a row's token does not depend on the
// other rows, nor on `width` as long as it covers the row's top_k.
at::Tensor draw_from_filtered(const at::Tensor& probs, const std::vector<SamplingRow>& rows,
                              const std::vector<int64_t>& members, int64_t width) {
  const at::Device device = probs.device();
  const int64_t vocab = probs.size(1);
  const int64_t n = static_cast<int64_t>(members.size());
  std::vector<int64_t> top_k(n);
  std::vector<double> top_p(n), min_p(n), uniform(n);
  for (int64_t i = 0; i < n; ++i) {
    const SamplingRow& row = rows[members[i]];
    top_k[i] = row.top_k > 0 ? std::min(row.top_k, vocab) : vocab;
    top_p[i] = row.top_p;
    min_p[i] = row.min_p;
    uniform[i] = counter_uniform(row.seed, row.draw_index);
  }
  const at::Tensor k_col = column(top_k, device);
  const at::Tensor top_p_col = column(top_p, at::kDouble, device);
  const at::Tensor min_p_col = column(min_p, at::kFloat, device);
  const at::Tensor uniform_col = column(uniform, at::kDouble, device);

  const at::Tensor order = top_ids(probs, width);  // [n, width]
  const at::Tensor sorted = probs.gather(1, order);
  // The cumulative mass in double: its rounding then never decides a token in practice, whatever
  // scan the device uses for this batch shape.
  const at::Tensor sorted_double = sorted.to(at::kDouble);
  const at::Tensor cumulative = sorted_double.cumsum(1);
  const at::Tensor rank = at::arange(width, probs.options().dtype(at::kLong)).view({1, width});

  // top_p applies to the top-k distribution renormalised: keep a token while the mass before it
  // is below top_p of the top-k mass (which no token past the k-th has). top_p == 1 keeps all,
  // whatever the rounding.
  const at::Tensor mass_k = cumulative.gather(1, k_col - 1);
  const at::Tensor n_top_p =
      at::where(top_p_col >= 1.0, k_col,
                (cumulative - sorted_double < top_p_col * mass_k).sum(1, /*keepdim=*/true));
  // min_p compares with the most likely token, which renormalisation does not change.
  const at::Tensor n_min_p =
      (sorted >= min_p_col * sorted.narrow(1, 0, 1)).sum(1, /*keepdim=*/true);
  // Tokens of probability 0 (masked logits, underflow) are never drawn.
  const at::Tensor n_positive = (sorted > 0).sum(1, /*keepdim=*/true);
  // Every filter keeps a prefix of the sorted tokens; the shortest wins, and the top token stays.
  const at::Tensor n_keep =
      at::minimum(at::minimum(k_col, n_top_p), at::minimum(n_min_p, n_positive)).clamp_min(1);

  // Inverse CDF: the first kept token whose cumulative mass exceeds u times the kept mass; when
  // rounding leaves none, the last kept token.
  const at::Tensor kept_mass = cumulative.gather(1, n_keep - 1);
  const at::Tensor below = (cumulative <= uniform_col * kept_mass) & (rank < n_keep);
  const at::Tensor position = at::minimum(below.sum(1, /*keepdim=*/true), n_keep - 1);
  return order.gather(1, position).view({n});
}

// Draws one token for each row of `probs` ([n, V] fp32) from the whole distribution by inverse
// CDF in token-id order: without filters no sort is needed, which on a 150k vocabulary is most
// of the sampling time. Row-wise, like draw_from_filtered.
at::Tensor draw_unfiltered(const at::Tensor& probs, const std::vector<SamplingRow>& rows,
                           const std::vector<int64_t>& members) {
  std::vector<double> uniform;
  for (int64_t member : members) {
    uniform.push_back(counter_uniform(rows[member].seed, rows[member].draw_index));
  }
  const at::Tensor cumulative = probs.to(at::kDouble).cumsum(1);
  const int64_t vocab = probs.size(1);
  const at::Tensor total = cumulative.narrow(1, vocab - 1, 1);
  const at::Tensor below =
      cumulative <= column(uniform, at::kDouble, probs.device()) * total;  // [n, V]
  // Tokens of probability 0 never end a walk: the last token with mass caps the position.
  const at::Tensor last_positive =
      (vocab - 1) - (probs > 0).flip({1}).to(at::kByte).argmax(1, /*keepdim=*/true);
  return at::minimum(below.sum(1, /*keepdim=*/true), last_positive)
      .view({static_cast<int64_t>(members.size())});
}

}  // namespace

double counter_uniform(uint64_t seed, uint64_t draw_index) {
  // splitmix64's stream for this seed, read at draw_index. Mixing the seed first keeps streams
  // of nearby seeds from being shifted copies of each other.
  const uint64_t golden_gamma = 0x9E3779B97F4A7C15ULL;
  const uint64_t bits = mix64(mix64(seed) + (draw_index + 1) * golden_gamma);
  return static_cast<double>(bits >> 11) * 0x1.0p-53;  // top 53 bits: exact in a double
}

SampledTokens sample_tokens(const torch::Tensor& logits, const std::vector<SamplingRow>& rows) {
  check_arguments(logits, rows);
  torch::NoGradGuard no_grad;
  SampledTokens out;
  const int64_t n_rows = logits.size(0);
  if (n_rows == 0) return out;
  const int64_t vocab = logits.size(1);
  const at::Device device = logits.device();

  // Greedy rows keep T = 1 for their log-probs. The fp32 logits are divided by the fp32
  // temperature, as the trainer's log-prob computation divides them.
  const at::Tensor values = logits.to(at::kFloat).contiguous();
  std::vector<double> temperature(n_rows);
  bool all_untempered = true;
  std::vector<int64_t> greedy;
  for (int64_t i = 0; i < n_rows; ++i) {
    const double t = rows[i].temperature;
    temperature[i] = t > 0.0 ? t : 1.0;
    if (t == 0.0) greedy.push_back(i);
    if (temperature[i] != 1.0) all_untempered = false;
  }
  const at::Tensor tempered =
      all_untempered ? values : values / column(temperature, at::kFloat, device);
  const at::Tensor log_probs = models::log_softmax_fp64_sum(tempered);

  at::Tensor token_ids = at::empty({n_rows}, values.options().dtype(at::kLong));
  if (!greedy.empty()) {
    // argmax returns the first maximum: ties go to the lowest token id.
    const at::Tensor index = long_tensor(greedy, device);
    token_ids.index_put_({index}, values.index_select(0, index).argmax(1));
  }

  // Rows without filters walk the vocabulary in id order; rows with a small top_k need only
  // their top_k candidates (topk); the others sort the whole vocabulary.
  const int64_t partial_sort_limit = 1024;
  SamplingGroup unfiltered, partial, full;
  full.width = vocab;
  for (int64_t i = 0; i < n_rows; ++i) {
    const SamplingRow& row = rows[i];
    if (row.temperature == 0.0) continue;
    if ((row.top_k <= 0 || row.top_k >= vocab) && row.top_p >= 1.0 && row.min_p <= 0.0) {
      unfiltered.members.push_back(i);
    } else if (row.top_k > 0 && row.top_k < vocab && row.top_k <= partial_sort_limit) {
      partial.members.push_back(i);
      partial.width = std::max(partial.width, row.top_k);
    } else {
      full.members.push_back(i);
    }
  }
  for (const SamplingGroup* group : {&unfiltered, &partial, &full}) {
    if (group->members.empty()) continue;
    const bool whole_batch = static_cast<int64_t>(group->members.size()) == n_rows;
    const at::Tensor index = long_tensor(group->members, device);
    const at::Tensor group_log_probs = whole_batch ? log_probs : log_probs.index_select(0, index);
    const at::Tensor drawn =
        group == &unfiltered
            ? draw_unfiltered(group_log_probs.exp(), rows, group->members)
            : draw_from_filtered(group_log_probs.exp(), rows, group->members, group->width);
    if (whole_batch) {
      token_ids = drawn;
    } else {
      token_ids.index_put_({index}, drawn);
    }
  }
  const at::Tensor token_log_probs =
      log_probs.gather(1, token_ids.view({n_rows, 1})).view({n_rows});

  // The k most likely tokens under the same distribution, for the rows that ask.
  std::vector<int64_t> asking;
  int64_t top_width = 0;
  for (int64_t i = 0; i < n_rows; ++i) {
    if (rows[i].top_logprobs_num > 0) {
      asking.push_back(i);
      top_width = std::max(top_width, std::min(rows[i].top_logprobs_num, vocab));
    }
  }
  at::Tensor top_token_ids, top_values;
  if (!asking.empty()) {
    const at::Tensor asking_log_probs = log_probs.index_select(0, long_tensor(asking, device));
    top_token_ids = top_ids(asking_log_probs, top_width);
    top_values = asking_log_probs.gather(1, top_token_ids).cpu().contiguous();
    top_token_ids = top_token_ids.cpu().contiguous();
  }

  const at::Tensor ids_host = token_ids.cpu();
  const at::Tensor log_probs_host = token_log_probs.cpu();
  const int64_t* ids = ids_host.data_ptr<int64_t>();
  const float* lps = log_probs_host.data_ptr<float>();
  out.token_ids.assign(ids, ids + n_rows);
  out.logprobs.assign(lps, lps + n_rows);
  out.top_logprobs.resize(n_rows);
  for (size_t a = 0; a < asking.size(); ++a) {
    const int64_t row = asking[a];
    const int64_t count = std::min(rows[row].top_logprobs_num, vocab);
    const int64_t* ids_row = top_token_ids.data_ptr<int64_t>() + a * top_width;
    const float* values_row = top_values.data_ptr<float>() + a * top_width;
    std::vector<TopLogProb>& list = out.top_logprobs[row];
    list.reserve(count);
    for (int64_t j = 0; j < count; ++j) list.push_back(TopLogProb{ids_row[j], values_row[j]});
  }
  return out;
}

SampledTokens score_tokens(const torch::Tensor& logits, const std::vector<int64_t>& targets,
                           int64_t top_logprobs_num) {
  if (logits.dim() != 2 || !at::isFloatingType(logits.scalar_type()) ||
      logits.size(0) != static_cast<int64_t>(targets.size())) {
    throw Error(
        "score_tokens: logits must be [rows, vocab] floating with one target per row; got " +
        shape_text(logits) + " for " + std::to_string(targets.size()) + " targets");
  }
  torch::NoGradGuard no_grad;
  SampledTokens out;
  const int64_t n_rows = logits.size(0);
  if (n_rows == 0) return out;
  const at::Device device = logits.device();
  const at::Tensor log_probs = models::log_softmax_fp64_sum(logits.to(at::kFloat));
  const at::Tensor target_ids = long_tensor(targets, device).view({n_rows, 1});
  const at::Tensor chosen = log_probs.gather(1, target_ids).view({n_rows}).cpu().contiguous();
  out.token_ids = targets;
  out.logprobs.assign(chosen.data_ptr<float>(), chosen.data_ptr<float>() + n_rows);
  out.top_logprobs.resize(n_rows);
  const int64_t width = std::min(top_logprobs_num, log_probs.size(1));
  if (width > 0) {
    const at::Tensor ids = top_ids(log_probs, width);
    const at::Tensor values = log_probs.gather(1, ids).cpu().contiguous();
    const at::Tensor ids_host = ids.cpu().contiguous();
    for (int64_t row = 0; row < n_rows; ++row) {
      const int64_t* ids_row = ids_host.data_ptr<int64_t>() + row * width;
      const float* values_row = values.data_ptr<float>() + row * width;
      for (int64_t j = 0; j < width; ++j) {
        out.top_logprobs[row].push_back(TopLogProb{ids_row[j], values_row[j]});
      }
    }
  }
  return out;
}

}  // namespace ooze::engine
