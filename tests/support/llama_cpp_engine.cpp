#include "tests/support/llama_cpp_engine.h"

#include <chrono>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "tests/support/process.h"

namespace ooze::testing {

nlohmann::json run_llama_cpp_engine(const std::string& mode, const nlohmann::json& request,
                                    const std::string& dir) {
  const std::string request_file = dir + "/llama_request.json";
  std::ofstream(request_file) << request.dump();
  // Not __FILE__: ccache's base directory turns the include path, and so a header's __FILE__,
  // relative to the build folder.
  const std::string script = std::string(OOZE_SOURCE_DIR) + "/tests/engine/llama_cpp_engine.mjs";
  Process node({"/usr/bin/env", "node", script, mode, request_file}, {}, dir + "/llama_cpp.log");
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
