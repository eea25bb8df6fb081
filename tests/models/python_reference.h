// Runs the system Python (/usr/bin/python3, which scripts/install-deps.sh gives Jinja2) as an
// independent reference for the chat-template tests: json.dumps for `tojson`, and Jinja2 for
// the templates themselves.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/support/process.h"

namespace ooze::testing {

// The stdout of `/usr/bin/python3 ARGS` (ARGS as a shell word list, quoted by the caller) given
// `input` on stdin. A test failure, with Python's stderr, when it exits non-zero.
inline std::string run_python_reference(const std::string& args, const std::string& input) {
  const std::string dir = make_temp_dir("python-reference");
  const std::string input_path = dir + "/stdin.json";
  const std::string error_path = dir + "/stderr.txt";
  std::ofstream(input_path, std::ios::binary) << input;
  const std::string command =
      "/usr/bin/python3 " + args + " < '" + input_path + "' 2> '" + error_path + "'";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "cannot run " << command;
    return "";
  }
  std::string output;
  char buffer[4096];
  size_t read;
  while ((read = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, read);
  const int status = pclose(pipe);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::stringstream error;
    error << std::ifstream(error_path).rdbuf();
    ADD_FAILURE() << command << " failed (status " << status << "):\n"
                  << error.str()
                  << "\n(the reference needs /usr/bin/python3 with Jinja2: run "
                     "scripts/install-deps.sh, which installs python3-jinja2)";
  }
  std::filesystem::remove_all(dir);
  return output;
}

}  // namespace ooze::testing
