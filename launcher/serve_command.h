// `ooze serve`: the rollout engine behind its HTTP server (SGLang- and OpenAI-compatible
// endpoints, serving/engine_server.h).
//
//   ooze serve --model DIR [--host 127.0.0.1] [--port 30000] [--api-key KEY]
//              [--max-running-requests N] [--kv-cache-blocks N] [--kv-cache-memory-mb MB]
//              [--block-size N] [--chunked-prefill-size N] [--disable-prefix-caching]
//              [--dtype auto|float32|bfloat16] [--device cpu|cuda[:N]] [--served-model-name NAME]
//              [--threads N] [--http-threads N] [--seed N] [--config FILE]
//
// Prints "ooze serve: listening on http://HOST:PORT" once it answers requests, and on SIGINT or
// SIGTERM stops accepting, aborts what is still generating (clients get the partial outputs),
// and exits 0.
#pragma once

#include <string>
#include <vector>

#include "core/config.h"

namespace ooze::launcher {

const ConfigSchema& serve_schema();

// `args` are the arguments after "serve". Returns the exit code; throws ConfigError for bad
// flags, and what Engine and the server throw when the model cannot be loaded or the address
// cannot be bound.
int run_serve_command(const std::vector<std::string>& args);

}  // namespace ooze::launcher
