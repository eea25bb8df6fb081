#include "algorithms/value_loss.h"

#include "algorithms/packed_sequences.h"
#include "core/error.h"

namespace ooze::algorithms {

const OptionFields<ValueLossOptions>& ValueLossOptions::fields() {
  static const OptionFields<ValueLossOptions> fields = [] {
    OptionFields<ValueLossOptions> f;
    f.add("value_clip", &ValueLossOptions::value_clip, "Clip of the critic's value change (ppo).")
        .greater_than(0);
    return f;
  }();
  return fields;
}

LossOutput value_loss(const ValueLossInputs& inputs, const ValueLossOptions& options,
                      const LossScale& scale) {
  if (!(options.value_clip > 0)) {
    throw Error("value_loss: value_clip = " + std::to_string(options.value_clip) + " must be > 0");
  }
  if (!inputs.values.defined()) throw Error("value_loss: values is required");
  const int64_t tokens = inputs.values.numel();
  check_per_token("value_loss", "values", inputs.values, tokens);
  check_per_token("value_loss", "old_values", inputs.old_values, tokens);
  check_per_token("value_loss", "returns", inputs.returns, tokens);
  check_per_token("value_loss", "loss_mask", inputs.loss_mask, tokens);

  PackedSequences sequences(inputs.cu_seqlens, tokens, inputs.values.device());
  at::Tensor values = to_compute_dtype(inputs.values);
  const at::ScalarType dtype = values.scalar_type();
  at::Tensor old_values = inputs.old_values.to(dtype);
  at::Tensor returns = inputs.returns.to(dtype);
  at::Tensor weights = loss_token_weights(inputs.loss_mask.to(dtype), sequences, scale,
                                          inputs.sequence_token_counts);

  at::Tensor change = values - old_values;
  at::Tensor clipped_values =
      old_values + at::clamp(change, -options.value_clip, options.value_clip);
  at::Tensor per_token =
      at::maximum((values - returns).square(), (clipped_values - returns).square());
  at::Tensor loss = (per_token * weights).sum();

  PendingMetrics metrics;
  metrics.add("value_loss", loss);
  metrics.add("value_clipfrac",
              ((change.detach().abs() > options.value_clip).to(dtype) * weights).sum());
  return LossOutput{loss * scale.gradient_factor(), metrics.resolve()};
}

}  // namespace ooze::algorithms
