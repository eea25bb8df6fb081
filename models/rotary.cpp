#include "models/rotary.h"

#include <cmath>
#include <vector>

namespace ooze::models {
namespace {

// Mirrors transformers' rope initialisation functions, in fp32 like them.
torch::Tensor compute_inverse_frequencies(const ModelConfig& config) {
  const int64_t dim = config.head_dim;
  torch::Tensor exponents = torch::arange(0, dim, 2, torch::kLong).to(torch::kFloat) / dim;
  torch::Tensor inv_freq = 1.0 / torch::pow(config.rope_theta, exponents);
  const RopeScaling& scaling = config.rope_scaling;
  if (scaling.rope_type == "linear") {
    inv_freq = inv_freq / scaling.factor;
  } else if (scaling.rope_type == "llama3") {
    const double old_context = static_cast<double>(scaling.original_max_position_embeddings);
    const double low_freq_wavelen = old_context / scaling.low_freq_factor;
    const double high_freq_wavelen = old_context / scaling.high_freq_factor;
    torch::Tensor wavelen = 2 * M_PI / inv_freq;
    // Long wavelengths (low frequencies) are slowed down by `factor`.
    torch::Tensor scaled =
        torch::where(wavelen > low_freq_wavelen, inv_freq / scaling.factor, inv_freq);
    // In between, blend the scaled and unscaled frequencies.
    torch::Tensor smooth = (old_context / wavelen - scaling.low_freq_factor) /
                           (scaling.high_freq_factor - scaling.low_freq_factor);
    torch::Tensor smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled;
    torch::Tensor is_medium = torch::logical_not(wavelen < high_freq_wavelen) &
                              torch::logical_not(wavelen > low_freq_wavelen);
    inv_freq = torch::where(is_medium, smoothed, scaled);
  }
  return inv_freq.contiguous();
}

}  // namespace

RotaryEmbedding::RotaryEmbedding(const ModelConfig& config)
    : inverse_frequencies_(compute_inverse_frequencies(config)) {}

RotaryTables RotaryEmbedding::tables(const torch::Tensor& position_ids,
                                     c10::ScalarType dtype) const {
  torch::NoGradGuard no_grad;
  torch::Tensor inv_freq = inverse_frequencies_.to(position_ids.device());
  torch::Tensor angles = position_ids.to(torch::kFloat).unsqueeze(1) * inv_freq.unsqueeze(0);
  torch::Tensor both_halves = torch::cat({angles, angles}, /*dim=*/1);
  return {both_halves.cos().to(dtype), both_halves.sin().to(dtype)};
}

torch::Tensor apply_rotary(const torch::Tensor& x, const RotaryTables& tables) {
  const int64_t half = x.size(-1) / 2;
  torch::Tensor first = x.narrow(-1, 0, half);
  torch::Tensor second = x.narrow(-1, half, half);
  torch::Tensor rotated_half = torch::cat({-second, first}, /*dim=*/-1);
  torch::Tensor cos = tables.cos.unsqueeze(1);  // broadcast over heads
  torch::Tensor sin = tables.sin.unsqueeze(1);
  return x * cos + rotated_half * sin;
}

}  // namespace ooze::models
