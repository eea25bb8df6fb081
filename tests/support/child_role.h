// A second process that a test starts from its own executable (one per tests/ folder), for work
// that must happen in another process: mapping memory another process exported, say. A test file
// registers the role at namespace scope; tests/support/test_main.cpp runs it when the program is
// started with the role's flag first:
//
//   const bool kRegistered = ooze::testing::register_child_role("--my-child", run_my_child);
//   Process child({ooze::testing::self_executable(), "--my-child", "arg"}, {}, log);
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ooze::testing {

// The role's body: gets the arguments after the flag, returns the process's exit code.
using ChildRole = std::function<int(const std::vector<std::string>& args)>;

// Registers `role` under `flag`; returns true so that it can initialise a namespace-scope constant.
bool register_child_role(const std::string& flag, ChildRole role);

// When argv[1] is a registered flag, runs that role and returns its exit code.
std::optional<int> run_child_role_if_requested(int argc, char** argv);

// This executable's path (/proc/self/exe).
std::string self_executable();

}  // namespace ooze::testing
