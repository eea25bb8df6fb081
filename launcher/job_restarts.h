// `ooze train --max-restarts N`: when a trainer rank dies mid-run (its process killed, out of
// memory, crashed), every rank's step fails and the driver sees an error; with restarts left, the
// job names what died, stops all its processes and starts again from the newest complete
// checkpoint in --save, as `--load SAVE` would, so the run continues with the prompts and
// weights it would have had. Any other failure (a bad reward function, a dead engine) stops it.
//
//   for (int64_t restarts = 0;; ++restarts) {
//     try { run_job(*config, ...); return 0; } catch (const std::exception& error) {
//       if (restarts == plan.max_restarts) throw;
//       const auto deaths = actors::dead_actors(kDeathSettle);
//       if (!trainer_died(deaths)) throw;
//       report_dead_actors("train", error.what(), deaths, std::cerr);
//       actors::shutdown();  // every process of the job
//       config = restart_config(schema, args, save, restarts + 1, plan.max_restarts, std::cerr);
//     }
//   }
#pragma once

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "actors/runtime.h"
#include "core/config.h"

namespace ooze::launcher {

// How long a failed driver waits for the news of a death that its error may only echo.
constexpr std::chrono::milliseconds kDeathSettle{500};

// Names, one line each ("ooze COMMAND: <Label> (actor ID, pid P) died: <reason>"), the actors
// that died, except those the error already names: when a run fails, a death is usually the
// cause and the error only its echo (a peer's broken collective).
void report_dead_actors(const std::string& command, const std::string& error,
                        const std::vector<actors::ActorInfo>& deaths, std::ostream& err);

// Whether a rank of a trainer group (the policy's or the critic's) is among the dead: the failure
// --max-restarts restarts the job for.
bool trainer_died(const std::vector<actors::ActorInfo>& deaths);

// The config of restart `restart` (of `max_restarts`) of the `ooze train` command line `args`:
// resumed from the newest complete checkpoint in `save_dir` with its optimizer and RNG state, or,
// when there is none yet, the command line's own (the run starts over). Says which on `err`.
Config restart_config(const ConfigSchema& schema, const std::vector<std::string>& args,
                      const std::string& save_dir, int64_t restart, int64_t max_restarts,
                      std::ostream& err);

}  // namespace ooze::launcher
