#include "launcher/dashboard_panels.h"

#include <algorithm>
#include <functional>

namespace ooze::launcher {
namespace {

// eval/<dataset> and eval/<dataset>/pass@k: the scores, as the run's eval line prints them.
bool is_eval_score(const std::string& key) {
  if (key.rfind("eval/", 0) != 0) return false;
  const std::string name = key.substr(5);
  return name.find('/') == std::string::npos || name.find("/pass@") != std::string::npos;
}

// perf/rollout_time, perf/train_time, ...: where a step's seconds went.
bool is_phase_time(const std::string& key) {
  const std::string suffix = "_time";
  return key.rfind("perf/", 0) == 0 && key.size() > 5 + suffix.size() &&
         key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<DashboardPanel> dashboard_panels(const std::vector<std::string>& drawable) {
  const auto has = [&](const std::string& key) {
    return std::find(drawable.begin(), drawable.end(), key) != drawable.end();
  };
  const auto first_of = [&](std::vector<std::string> preferred) {
    for (const std::string& key : preferred) {
      if (has(key)) return std::vector<std::string>{key};
    }
    return std::vector<std::string>{};
  };
  const auto all_of = [&](std::vector<std::string> keys) {
    keys.erase(std::remove_if(keys.begin(), keys.end(), [&](auto& key) { return !has(key); }),
               keys.end());
    return keys;
  };
  const auto matching = [&](const std::function<bool(const std::string&)>& wanted) {
    std::vector<std::string> keys;
    std::copy_if(drawable.begin(), drawable.end(), std::back_inserter(keys), wanted);
    return keys;
  };

  const std::vector<DashboardPanel> candidates = {
      {"reward", first_of({"rollout/raw_reward", "rollout/reward"})},
      {"eval", matching(is_eval_score)},
      {"loss", first_of({"train/pg_loss", "train/loss"})},
      {"KL", all_of({"train/ppo_kl", "train/kl_loss"})},
      {"entropy", first_of({"train/entropy_loss"})},
      {"response length", first_of({"rollout/response_len/mean"})},
      {"grad norm", first_of({"train/grad_norm"})},
      {"time (s)", matching(is_phase_time)},
  };
  std::vector<DashboardPanel> panels;
  for (const DashboardPanel& panel : candidates) {
    if (!panel.keys.empty()) panels.push_back(panel);
  }
  return panels;
}

}  // namespace ooze::launcher
