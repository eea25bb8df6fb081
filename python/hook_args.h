// The `args` every hook gets: each flag of the run under its underscore name (Slime's
// argparse namespace: `args.n_samples_per_prompt`, `args.rm_type`), also `ooze.args`.
//
//   python::set_hook_args(config.to_json());   // a command, once its flags are read
//
// Cheap when no hook is Python: the flags are kept and handed over when the interpreter starts.
#pragma once

#include <nlohmann/json.hpp>

namespace ooze::python {

void set_hook_args(const nlohmann::json& flags);

// Hands the flags to the interpreter; ensure_started() calls it once Python runs.
void apply_hook_args();

}  // namespace ooze::python
