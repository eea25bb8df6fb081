// Running gnuplot for `ooze plot`: the program on a script file, its complaints turned into
// errors that say what to do.
#pragma once

#include <string>

namespace ooze::launcher {

// Runs `program` (looked up on PATH unless it holds a '/') with `script_path` as its standard
// input. Throws Error when gnuplot is missing (install it with scripts/install-deps.sh) or
// fails (with the end of what it printed).
void run_gnuplot(const std::string& program, const std::string& script_path);

}  // namespace ooze::launcher
