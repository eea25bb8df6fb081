// Learning-rate schedules with Megatron's semantics (OptimizerParamScheduler), which Slime uses,
// counted in optimizer iterations. With n = the number of optimizer steps already taken (0 for
// the first step), warmup W (--lr-warmup-iters, or --lr-warmup-fraction * decay iterations) and
// decay iterations D (--lr-decay-iters, default: the run's total iterations):
//
//   n <= W and W > 0:  lr = init + (max - init) * n / W   (linear warmup from --lr-warmup-init)
//   constant:          lr = max
//   n > D:             lr = min (--min-lr)
//   otherwise, with r = (n - W) / (D - W):
//     linear:          lr = min + (max - min) * (1 - r)
//     cosine:          lr = min + (max - min) * 0.5 * (cos(pi * r) + 1)
//     WSD:             stable at max until D - S, then over the last S iterations
//                      (--lr-wsd-decay-iters) with s = (n - (D - S)) / S:
//                        linear 1 - s, cosine 0.5 * (cos(pi * s) + 1),
//                        exponential 2 * 0.5^s - 1, minus_sqrt 1 - sqrt(s)
//
// As in Megatron, the first step of a warmup runs at the warmup-init LR (0 by default).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/option_fields.h"

namespace ooze::fsdp {

enum class LrDecayStyle { kConstant, kLinear, kCosine, kWsd };
enum class WsdDecayStyle { kLinear, kCosine, kExponential, kMinusSqrt };

// "constant", "linear", "cosine", "WSD" / "linear", "cosine", "exponential", "minus_sqrt": the
// --lr-decay-style / --lr-wsd-decay-style spellings.
std::string lr_decay_style_name(LrDecayStyle style);
std::string wsd_decay_style_name(WsdDecayStyle style);

struct LrScheduleOptions {
  double lr = 1e-6;                       // --lr: the peak
  double min_lr = 0.0;                    // --min-lr
  double warmup_init_lr = 0.0;            // --lr-warmup-init
  int64_t warmup_iters = 0;               // --lr-warmup-iters
  std::optional<double> warmup_fraction;  // --lr-warmup-fraction (of the decay iterations)
  std::optional<int64_t> decay_iters;     // --lr-decay-iters (default: total iterations)
  LrDecayStyle decay_style = LrDecayStyle::kConstant;      // --lr-decay-style
  int64_t wsd_decay_iters = 0;                             // --lr-wsd-decay-iters (WSD only)
  WsdDecayStyle wsd_decay_style = WsdDecayStyle::kLinear;  // --lr-wsd-decay-style

  // The flags above, Megatron's names ("optimizer" section).
  static const OptionFields<LrScheduleOptions>& fields();
};

class LrSchedule {
 public:
  // `total_iters`: the run's optimizer iterations (the default decay length). Validates the
  // options as Megatron does and throws ooze::ConfigError naming the flag that is wrong.
  LrSchedule(LrScheduleOptions options, int64_t total_iters);

  // The learning rate of the step taken after `completed_steps` earlier steps.
  double lr_at(int64_t completed_steps) const;

  double warmup_iters() const { return warmup_iters_; }
  int64_t decay_iters() const { return decay_iters_; }
  const LrScheduleOptions& options() const { return options_; }

 private:
  LrScheduleOptions options_;
  double warmup_iters_ = 0;  // fractional with --lr-warmup-fraction, as in Megatron
  int64_t decay_iters_ = 0;
};

}  // namespace ooze::fsdp
