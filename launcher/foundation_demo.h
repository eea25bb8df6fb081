// `ooze demo`: the foundation end to end, without models. A driver process
// hosts the rendezvous store and starts world_size rank processes that train a linear
// regression data-parallel over Gloo (gradients all-reduced, identical replicas checked),
// log metrics as JSONL and save safetensors checkpoints. It exercises config, logging, comm,
// safetensors and metrics end to end.
#pragma once

#include <string>
#include <vector>

namespace ooze {
namespace launcher {

// The driver: `args` are the command-line arguments after "demo". Returns the exit code.
int run_foundation_demo(const std::string& self_exe, const std::vector<std::string>& args);

// One rank, started by the driver as `ooze demo-rank RANK STORE_PORT CONFIG_JSON`.
int run_foundation_demo_rank(const std::vector<std::string>& args);

}  // namespace launcher
}  // namespace ooze
