// The small `ooze train` the launcher tests start (tests/support/train_job.h), and what the
// tests check of a running job: a worker by its label, the checkpoints it left.
//
//   std::vector<std::string> command = tiny_train_command(dir, {"--colocate"});
//   Process run(command, {{"OMP_NUM_THREADS", "1"}}, dir + "/log.txt");
//   const std::string session = session_of(run.pid());      // once its workers run
//   kill(worker_labelled(session, "TrainActor_rank_1").pid, SIGKILL);
//   EXPECT_TRUE(processes_of_session(session).empty());
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "core/checksum.h"
#include "tests/support/train_job.h"

namespace ooze::testing {

// The running worker labelled `label` (a restarted actor leaves its dead instance's logs
// behind).
inline Worker worker_labelled(const std::string& session, const std::string& label) {
  if (session.empty()) {
    ADD_FAILURE() << "no worker " << label << ": the job's session was not found";
    return Worker{};
  }
  for (const Worker& worker : workers_of(session)) {
    if (worker.label == label && std::filesystem::exists("/proc/" + std::to_string(worker.pid))) {
      return worker;
    }
  }
  ADD_FAILURE() << "no worker " << label << " in " << session << "/logs";
  return Worker{};
}

// The iteration the tracker in `save` names, after checking that checkpoint of a two-rank job is
// whole: every file its metadata lists has the recorded size and CRC-32, and its rollout state
// is there.
inline int64_t expect_last_checkpoint_whole(const std::string& save) {
  const int64_t iteration = std::stoll(read_file(save + "/latest_checkpointed_iteration.txt"));
  EXPECT_GE(iteration, 1);
  char name[32];
  std::snprintf(name, sizeof(name), "/iter_%07lld", static_cast<long long>(iteration));
  const std::string checkpoint = save + name;
  const nlohmann::json metadata =
      nlohmann::json::parse(read_file(checkpoint + "/metadata.json"), nullptr, false);
  EXPECT_FALSE(metadata.is_discarded()) << checkpoint << "/metadata.json is not JSON";
  if (metadata.is_discarded()) return iteration;
  EXPECT_EQ(metadata["files"].size(), 4u) << "a model and an optimizer file for each rank";
  for (const nlohmann::json& file : metadata["files"]) {
    const std::string bytes = read_file(checkpoint + "/" + file["name"].get<std::string>());
    EXPECT_EQ(bytes.size(), file["bytes"].get<size_t>()) << file.dump();
    EXPECT_EQ(crc32(bytes.data(), bytes.size()), file["crc32"].get<uint32_t>()) << file.dump();
  }
  const nlohmann::json state = nlohmann::json::parse(
      read_file(save + "/rollout_state_" + std::to_string(iteration) + ".json"), nullptr, false);
  EXPECT_TRUE(!state.is_discarded() && state.contains("next_rollout_id"))
      << "the rollout state of iteration " << iteration << " is missing or broken";
  return iteration;
}

}  // namespace ooze::testing
