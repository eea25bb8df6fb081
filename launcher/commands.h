// Every `ooze` command in one table: its name, usage, flags and entry point. main() dispatches
// through it, `ooze help` and `ooze config-help` list it, each command's --help prints its
// entry, and tests/e2e/docs_commands_test checks the docs' command lines against its schemas.
#pragma once

#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "core/config.h"

namespace ooze::launcher {

struct Command {
  std::string name;     // "train", "model init"
  std::string usage;    // "usage: ooze train --hf-checkpoint DIR ... [flags]", one or more lines
  std::string summary;  // what it does, for `ooze help`
  // Its flags, as its parser takes them.
  std::function<const ConfigSchema&()> schema = {};
  // Runs it on the arguments after its name; returns the exit code.
  std::function<int(const std::vector<std::string>&)> run = {};
};

const std::vector<Command>& commands();

// nullptr when there is no such command.
const Command* find_command(const std::string& name);

// The command nearest to a misspelt `name` ("trian" -> "train"), or "" when none is close.
std::string nearest_command(const std::string& name);

// What `ooze NAME --help` and `ooze config-help NAME` print: the usage, then every flag.
std::string command_help(const std::string& name);

// `ooze help`.
std::string overall_usage();

// `ooze config-help [COMMAND]`: every command's help, or one's ("model init" or "model-init").
int run_config_help(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace ooze::launcher
