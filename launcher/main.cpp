// The `ooze` command line.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "actors/runtime.h"
#include "core/error.h"
#include "core/load_time_settings.h"
#include "core/logging.h"
#include "launcher/commands.h"
#include "launcher/job_restarts.h"
#include "launcher/model_init_command.h"
#include "launcher/train_plan.h"

namespace {

// Once the job is stopping (a signal, or an error that ends it), engines and ranks go away because
// the stop takes them away: the router's retries and the rollout's failed aborts that would report
// it are noise after the one line that says why the job stops. Errors still print.
void quiet_while_stopping() { ooze::set_log_level(ooze::LogLevel::ERROR); }

// Ctrl-C (SIGINT) and SIGTERM stop a command that starts actors as a whole: one thread waits for
// either (blocked here, before any thread starts, so that no other thread takes them; workers
// unblock them), stops the actor runtime (workers killed and reaped, a cluster's head told to
// release this driver's actors) and exits with 128 + the signal, as a shell reports a process
// the signal ended. It exits from that thread instead of unwinding the command, which may be
// blocked in a call nothing will answer any more; what a run keeps is on disk already (a
// checkpoint counts only once its tracker names it, so one cut short leaves the previous one).
void stop_on_signals(const std::string& command) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  // A SIGINT ignored from the start (a script's background job) stays ignored, as the shell
  // meant; the workers do not see Ctrl-C either way (each leads a process group of its own).
  struct sigaction sigint {};
  if (sigaction(SIGINT, nullptr, &sigint) == 0 && sigint.sa_handler != SIG_IGN) {
    sigaddset(&signals, SIGINT);
  }
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::thread([signals, command] {
    int signal = 0;
    if (sigwait(&signals, &signal) != 0) return;
    std::fprintf(stderr, "ooze %s: interrupted: stopping its actors (%s)\n", command.c_str(),
                 signal == SIGINT ? "SIGINT" : "SIGTERM");
    quiet_while_stopping();
    ooze::actors::shutdown_before_exit();
    std::fprintf(stderr, "ooze %s: stopped\n", command.c_str());
    std::fflush(nullptr);
    _exit(128 + signal);
  }).detach();
}

// A command that failed: its error, then the actors that died (the likely cause when the error is
// only an echo of the death: a peer's broken collective, an engine's refused connection), then
// the runtime's shutdown, so that no worker outlives the driver. A command leaves its runtime
// running when it throws: shut down, the runtime would no longer know of the deaths.
int fail(const std::string& command, const std::string& message) {
  std::cerr << "ooze " << command << ": " << message << std::endl;
  quiet_while_stopping();
  ooze::launcher::report_dead_actors(
      command, message, ooze::actors::dead_actors(ooze::launcher::kDeathSettle), std::cerr);
  ooze::actors::shutdown();
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  ooze::start_with_load_time_settings(argv);  // first: it may start this program again
  // A write past the file-size limit (`ulimit -f`, which some batch systems set) then fails with
  // EFBIG, and the error names the file and the bytes it needed, instead of the signal killing
  // the process that wrote it. Workers start from this program and keep the disposition.
  signal(SIGXFSZ, SIG_IGN);
  // Each HTTP connection, actor socket and checkpoint file is a descriptor, and distributions
  // still default to a soft limit of 1,024 (a server with a thousand clients would refuse the
  // next): take the hard limit, as SGLang does.
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  // Actors spawned by `ooze` itself (the trainer, engines) run in workers started from this
  // program: such a process serves its actor here and never returns.
  ooze::actors::run_worker_if_requested();
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    std::cout << ooze::launcher::overall_usage();
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (command == "train") stop_on_signals(command);
  try {
    if (command == "model") return ooze::launcher::run_model_command(rest);
    if (command == "config-help")
      return ooze::launcher::run_config_help(rest, std::cout, std::cerr);
    if (const ooze::launcher::Command* found = ooze::launcher::find_command(command)) {
      return found->run(rest);
    }
  } catch (const std::exception& e) {
    return fail(command, e.what());
  } catch (...) {
    return fail(command, "failed with an exception that is not a std::exception");
  }
  const std::string nearest = ooze::launcher::nearest_command(command);
  std::cerr << "ooze: unknown command '" << command << "'"
            << (nearest.empty() ? "" : "; did you mean '" + nearest + "'?") << "\n\n"
            << ooze::launcher::overall_usage();
  return 2;
}
