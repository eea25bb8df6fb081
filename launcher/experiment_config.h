// The schema of an ooze experiment: every field `ooze train --config exp.json [--flag ...]`
// accepts, with its default, range and doc. `ooze train --help` prints experiment_schema().help().
//
// Declare only fields the code reads today; a field that does nothing would be a lie.
#pragma once

#include "core/config.h"

namespace ooze::launcher {

// Built once on first use; sections in order: run, comm, train, demo.
const ConfigSchema& experiment_schema();

}  // namespace ooze::launcher
