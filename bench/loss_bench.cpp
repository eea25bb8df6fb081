// Cost of the RL losses on the CPU, one thread: forward + backward of the policy loss over one
// packed micro-batch of 2^20 random tokens in 512 samples, in ms per million tokens (best of 7
// runs), metrics included. The baseline,
// measured in the same run on the same tensors, is the least any policy-gradient loss must do:
// forward + backward of (log_probs * advantages * loss_mask).sum(). ratio = loss / baseline.
//
// Also the advantage estimation of ppo (GAE) by the chunked form against the plain reverse loop,
// on 512 responses of ~2k tokens (ratio = chunked / loop).
//
//   bench_loss_bench
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "algorithms/advantages.h"
#include "algorithms/policy_loss.h"
#include "core/load_time_settings.h"

using namespace ooze::algorithms;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int64_t kTokens = 1 << 20;
constexpr int64_t kSequences = 512;
constexpr int kRepetitions = 7;

// The fastest of kRepetitions runs after a warm-up: the least disturbed by other processes.
double best_seconds(const std::function<void()>& run) {
  run();  // warm-up: allocator, first-touch pages
  double best = 1e300;
  for (int i = 0; i < kRepetitions; ++i) {
    auto start = Clock::now();
    run();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

void print_line(const std::string& bench, const std::string& metric, double value,
                const std::string& unit, double baseline) {
  std::printf(
      "{\"bench\": \"%s\", \"metric\": \"%s\", \"value\": %.3f, \"unit\": \"%s\", "
      "\"baseline\": %.3f, \"ratio\": %.3f}\n",
      bench.c_str(), metric.c_str(), value, unit.c_str(), baseline, value / baseline);
  std::fflush(stdout);
}

// 512 samples of random length summing to kTokens, each a 256-token prompt then a response.
PolicyLossInputs random_micro_batch() {
  at::manual_seed(0);
  at::Tensor weights = at::rand({kSequences}, at::kDouble) + 0.5;
  at::Tensor lengths = (weights / weights.sum() * kTokens).to(at::kLong);
  lengths[kSequences - 1] += kTokens - lengths.sum().item<int64_t>();
  at::Tensor cu_seqlens = at::zeros({kSequences + 1}, at::kLong);
  cu_seqlens.slice(0, 1) = lengths.cumsum(0);

  at::Tensor position = at::arange(kTokens, at::kLong) -
                        at::repeat_interleave(cu_seqlens.slice(0, 0, kSequences), lengths,
                                              /*dim=*/0, c10::optional<int64_t>(kTokens));
  PolicyLossInputs in;
  in.cu_seqlens = cu_seqlens.to(at::kInt);
  in.loss_mask = (position >= 256).to(at::kFloat);
  in.log_probs = -at::rand({kTokens}) * 3.0;
  in.old_log_probs = in.log_probs + 0.1 * at::randn({kTokens});
  in.ref_log_probs = in.log_probs + 0.1 * at::randn({kTokens});
  in.rollout_log_probs = in.old_log_probs + 0.05 * at::randn({kTokens});
  in.advantages =
      at::repeat_interleave(at::randn({kSequences}), lengths, 0, c10::optional<int64_t>(kTokens));
  in.entropy = at::rand({kTokens}) * 2.0;
  in.log_probs.requires_grad_(true);
  in.entropy.requires_grad_(true);
  return in;
}

void bench_policy_loss() {
  PolicyLossInputs in = random_micro_batch();
  LossScale scale;
  scale.global_tokens = in.loss_mask.sum().item<double>();
  scale.global_sequences = kSequences;

  auto reset_grads = [&] {
    in.log_probs.mutable_grad().reset();
    in.entropy.mutable_grad().reset();
  };
  const double baseline = best_seconds([&] {
    reset_grads();
    (in.log_probs * in.advantages * in.loss_mask).sum().backward();
  });

  PolicyLossOptions ppo;
  ppo.eps_clip_high = 0.28;
  ppo.eps_clip_c = 3.0;
  ppo.entropy_coef = 0.001;
  ppo.use_kl_loss = true;
  ppo.kl_loss_coef = 0.01;
  ppo.kl_loss_type = KlEstimator::kLowVarKl;
  ppo.mismatch.use_tis = true;
  PolicyLossOptions gspo = ppo;
  gspo.kind = PolicyLossKind::kGspo;
  gspo.mismatch.level = TisLevel::kSequence;
  gspo.mismatch.mode = TisMode::kMask;

  const double ms_per_million = 1e3 * 1e6 / static_cast<double>(kTokens);
  const std::vector<std::pair<std::string, PolicyLossOptions>> variants = {
      {"ppo_dualclip_kl_entropy_tis", ppo}, {"gspo_kl_entropy_icepop", gspo}};
  for (const auto& variant : variants) {
    const double seconds = best_seconds([&] {
      reset_grads();
      policy_loss(in, variant.second, scale).loss.backward();
    });
    print_line("algorithms.policy_loss." + variant.first, "forward_backward_time_per_1M_tokens",
               seconds * ms_per_million, "ms", baseline * ms_per_million);
  }
}

void bench_gae() {
  at::manual_seed(1);
  std::vector<at::Tensor> rewards, values;
  for (int64_t i = 0; i < kSequences; ++i) {
    int64_t length = 1024 + (i * 37) % 2048;
    rewards.push_back(at::randn({length}));
    values.push_back(at::randn({length}));
  }
  const double loop = best_seconds([&] { gae_loop(rewards, values, 0.99, 0.95); });
  const double chunked = best_seconds([&] { gae_chunked(rewards, values, 0.99, 0.95); });
  print_line("algorithms.advantages.gae_chunked_vs_loop", "time", chunked * 1e3, "ms", loop * 1e3);
}

}  // namespace

int main(int, char** argv) {
  ooze::start_with_load_time_settings(argv);  // first: it may start this program again
  at::set_num_threads(1);
  bench_policy_loss();
  bench_gae();
  return 0;
}
