#include "python/interpreter.h"

#include <pybind11/embed.h>
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <mutex>

#include "core/error.h"
#include "python/hook_args.h"

namespace py = pybind11;

namespace ooze::python {
namespace {

std::atomic<bool> started{false};

void check(PyStatus status, PyConfig& config, const char* what) {
  if (!PyStatus_Exception(status)) return;
  PyConfig_Clear(&config);
  throw Error(std::string("cannot start Python (") + OOZE_PYTHON_EXECUTABLE + "): " + what + ": " +
              (status.err_msg ? status.err_msg : "unknown error"));
}

void start() {
  // Python's signal module takes SIGINT over when it is first imported (asyncio imports it),
  // install_signal_handlers = 0 notwithstanding; Ctrl-C stays ooze's: what it was before Python
  // is put back once the module is in.
  struct sigaction ooze_sigint;
  sigaction(SIGINT, nullptr, &ooze_sigint);
  PyConfig config;
  PyConfig_InitPythonConfig(&config);
  config.install_signal_handlers = 0;
  config.buffered_stdio = 0;
  config.parse_argv = 0;
  // The prefix (standard library, site-packages) is found from the executable, not from ooze.
  check(PyConfig_SetBytesString(&config, &config.program_name, OOZE_PYTHON_EXECUTABLE), config,
        "program name");
  check(PyConfig_SetBytesString(&config, &config.executable, OOZE_PYTHON_EXECUTABLE), config,
        "executable");
  try {
    py::initialize_interpreter(&config, 0, nullptr, /*add_program_dir_to_path=*/false);
  } catch (const std::exception& error) {
    throw Error(std::string("cannot start Python (") + OOZE_PYTHON_EXECUTABLE +
                "): " + error.what());
  }
  {
    py::module_ sys = py::module_::import("sys");
    py::list path = sys.attr("path");
    path.insert(0, package_dir());
    path.insert(0, std::filesystem::current_path().string());
    // What hooks print joins ooze's own log lines on stderr: stdout may carry answers
    // (`ooze reward` writes JSON lines there).
    sys.attr("stdout") = sys.attr("stderr");
    py::module_::import("signal");
  }
  sigaction(SIGINT, &ooze_sigint, nullptr);
  started = true;
  PyEval_SaveThread();  // from now on every thread, this one included, takes the GIL to call in
  apply_hook_args();
}

}  // namespace

void ensure_started() {
  static std::once_flag once;
  std::call_once(once, start);
}

bool is_started() { return started; }

const char* executable() { return OOZE_PYTHON_EXECUTABLE; }

const char* package_dir() { return OOZE_PYTHON_PACKAGE_DIR; }

}  // namespace ooze::python
