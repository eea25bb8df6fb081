#include "fsdp/lr_schedule.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/error.h"

namespace ooze::fsdp {
namespace {

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

void require(bool ok, const std::string& message) {
  if (!ok) throw ConfigError("lr schedule: " + message);
}

}  // namespace

LrDecayStyle parse_lr_decay_style(const std::string& name) {
  const std::string key = lower(name);
  if (key == "constant") return LrDecayStyle::kConstant;
  if (key == "linear") return LrDecayStyle::kLinear;
  if (key == "cosine") return LrDecayStyle::kCosine;
  if (key == "wsd") return LrDecayStyle::kWsd;
  throw ConfigError("--lr-decay-style: unknown style '" + name +
                    "'; use constant, linear, cosine or WSD");
}

WsdDecayStyle parse_wsd_decay_style(const std::string& name) {
  const std::string key = lower(name);
  if (key == "linear") return WsdDecayStyle::kLinear;
  if (key == "cosine") return WsdDecayStyle::kCosine;
  if (key == "exponential") return WsdDecayStyle::kExponential;
  if (key == "minus_sqrt") return WsdDecayStyle::kMinusSqrt;
  throw ConfigError("--lr-wsd-decay-style: unknown style '" + name +
                    "'; use linear, cosine, exponential or minus_sqrt");
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
