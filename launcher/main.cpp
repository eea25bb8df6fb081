// The `ooze` command line.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "actors/runtime.h"
#include "core/error.h"
#include "core/logging.h"
#include "launcher/cluster_command.h"
#include "launcher/job_restarts.h"
#include "launcher/model_init_command.h"
#include "launcher/plot_command.h"
#include "launcher/reward_command.h"
#include "launcher/rollout_command.h"
#include "launcher/router_command.h"
#include "launcher/serve_command.h"
#include "launcher/tokenize_command.h"
#include "launcher/train_command.h"
#include "launcher/train_plan.h"

namespace {

const char* kUsage =
    "usage: ooze COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  model init --arch qwen3|qwen2|llama --hidden-size N --layers N ... --out DIR\n"
    "                 write a randomly initialised model in Hugging Face layout\n"
    "  tokenize --tokenizer DIR [--chat-template [NAME]] [--decode]\n"
    "                 JSON lines on stdin ({\"text\"} or {\"messages\"}) -> {\"ids\"} on stdout\n"
    "  serve --model DIR [--host 127.0.0.1] [--port 30000] [--api-key KEY] [--help]\n"
    "                 serve a rollout engine over HTTP (SGLang's /generate and the OpenAI API)\n"
    "  router --engine URL [--engine URL ...] [--port 30001] [--help]\n"
    "                 balance requests over several engine servers\n"
    "  reward --rm-type TYPE | --custom-rm-path lib.so:fn [--help]\n"
    "                 score {\"response\", \"label\", \"metadata\"} JSON lines from stdin\n"
    "  train --hf-checkpoint DIR --prompt-data FILE --rm-type TYPE --output-dir OUT [--help]\n"
    "                 the RL loop: rollouts, rewards, training and weight sync, metrics in OUT\n"
    "  rollout --hf-checkpoint DIR --prompt-data FILE --rm-type TYPE [--help]\n"
    "                 rollouts and evaluations without training, metrics as JSON lines\n"
    "  plot OUT [--out DIR] [--keys KEY,KEY,...] [--smoothing W]\n"
    "                 draw OUT/metrics.jsonl with gnuplot: a dashboard PNG and one per metric\n"
    "  start --head [--host IP] [--port P] | start --address HEAD_IP:PORT [--token T]\n"
    "                 start the cluster's head (with a node), or a node joining it\n"
    "  status [--address HEAD_IP:PORT]\n"
    "                 nodes, resources, actors and placement groups of the cluster\n"
    "  stop           stop the services `ooze start` started on this machine\n"
    "  config-help [train|serve|model-init]\n"
    "                 list the config fields of each command (or one), grouped by the module\n"
    "                 that reads them, with flag, type, default and doc\n"
    "  help           show this message\n";

// Each command's fields, grouped by section: the module that declares and reads them.
int config_help(const std::vector<std::string>& args) {
  const std::vector<std::pair<std::string, const ooze::ConfigSchema*>> commands = {
      {"train", &ooze::launcher::train_schema()},
      {"serve", &ooze::launcher::serve_schema()},
      {"model-init", &ooze::launcher::model_init_schema()}};
  bool found = false;
  for (const auto& [name, schema] : commands) {
    if (!args.empty() && args[0] != name) continue;
    std::cout << "ooze " << name << " [--config FILE] [--FIELD VALUE ...]\n\n"
              << schema->help() << "\n";
    found = true;
  }
  if (found) return 0;
  std::cerr << "ooze config-help: no command '" << args[0]
            << "'; one of: train, serve, model-init\n";
  return 2;
}

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
  // Actors spawned by `ooze` itself (the trainer, engines) run in workers started from this
  // program: such a process serves its actor here and never returns.
  ooze::actors::run_worker_if_requested();
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (command == "train") stop_on_signals(command);
  try {
    if (command == "model") return ooze::launcher::run_model_command(rest);
    if (command == "tokenize") return ooze::launcher::run_tokenize_command(rest);
    if (command == "serve") return ooze::launcher::run_serve_command(rest);
    if (command == "router") return ooze::launcher::run_router_command(rest);
    if (command == "reward") return ooze::launcher::run_reward_command(rest, std::cin, std::cout);
    if (command == "train") return ooze::launcher::run_train_command(rest, std::cout);
    if (command == "rollout") return ooze::launcher::run_rollout_command(rest, std::cout);
    if (command == "plot") return ooze::launcher::run_plot_command(rest, std::cout);
    if (command == "start") return ooze::launcher::run_start_command(rest);
    if (command == "status") return ooze::launcher::run_status_command(rest);
    if (command == "stop") return ooze::launcher::run_stop_command(rest);
    if (command == "config-help") return config_help(rest);
  } catch (const std::exception& e) {
    return fail(command, e.what());
  } catch (...) {
    return fail(command, "failed with an exception that is not a std::exception");
  }
  std::cerr << "ooze: unknown command '" << command << "'\n\n" << kUsage;
  return 2;
}
