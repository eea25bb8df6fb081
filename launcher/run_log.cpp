#include "launcher/run_log.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <ostream>

namespace ooze::launcher {
namespace {

// Four significant digits: enough to follow a curve, short enough for a terminal line.
std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.4g", value);
  return text;
}

// " NAME VALUE" for each key the line has, in the order given.
std::string fields(const MetricLine& line,
                   std::initializer_list<std::pair<const char*, const char*>> wanted) {
  std::string text;
  for (const auto& [key, name] : wanted) {
    auto found = line.find(key);
    if (found != line.end()) text += std::string(" ") + name + " " + number(found->second);
  }
  return text;
}

double value_or(const MetricLine& line, const std::string& key, double fallback) {
  auto found = line.find(key);
  return found == line.end() ? fallback : found->second;
}

}  // namespace

RunLog::RunLog(const std::string& output_dir, std::ostream& out, int64_t num_rollout,
               int64_t steps_per_rollout)
    : metrics_(output_dir + "/metrics.jsonl"),
      tensorboard_(output_dir + "/tensorboard"),
      out_(out),
      num_rollout_(num_rollout),
      steps_per_rollout_(steps_per_rollout) {}

void RunLog::record(int64_t rollout_id, int64_t tensorboard_step, const MetricLine& line) {
  metrics_.log(rollout_id, line);
  tensorboard_.add_scalars(tensorboard_step, line);
}

void RunLog::train_step(int64_t rollout_id, const MetricLine& line) {
  const auto step = static_cast<int64_t>(value_or(line, "train/step", 0));
  record(rollout_id, step, line);
  last_step_ = line;
  // One step per rollout is quoted by the rollout's summary; several get lines of their own.
  if (steps_per_rollout_ > 1) {
    out_ << "  [train step " << step << "]"
         << fields(line, {{line.count("train/pg_loss") ? "train/pg_loss" : "train/loss",
                           line.count("train/pg_loss") ? "pg_loss" : "loss"},
                          {"train/ppo_kl", "ppo_kl"},
                          {"train/pg_clipfrac", "clipfrac"},
                          {"train/grad_norm", "grad_norm"},
                          {"train/lr", "lr"}})
         << std::endl;
  }
}

void RunLog::eval(int64_t rollout_id, const MetricLine& line) {
  record(rollout_id, rollout_id, line);
  std::string text;
  for (const auto& [key, value] : line) {
    // The datasets' scores and pass@k; the rest (lengths, ...) is in the files.
    const std::string name = key.rfind("eval/", 0) == 0 ? key.substr(5) : "";
    if (!name.empty() &&
        (name.find('/') == std::string::npos || name.find("pass@") != std::string::npos)) {
      text += " " + name + " " + number(value);
    }
  }
  out_ << "[eval at rollout " << rollout_id << "]" << text << std::endl;
}

void RunLog::rollout(int64_t rollout_id, const MetricLine& line) {
  record(rollout_id, rollout_id, line);
  // The policy loss reports pg_loss (and loss, the same total); the SFT loss only loss.
  const bool policy_loss = last_step_.count("train/pg_loss") > 0;
  const std::string groups[] = {
      fields(line, {{"rollout/raw_reward", "reward"},
                    {"rollout/response_len/mean", "response_len"},
                    {"rollout/truncated_ratio", "truncated"}}),
      fields(last_step_,
             {{policy_loss ? "train/pg_loss" : "train/loss", policy_loss ? "pg_loss" : "loss"},
              {"train/ppo_kl", "ppo_kl"},
              {"train/kl_loss", "kl_loss"},
              {"train/entropy_loss", "entropy"},
              {"train/grad_norm", "grad_norm"},
              {"train/lr", "lr"},
              {"critic/value_loss", "value_loss"}}),
      " " + number(value_or(line, "perf/step_time", 0)) + " s:" +
          fields(line, {{"perf/rollout_time", "rollout"},
                        {"perf/log_probs_time", "log_probs"},
                        {"perf/ref_log_probs_time", "ref"},
                        {"perf/values_time", "values"},
                        {"perf/train_time", "train"},
                        {"perf/update_weights_time", "sync"},
                        {"perf/save_time", "save"}}),
      fields(line, {{"perf/rollout_tokens_per_sec", "gen tok/s"},
                    {"perf/train_tokens_per_sec", "train tok/s"},
                    {"perf/update_weights_mb_per_sec", "sync MB/s"}}),
  };
  std::string text =
      "[rollout " + std::to_string(rollout_id + 1) + "/" + std::to_string(num_rollout_) + "]";
  for (const std::string& group : groups) {
    if (group.empty()) continue;
    text += (text.back() == ']' ? "" : " |") + group;
  }
  out_ << text << std::endl;
  last_step_.clear();
}

void RunLog::before_checkpoint() { metrics_.sync(); }

void RunLog::resume_at(int64_t first_rollout, int64_t optimizer_steps) {
  const int64_t dropped = metrics_.drop_steps_from(first_rollout);
  if (dropped > 0) {
    out_ << "metrics: " << dropped << " lines of rollout " << first_rollout
         << " and later dropped from " << metrics_.path() << " (those rollouts run again)"
         << std::endl;
  }
  // Train lines carry "train/step" and sit at that optimizer step; every other line at its
  // rollout (record() above).
  drop_tensorboard_events(
      std::filesystem::path(tensorboard_.path()).parent_path().string(), tensorboard_.path(),
      [&](int64_t step, const std::vector<std::string>& tags) {
        const bool train_line = std::find(tags.begin(), tags.end(), "train/step") != tags.end();
        // (Critic-only rollouts log train lines at the same step: from scratch, drop them all.)
        return train_line ? step > optimizer_steps || first_rollout == 0 : step >= first_rollout;
      });
}

}  // namespace ooze::launcher
