// A reward function whose descriptor claims plugin ABI version 999, as a plugin built against a
// later (or much older) reward_plugin.h would: ooze must refuse it at load and never call it.
#include "rollout/reward_plugin.h"

extern "C" OOZE_PLUGIN_VISIBLE const ooze::rollout::plugin::EntryInfo
    ooze_plugin_info_future_reward = {999, ooze::rollout::plugin::Kind::kReward};

extern "C" OOZE_PLUGIN_VISIBLE void ooze_plugin_future_reward(ooze::rollout::plugin::Call* call) {
  call->error = "a plugin of another ABI version was called";
}
