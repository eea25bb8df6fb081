// `ooze sft-demo` (what `make demo` runs): supervised
// fine-tuning of a tiny generated model on a generated dataset, with W FSDP ranks hosted by
// TrainActors through the actor runtime. Writes the model (HF layout), the dataset (JSONL) and
// the trained model under --out; prints the loss of every step (it falls), tokens/s, and where
// the trained model went.
#pragma once

#include <string>
#include <vector>

#include "core/config.h"

namespace ooze::launcher {

// Every flag the command accepts: its own (section "sft-demo") and the TrainActor's
// (launcher/trainer_options.h).
const ConfigSchema& sft_demo_schema();

int run_sft_demo(const std::vector<std::string>& args);

}  // namespace ooze::launcher
