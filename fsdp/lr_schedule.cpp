#include "fsdp/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace ooze::fsdp {
namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw ConfigError("lr schedule: " + message);
}

}  // namespace

std::string lr_decay_style_name(LrDecayStyle style) {
  switch (style) {
    case LrDecayStyle::kConstant:
      return "constant";
    case LrDecayStyle::kLinear:
      return "linear";
    case LrDecayStyle::kCosine:
      return "cosine";
    case LrDecayStyle::kWsd:
      return "WSD";
  }
  return "?";
}

std::string wsd_decay_style_name(WsdDecayStyle style) {
  switch (style) {
    case WsdDecayStyle::kLinear:
      return "linear";
    case WsdDecayStyle::kCosine:
      return "cosine";
    case WsdDecayStyle::kExponential:
      return "exponential";
    case WsdDecayStyle::kMinusSqrt:
      return "minus_sqrt";
  }
  return "?";
}

const OptionFields<LrScheduleOptions>& LrScheduleOptions::fields() {
  using O = LrScheduleOptions;
  static const OptionFields<O> fields = [] {
    OptionFields<O> f;
    f.section("optimizer");
    f.add("lr", &O::lr, "Peak learning rate of AdamW.").greater_than(0);
    f.add("min_lr", &O::min_lr, "Learning rate the decay ends at.").min(0);
    f.add_enum(
        "lr_decay_style", &O::decay_style,
        {LrDecayStyle::kConstant, LrDecayStyle::kLinear, LrDecayStyle::kCosine, LrDecayStyle::kWsd},
        lr_decay_style_name, "Decay after warmup (Megatron's OptimizerParamScheduler).");
    f.add("lr_warmup_iters", &O::warmup_iters, "Linear warmup length in optimizer steps.").min(0);
    f.add_optional("lr_warmup_fraction", &O::warmup_fraction, 0.0,
                   "Warmup as a fraction of the decay steps; > 0 replaces --lr-warmup-iters.")
        .min(0)
        .max(1);
    f.add("lr_warmup_init", &O::warmup_init_lr, "Learning rate warmup starts from.").min(0);
    f.add_optional("lr_decay_iters", &O::decay_iters, int64_t{0},
                   "Decay length in optimizer steps; 0: the whole run.")
        .min(0);
    f.add("lr_wsd_decay_iters", &O::wsd_decay_iters, "WSD: steps of the final decay.").min(0);
    f.add_enum("lr_wsd_decay_style", &O::wsd_decay_style,
               {WsdDecayStyle::kLinear, WsdDecayStyle::kCosine, WsdDecayStyle::kExponential,
                WsdDecayStyle::kMinusSqrt},
               wsd_decay_style_name, "WSD: shape of the final decay.");
    return f;
  }();
  return fields;
}

LrSchedule::LrSchedule(LrScheduleOptions options, int64_t total_iters)
    : options_(std::move(options)) {
  const LrScheduleOptions& o = options_;
  const bool decays = o.decay_style != LrDecayStyle::kConstant;
  require(std::isfinite(o.lr) && o.lr >= 0,
          "--lr must be a finite value >= 0, got " + std::to_string(o.lr));
  require(std::isfinite(o.min_lr) && o.min_lr >= 0,
          "--min-lr must be a finite value >= 0, got " + std::to_string(o.min_lr));
  require(o.min_lr <= o.lr, "--min-lr (" + std::to_string(o.min_lr) + ") must not exceed --lr (" +
                                std::to_string(o.lr) + ")");
  require(o.warmup_init_lr >= 0 && o.warmup_init_lr <= o.lr,
          "--lr-warmup-init must be in [0, --lr], got " + std::to_string(o.warmup_init_lr));
  require(o.warmup_iters >= 0,
          "--lr-warmup-iters must be >= 0, got " + std::to_string(o.warmup_iters));
  require(!(o.warmup_fraction && o.warmup_iters > 0),
          "give either --lr-warmup-fraction or --lr-warmup-iters, not both");
  if (o.warmup_fraction) {
    require(*o.warmup_fraction >= 0 && *o.warmup_fraction <= 1,
            "--lr-warmup-fraction must be in [0, 1], got " + std::to_string(*o.warmup_fraction));
  }
  if (o.decay_iters) {
    require(*o.decay_iters > 0,
            "--lr-decay-iters must be > 0, got " + std::to_string(*o.decay_iters));
  }
  decay_iters_ = o.decay_iters ? *o.decay_iters : total_iters;
  if (decays || o.warmup_fraction) {
    require(decay_iters_ > 0, "the decay length is " + std::to_string(decay_iters_) +
                                  " iterations; set --lr-decay-iters or the number of "
                                  "training iterations");
  }
  warmup_iters_ = o.warmup_fraction ? *o.warmup_fraction * static_cast<double>(decay_iters_)
                                    : static_cast<double>(o.warmup_iters);
  if (decays) {
    require(warmup_iters_ < static_cast<double>(decay_iters_),
            "the warmup (" + std::to_string(warmup_iters_) +
                " iterations) must be shorter than the decay (--lr-decay-iters " +
                std::to_string(decay_iters_) + ")");
  }
  if (o.decay_style == LrDecayStyle::kWsd) {
    require(o.wsd_decay_iters > 0 && o.wsd_decay_iters <= decay_iters_,
            "WSD needs --lr-wsd-decay-iters in [1, " + std::to_string(decay_iters_) + "], got " +
                std::to_string(o.wsd_decay_iters));
  }
}

double LrSchedule::lr_at(int64_t completed_steps) const {
  const LrScheduleOptions& o = options_;
  const double n = static_cast<double>(std::max<int64_t>(completed_steps, 0));
  if (warmup_iters_ > 0 && n <= warmup_iters_) {
    return o.warmup_init_lr + (o.lr - o.warmup_init_lr) * n / warmup_iters_;
  }
  if (o.decay_style == LrDecayStyle::kConstant) return o.lr;
  const double decay = static_cast<double>(decay_iters_);
  if (n > decay) return o.min_lr;
  const double ratio = (n - warmup_iters_) / (decay - warmup_iters_);
  const double pi = std::acos(-1.0);
  double coeff = 1.0;
  switch (o.decay_style) {
    case LrDecayStyle::kLinear:
      coeff = 1.0 - ratio;
      break;
    case LrDecayStyle::kCosine:
      coeff = 0.5 * (std::cos(pi * ratio) + 1.0);
      break;
    case LrDecayStyle::kWsd: {
      const double wsd = static_cast<double>(o.wsd_decay_iters);
      const double anneal_start = decay - wsd;
      if (n <= anneal_start) break;
      const double s = (n - anneal_start) / wsd;
      switch (o.wsd_decay_style) {
        case WsdDecayStyle::kLinear:
          coeff = 1.0 - s;
          break;
        case WsdDecayStyle::kCosine:
          coeff = 0.5 * (std::cos(pi * s) + 1.0);
          break;
        case WsdDecayStyle::kExponential:
          coeff = 2.0 * std::pow(0.5, s) - 1.0;
          break;
        case WsdDecayStyle::kMinusSqrt:
          coeff = 1.0 - std::sqrt(s);
          break;
      }
      break;
    }
    case LrDecayStyle::kConstant:
      break;
  }
  return o.min_lr + coeff * (o.lr - o.min_lr);
}

}  // namespace ooze::fsdp
