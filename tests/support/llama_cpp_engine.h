// Runs tests/engine/llama_cpp_engine.mjs (llama.cpp through npm's node-llama-cpp) in `mode`
// ("logprobs" or "speed") on `request`, for the reference test and the benchmark alike. The
// request goes to DIR/llama_request.json, node's output to DIR/llama_cpp.log. Returns the one
// JSON object the script prints; throws std::runtime_error with the log when it fails or prints
// none.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace ooze::testing {

nlohmann::json run_llama_cpp_engine(const std::string& mode, const nlohmann::json& request,
                                    const std::string& dir);

}  // namespace ooze::testing
