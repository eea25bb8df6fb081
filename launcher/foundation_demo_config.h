// The fields `ooze demo` (the foundation demo, foundation_demo.h) accepts, with their defaults,
// ranges and docs: its run, the collective group's timeout (comm/process_group.h) and the
// linear regression it trains. Every field is read by the demo.
#pragma once

#include "core/config.h"

namespace ooze::launcher {

// Built once on first use; sections in order: run, distributed, demo.
const ConfigSchema& foundation_demo_schema();

}  // namespace ooze::launcher
