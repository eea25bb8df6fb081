// Slime's and SGLang's flags, as users carry them over from their scripts: the ones ooze takes
// with their meaning (aliases of ooze's fields) and the ones it refuses with what to use instead
// (hints). The whole table is in slime_flags.cpp; docs/config.md lists it.
//
//   ConfigSchema schema = ...;                 // the command's own fields first
//   add_slime_flags(schema);                   // ooze train, ooze rollout
//   add_sglang_server_flags(schema);           // ooze serve
#pragma once

#include "core/config.h"

namespace ooze::launcher {

// Slime's spellings a command can honour (an alias is added only when `schema` has every field
// it sets, so `ooze rollout` does not take the trainer's) and the hints for the rest. Call it
// after the schema's fields are declared.
void add_slime_flags(ConfigSchema& schema);

// SGLang's server flags (`python -m sglang.launch_server`) for `ooze serve`.
void add_sglang_server_flags(ConfigSchema& schema);

}  // namespace ooze::launcher
