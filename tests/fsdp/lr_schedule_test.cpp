// LR schedules against Megatron's formulas, written out here for each style.
#include "fsdp/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"

namespace lr_schedule_test {

using ooze::fsdp::LrDecayStyle;
using ooze::fsdp::LrSchedule;
using ooze::fsdp::LrScheduleOptions;
using ooze::fsdp::WsdDecayStyle;

const double kPi = 3.14159265358979323846;

TEST(LrSchedule, ConstantWithWarmupFromZero) {
  LrScheduleOptions o;
  o.lr = 2e-5;
  o.warmup_iters = 4;
  const LrSchedule schedule(o, 100);
  for (int n = 0; n <= 4; ++n) EXPECT_DOUBLE_EQ(schedule.lr_at(n), 2e-5 * n / 4.0) << n;
  for (int n : {5, 50, 100, 1000}) EXPECT_DOUBLE_EQ(schedule.lr_at(n), 2e-5) << n;
}

TEST(LrSchedule, ConstantWithoutWarmupNeedsNoLength) {
  LrScheduleOptions o;
  o.lr = 1e-6;
  const LrSchedule schedule(o, 0);
  EXPECT_DOUBLE_EQ(schedule.lr_at(0), 1e-6);
  EXPECT_DOUBLE_EQ(schedule.lr_at(12345), 1e-6);
}

TEST(LrSchedule, LinearDecayToMinAfterWarmup) {
  LrScheduleOptions o;
  o.lr = 1e-3;
  o.min_lr = 1e-4;
  o.warmup_iters = 10;
  o.warmup_init_lr = 1e-5;
  o.decay_style = LrDecayStyle::kLinear;
  o.decay_iters = 110;
  const LrSchedule schedule(o, 1000);
  EXPECT_DOUBLE_EQ(schedule.lr_at(0), 1e-5);
  EXPECT_DOUBLE_EQ(schedule.lr_at(5), 1e-5 + (1e-3 - 1e-5) * 0.5);
  EXPECT_DOUBLE_EQ(schedule.lr_at(10), 1e-3);
  for (int n = 11; n <= 110; n += 7) {
    const double r = (n - 10) / 100.0;
    EXPECT_NEAR(schedule.lr_at(n), 1e-4 + (1e-3 - 1e-4) * (1 - r), 1e-15) << n;
  }
  EXPECT_NEAR(schedule.lr_at(110), 1e-4, 1e-15);
  EXPECT_DOUBLE_EQ(schedule.lr_at(111), 1e-4);
  EXPECT_DOUBLE_EQ(schedule.lr_at(5000), 1e-4);
}

TEST(LrSchedule, CosineDecayDefaultsToTheRunLength) {
  LrScheduleOptions o;
  o.lr = 3e-4;
  o.min_lr = 3e-5;
  o.warmup_fraction = 0.1;  // of 200 iterations: 20
  o.decay_style = LrDecayStyle::kCosine;
  const LrSchedule schedule(o, 200);
  EXPECT_EQ(schedule.decay_iters(), 200);
  EXPECT_DOUBLE_EQ(schedule.warmup_iters(), 20.0);
  EXPECT_DOUBLE_EQ(schedule.lr_at(10), 3e-4 * 10 / 20.0);
  for (int n = 20; n <= 200; n += 9) {
    const double r = (n - 20) / 180.0;
    EXPECT_NEAR(schedule.lr_at(n), 3e-5 + (3e-4 - 3e-5) * 0.5 * (std::cos(kPi * r) + 1), 1e-15)
        << n;
  }
  EXPECT_NEAR(schedule.lr_at(110), 3e-5 + (3e-4 - 3e-5) * 0.5, 1e-15);  // half way
  EXPECT_DOUBLE_EQ(schedule.lr_at(201), 3e-5);
}

TEST(LrSchedule, WsdIsStableThenDecaysOverItsLastIterations) {
  const double max = 1e-3, min = 1e-5;
  struct Case {
    WsdDecayStyle style;
    double (*coeff)(double);
  };
  const Case cases[] = {
      {WsdDecayStyle::kLinear, [](double s) { return 1 - s; }},
      {WsdDecayStyle::kCosine, [](double s) { return 0.5 * (std::cos(kPi * s) + 1); }},
      {WsdDecayStyle::kExponential, [](double s) { return 2 * std::pow(0.5, s) - 1; }},
      {WsdDecayStyle::kMinusSqrt, [](double s) { return 1 - std::sqrt(s); }},
  };
  for (const Case& c : cases) {
    LrScheduleOptions o;
    o.lr = max;
    o.min_lr = min;
    o.warmup_iters = 5;
    o.decay_style = LrDecayStyle::kWsd;
    o.decay_iters = 100;
    o.wsd_decay_iters = 20;
    o.wsd_decay_style = c.style;
    const LrSchedule schedule(o, 100);
    EXPECT_DOUBLE_EQ(schedule.lr_at(2), max * 2 / 5.0);
    for (int n : {6, 40, 80}) EXPECT_DOUBLE_EQ(schedule.lr_at(n), max) << n;
    for (int n = 81; n <= 100; ++n) {
      const double s = (n - 80) / 20.0;
      EXPECT_NEAR(schedule.lr_at(n), min + (max - min) * c.coeff(s), 1e-15) << n;
    }
    EXPECT_DOUBLE_EQ(schedule.lr_at(101), min);
  }
}

TEST(LrSchedule, ReadsMegatronStyleNames) {
  ooze::ConfigSchema schema;
  LrScheduleOptions::fields().declare(schema);
  const auto read = [&](std::vector<std::string> flags) {
    return LrScheduleOptions::fields().read(ooze::load_config(schema, "", flags));
  };
  EXPECT_EQ(read({"--lr-decay-style", "WSD"}).decay_style, LrDecayStyle::kWsd);
  EXPECT_EQ(read({"--lr-decay-style", "cosine"}).decay_style, LrDecayStyle::kCosine);
  EXPECT_EQ(read({"--lr-decay-style", "linear"}).decay_style, LrDecayStyle::kLinear);
  EXPECT_EQ(read({}).decay_style, LrDecayStyle::kConstant);
  EXPECT_EQ(read({"--lr-wsd-decay-style", "minus_sqrt"}).wsd_decay_style,
            WsdDecayStyle::kMinusSqrt);
  EXPECT_THROW(read({"--lr-decay-style", "inverse-cube"}), ooze::ConfigError);
  EXPECT_THROW(read({"--lr-wsd-decay-style", "step"}), ooze::ConfigError);
  // Megatron's 0 means "not set" for the warmup fraction and the decay length.
  EXPECT_FALSE(read({}).warmup_fraction.has_value());
  EXPECT_FALSE(read({}).decay_iters.has_value());
  EXPECT_EQ(read({"--lr-decay-iters", "30"}).decay_iters, 30);
}

TEST(LrSchedule, RefusesInconsistentOptions) {
  const auto expect_refused = [](LrScheduleOptions o, int64_t total, const char* flag) {
    try {
      LrSchedule schedule(o, total);
      ADD_FAILURE() << "accepted options that should name " << flag;
    } catch (const ooze::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    }
  };
  LrScheduleOptions o;
  o.lr = 1e-4;
  o.min_lr = 1e-3;
  expect_refused(o, 100, "--min-lr");
  o = {};
  o.warmup_iters = 5;
  o.warmup_fraction = 0.1;
  expect_refused(o, 100, "--lr-warmup-fraction");
  o = {};
  o.decay_style = LrDecayStyle::kLinear;
  o.warmup_iters = 100;
  expect_refused(o, 100, "--lr-decay-iters");
  o = {};
  o.decay_style = LrDecayStyle::kCosine;
  expect_refused(o, 0, "--lr-decay-iters");
  o = {};
  o.decay_style = LrDecayStyle::kWsd;
  expect_refused(o, 100, "--lr-wsd-decay-iters");
}

}  // namespace lr_schedule_test
