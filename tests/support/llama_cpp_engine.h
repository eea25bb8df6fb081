// Runs tests/engine/llama_cpp_engine.mjs (llama.cpp through npm's node-llama-cpp) in `mode`
// ("logprobs" or "speed") on `request`, for the reference test and the benchmark alike. The
// request goes to DIR/llama_request.json, node's output to DIR/llama_cpp.log. Returns the one
// JSON object the script prints; throws std::runtime_error with the log when it fails or prints
// none.
#pragma once

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>

#include "tests/support/process.h"

namespace ooze::testing {

inline nlohmann::json run_llama_cpp_engine(const std::string& mode, const nlohmann::json& request,
                                           const std::string& dir) {
  const std::string request_file = dir + "/llama_request.json";
  std::ofstream(request_file) << request.dump();
  const std::filesystem::path script =
      std::filesystem::path(__FILE__).parent_path().parent_path() / "engine/llama_cpp_engine.mjs";
  Process node({"/usr/bin/env", "node", script.string(), mode, request_file}, {},
               dir + "/llama_cpp.log");
  const ExitStatus status = node.wait(std::chrono::minutes(30));
  const std::string output = node.output();
  if (!status.exited || status.code != 0) {
    throw std::runtime_error("llama_cpp_engine.mjs " + mode + ": " + status.describe() + "\n" +
                             output);
  }
  // The log holds node's stderr too; the answer is the line that is a JSON object.
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind('{', 0) == 0) return nlohmann::json::parse(line);
  }
  throw std::runtime_error("llama_cpp_engine.mjs " + mode + " printed no result:\n" + output);
}

}  // namespace ooze::testing
