// What the dashboard of `ooze plot` (DIR/dashboard.png) shows: the few curves an RL run is
// judged by, each panel from the first of its keys that the run logs (Slime's names):
//
//   reward           rollout/raw_reward, else rollout/reward
//   eval             eval/<dataset> and its pass@k (not the eval's lengths and ratios)
//   loss             train/pg_loss, else train/loss (sft)
//   KL               train/ppo_kl and train/kl_loss
//   entropy          train/entropy_loss
//   response length  rollout/response_len/mean
//   grad norm        train/grad_norm
//   time (s)         perf/*_time, one line each
//
// A panel whose metrics were not logged, or are constant, is left out.
#pragma once

#include <string>
#include <vector>

namespace ooze::launcher {

struct DashboardPanel {
  std::string title;
  std::vector<std::string> keys;  // the metrics drawn in it, one line each
};

// The panels for the metrics in `drawable` (keys with a curve worth drawing), in the order above.
std::vector<DashboardPanel> dashboard_panels(const std::vector<std::string>& drawable);

}  // namespace ooze::launcher
