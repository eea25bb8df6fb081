#include "launcher/commands.h"

#include <algorithm>
#include <iostream>
#include <sstream>
#include <utility>

#include "core/config_spelling.h"
#include "launcher/cluster_command.h"
#include "launcher/model_gguf_command.h"
#include "launcher/model_init_command.h"
#include "launcher/plot_command.h"
#include "launcher/reward_command.h"
#include "launcher/rollout_command.h"
#include "launcher/router_command.h"
#include "launcher/serve_command.h"
#include "launcher/tokenize_command.h"
#include "launcher/train_command.h"
#include "launcher/train_plan.h"

namespace ooze::launcher {
namespace {

// The commands that are not in the table: they take no flags of their own.
const std::vector<std::pair<std::string, std::string>> kOtherCommands = {
    {"config-help [COMMAND]",
     "list every flag of each command (or one) by module, with type, default and doc"},
    {"help", "show this message"}};

std::vector<Command> build_commands() {
  return {
      {"model init",
       "usage: ooze model init --arch qwen3|qwen2|llama --hidden-size N --layers N --heads N\n"
       "                       --kv-heads N [--head-dim N] [--intermediate-size N] "
       "[--vocab-size N]\n"
       "                       [--tie-embeddings] [--dtype float32|bfloat16] [--rope-theta X]\n"
       "                       --tokenizer qwen3|byte [--tokenizer-dir DIR] --out DIR [--seed N]",
       "write a randomly initialised model in Hugging Face layout", model_init_schema,
       [](const std::vector<std::string>& args) {
         std::vector<std::string> with_subcommand = {"init"};
         with_subcommand.insert(with_subcommand.end(), args.begin(), args.end());
         return run_model_command(with_subcommand);
       }},
      {"model gguf", "usage: ooze model gguf --model DIR --out FILE.gguf [--outtype f32|f16]",
       "write a Qwen3/Qwen2 model directory as a GGUF file for llama.cpp", model_gguf_schema,
       [](const std::vector<std::string>& args) { return run_model_gguf(args); }},
      {"tokenize",
       "usage: ooze tokenize --tokenizer DIR [--chat-template [NAME]] [--add-generation-prompt]\n"
       "                     [--no-thinking] [--decode] [--skip-special-tokens]",
       "JSON lines on stdin ({\"text\"} or {\"messages\"}) -> {\"ids\"}, or back (--decode)",
       tokenize_schema, run_tokenize_command},
      {"serve",
       "usage: ooze serve --model DIR [--host 127.0.0.1] [--port 30000] [--api-key KEY] [flags]",
       "serve a rollout engine over HTTP (SGLang's /generate, the OpenAI API)", serve_schema,
       run_serve_command},
      {"router", "usage: ooze router --engine URL [--engine URL ...] [--port 30001] [flags]",
       "balance requests over several engine servers", router_schema, run_router_command},
      {"reward", "usage: ooze reward --rm-type TYPE | --custom-rm-path PATH [flags] < lines.jsonl",
       "score {\"response\", \"label\", \"metadata\"} JSON lines from stdin", reward_schema,
       [](const std::vector<std::string>& args) {
         return run_reward_command(args, std::cin, std::cout);
       }},
      {"train",
       "usage: ooze train --hf-checkpoint DIR --prompt-data FILE --rm-type TYPE "
       "[--output-dir OUT] [flags]",
       "the RL loop: rollouts, rewards, training and weight sync, metrics in OUT", train_schema,
       [](const std::vector<std::string>& args) { return run_train_command(args, std::cout); }},
      {"rollout",
       "usage: ooze rollout --hf-checkpoint DIR --prompt-data FILE --rm-type TYPE [flags]",
       "rollouts and evaluations without training, metrics as JSON lines", rollout_schema,
       [](const std::vector<std::string>& args) { return run_rollout_command(args, std::cout); }},
      {"plot", "usage: ooze plot OUT [--out DIR] [--keys KEY,KEY,...]",
       "draw OUT/metrics.jsonl's metrics as PNGs with gnuplot", plot_schema,
       [](const std::vector<std::string>& args) { return run_plot_command(args, std::cout); }},
      {"start",
       "usage: ooze start --head [--host IP] [--port P] [flags]\n"
       "       ooze start --address HEAD_IP:PORT [--token T] [flags]",
       "start the cluster's head (with a node), or a node joining it", start_schema,
       run_start_command},
      {"status", "usage: ooze status [--address HEAD_IP:PORT] [--token T]",
       "nodes, resources, actors and placement groups of the cluster", status_schema,
       run_status_command},
      {"stop", "usage: ooze stop", "stop the services `ooze start` started on this machine",
       stop_schema, run_stop_command},
  };
}

}  // namespace

const std::vector<Command>& commands() {
  static const std::vector<Command> table = build_commands();
  return table;
}

const Command* find_command(const std::string& name) {
  const std::string spelled = name == "model-init" ? "model init" : name;
  for (const Command& command : commands()) {
    if (command.name == spelled) return &command;
  }
  return nullptr;
}

std::string nearest_command(const std::string& name) {
  std::vector<std::string> names = {"model", "config-help", "help"};
  for (const Command& command : commands()) {
    if (command.name.find(' ') == std::string::npos) names.push_back(command.name);
  }
  // Close: two edits at most, or a third of a long name ("trian", "serv", "rolout").
  std::string best;
  size_t best_distance = std::string::npos;
  for (const std::string& candidate : names) {
    const size_t distance = config_spelling::edit_distance(name, candidate);
    const size_t threshold = std::max<size_t>(2, std::max(name.size(), candidate.size()) / 3);
    if (distance <= threshold && distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

std::string command_help(const std::string& name) {
  const Command* command = find_command(name);
  if (command == nullptr) return "";
  return command->usage + "\n" + command->summary + "\n\n" + command->schema().help();
}

std::string overall_usage() {
  std::ostringstream out;
  out << "usage: ooze COMMAND [ARGS]\n\ncommands (`ooze COMMAND --help` lists a command's "
         "flags):\n";
  auto entry = [&](const std::string& name, const std::string& summary) {
    out << "  " << name;
    if (name.size() < 14) {
      out << std::string(15 - name.size(), ' ');
    } else {
      out << "\n" << std::string(17, ' ');
    }
    out << summary << "\n";
  };
  for (const Command& command : commands()) entry(command.name, command.summary);
  for (const auto& [name, summary] : kOtherCommands) entry(name, summary);
  return out.str();
}

int run_config_help(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string wanted;
  for (const std::string& arg : args) wanted += (wanted.empty() ? "" : " ") + arg;
  if (wanted.empty()) {
    for (const Command& command : commands()) {
      out << "ooze " << command.name << "\n"
          << std::string(5 + command.name.size(), '=') << "\n"
          << command_help(command.name) << "\n";
    }
    return 0;
  }
  if (find_command(wanted) != nullptr) {
    out << command_help(wanted);
    return 0;
  }
  std::string names;
  for (const Command& command : commands()) names += (names.empty() ? "" : ", ") + command.name;
  const std::string nearest = nearest_command(wanted);
  err << "ooze config-help: no command '" << wanted << "'"
      << (nearest.empty() ? "" : "; did you mean '" + nearest + "'?") << "\none of: " << names
      << "\n";
  return 2;
}

}  // namespace ooze::launcher
