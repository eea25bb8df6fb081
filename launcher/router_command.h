// `ooze router`: one address in front of several engine servers (`ooze serve`), balancing
// requests over them, keeping a prompt's requests on one engine, and taking engines that fail
// out of the rotation until their /health answers again (serving/router_server.h).
//
//   ooze router --engine http://127.0.0.1:30000 --engine http://127.0.0.1:30002
//               [--host 127.0.0.1] [--port 30001] [--api-key KEY] [--engine-api-key KEY]
//               [--health-check-interval-s 10] [--request-timeout-s 1800]
//               [--retry-on-engine-failure]
//
// Prints the router's URL and runs until SIGINT or SIGTERM.
#pragma once

#include <string>
#include <vector>

#include "core/config.h"

namespace ooze::launcher {

// Its flags.
const ConfigSchema& router_schema();

// `args` are the arguments after "router". Returns the exit code; throws ConfigError for bad
// arguments and ServerError when the address cannot be bound.
int run_router_command(const std::vector<std::string>& args);

}  // namespace ooze::launcher
