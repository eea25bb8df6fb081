// The one CPython interpreter of an ooze process, started the first time a hook needs it and
// never finalized (hooks' modules, threads and event loop live as long as the process).
//
//   python::ensure_started();
//   { pybind11::gil_scoped_acquire gil; ... }   // in python/*.cpp only
//
// It is the interpreter CMake found (Debian's /usr/bin/python3 by default), configured as
// `python3` itself would be, PYTHONPATH and site-packages included, with two differences:
// ooze keeps SIGINT/SIGTERM (the launcher waits on them), and what a hook prints goes, unbuffered,
// to stderr with ooze's own log lines, so it reaches the run's log at once even if the process
// is killed, and never mixes into answers on stdout. sys.path
// starts with the working directory (where Slime resolves `package.module.function`), then
// ooze's own package. The starting thread releases the GIL: every caller takes it.
#pragma once

#include <string>

namespace ooze::python {

// Starts the interpreter once per process; later calls return at once. Thread-safe.
// Throws Error when CPython cannot start.
void ensure_started();
bool is_started();

// The Python executable hooks run in, as `sys.executable` reports it (so that a hook's
// multiprocessing spawns python3, not ooze).
const char* executable();
// The directory holding ooze's Python package (python/ in the source tree): on PYTHONPATH, plain
// python3 imports `ooze` too, to try a hook outside a run.
const char* package_dir();

}  // namespace ooze::python
