#include "launcher/foundation_demo.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <thread>

#include "comm/process_group.h"
#include "comm/tcp_store.h"
#include "core/config.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/metrics.h"
#include "core/safetensors.h"
#include "core/timer.h"
#include "launcher/foundation_demo_config.h"

namespace ooze {
namespace launcher {
namespace {

using std::chrono::milliseconds;

// The regression problem every rank agrees on: y = X w* + b* + noise. Each step draws a fresh
// global batch from (seed, step), so all ranks see the same data and each takes its slice.
struct Problem {
  at::Tensor true_weight;  // [feature_dim]
  double true_bias;
};

Problem make_problem(int64_t seed, int64_t feature_dim) {
  auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(seed));
  return Problem{at::randn({feature_dim}, gen, at::kDouble), 0.5};
}

std::pair<at::Tensor, at::Tensor> global_batch(const Problem& problem, int64_t seed, int64_t step,
                                               int64_t batch) {
  auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(seed * 1000003 + step + 1));
  at::Tensor x = at::randn({batch, problem.true_weight.numel()}, gen, at::kDouble);
  at::Tensor noise = at::randn({batch}, gen, at::kDouble) * 0.01;
  at::Tensor y = at::mv(x, problem.true_weight) + problem.true_bias + noise;
  return {x.to(at::kFloat), y.to(at::kFloat)};
}

std::string checkpoint_dir(const std::string& output_dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "iter_%07lld", static_cast<long long>(step));
  return output_dir + "/checkpoints/" + name;
}

int wait_for_ranks(std::vector<pid_t>& pids, milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int failures = 0;
  size_t remaining = pids.size();
  while (remaining > 0) {
    for (pid_t& pid : pids) {
      if (pid <= 0) continue;
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) != pid) continue;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        ++failures;
        // One rank failing dooms the rest: stop them instead of waiting for their timeouts.
        for (pid_t other : pids) {
          if (other > 0 && other != pid) ::kill(other, SIGTERM);
        }
      }
      pid = 0;
      --remaining;
    }
    if (remaining > 0 && std::chrono::steady_clock::now() > deadline) {
      for (pid_t pid : pids) {
        if (pid > 0) ::kill(pid, SIGKILL);
      }
      OOZE_LOG(ERROR) << "ranks did not finish within " << timeout.count() / 1000 << " s";
      return 1;
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace

int run_foundation_demo(const std::string& self_exe, const std::vector<std::string>& args) {
  std::optional<Config> loaded = load_config_from_command_line(foundation_demo_schema(), args);
  if (!loaded) {
    std::cout << "usage: ooze demo [--config FILE] [--FIELD VALUE ...]\n\n"
              << foundation_demo_schema().help();
    return 0;
  }
  const Config& config = *loaded;
  set_log_level(parse_log_level(config.get<std::string>("log_level")));
  set_log_prefix("driver");
  const std::string output_dir = config.get<std::string>("output_dir");
  const int world = static_cast<int>(config.get<int64_t>("world_size"));

  std::cout << "ooze demo: the RL loop is not built yet, so this runs the foundation end to end:\n"
               "  config -> "
            << world
            << " rank processes -> Gloo all-reduce of gradients ->\n"
               "  metrics JSONL -> safetensors checkpoints (data-parallel linear regression)\n\n"
            << config.describe() << "\n";
  std::cout.flush();  // before the ranks start writing to the same terminal
  config.save_effective_config(output_dir);
  const std::string config_file = output_dir + "/config.json";
  std::remove((output_dir + "/metrics.jsonl").c_str());

  // The driver hosts the rendezvous store (as torchrun's agent does); ranks connect to it.
  comm::TcpStoreServer store("127.0.0.1", 0);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    pid_t pid = ::fork();
    if (pid < 0) throw Error("fork failed while starting rank " + std::to_string(rank));
    if (pid == 0) {
      ::setenv("OMP_NUM_THREADS", "1", 1);  // one intra-op thread per rank process
      std::string rank_text = std::to_string(rank), port_text = std::to_string(store.port());
      ::execl(self_exe.c_str(), self_exe.c_str(), "demo-rank", rank_text.c_str(), port_text.c_str(),
              config_file.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  const milliseconds timeout = comm::ProcessGroupOptions::from_config(config).timeout();
  if (wait_for_ranks(pids, timeout * 2) != 0) {
    OOZE_LOG(ERROR) << "the demo failed: see the rank logs above";
    return 1;
  }

  // Read back what the ranks wrote, as a user would.
  std::ifstream metrics(output_dir + "/metrics.jsonl");
  std::string line, first, last;
  while (std::getline(metrics, line)) {
    if (first.empty()) first = line;
    last = line;
  }
  auto first_loss = nlohmann::json::parse(first).at("loss").get<double>();
  auto last_loss = nlohmann::json::parse(last).at("loss").get<double>();
  const std::string final_dir = checkpoint_dir(output_dir, config.get<int64_t>("num_steps"));
  ShardedSafetensors checkpoint = ShardedSafetensors::open(final_dir);
  std::cout << "\nloss " << first_loss << " -> " << last_loss << " over "
            << config.get<int64_t>("num_steps") << " steps\n"
            << "metrics:    " << output_dir << "/metrics.jsonl\n"
            << "checkpoint: " << final_dir << " (";
  for (const auto& name : checkpoint.names()) {
    std::cout << name << " " << at::toString(checkpoint.tensor(name).scalar_type())
              << checkpoint.tensor(name).sizes() << " ";
  }
  std::cout << ")\nconfig:     " << config_file << "\n";
  if (!(last_loss < first_loss)) {
    OOZE_LOG(ERROR) << "the loss did not fall";
    return 1;
  }
  return 0;
}

int run_foundation_demo_rank(const std::vector<std::string>& args) {
  if (args.size() != 3) throw ConfigError("usage: ooze demo-rank RANK STORE_PORT CONFIG_JSON");
  const int rank = std::stoi(args[0]);
  const int port = std::stoi(args[1]);
  Config config = load_config(foundation_demo_schema(), args[2], {});
  set_log_level(parse_log_level(config.get<std::string>("log_level")));
  set_log_prefix("rank=" + std::to_string(rank));
  at::set_num_threads(1);

  const int world = static_cast<int>(config.get<int64_t>("world_size"));
  const int64_t seed = config.get<int64_t>("seed");
  const int64_t dim = config.get<int64_t>("feature_dim");
  const int64_t steps = config.get<int64_t>("num_steps");
  const int64_t global_batch_size = config.get<int64_t>("global_batch_size");
  const int64_t micro_batch_size = config.get<int64_t>("micro_batch_size");
  const int64_t save_interval = config.get<int64_t>("save_interval");
  const double lr = config.get<double>("lr");
  const std::string output_dir = config.get<std::string>("output_dir");
  const comm::ProcessGroupOptions group = comm::ProcessGroupOptions::from_config(config);

  auto store = std::make_shared<comm::TcpStore>("127.0.0.1", port, rank, false, group.timeout());
  auto dp = comm::init_process_group(store, rank, world, "dp", at::kCPU, group);
  OOZE_LOG(INFO) << "joined data-parallel group of " << world;

  const Problem problem = make_problem(seed, dim);
  at::Tensor weight = at::zeros({dim});
  at::Tensor bias = at::zeros({1});
  std::unique_ptr<MetricsSink> metrics;
  if (rank == 0) metrics = std::make_unique<MetricsSink>(output_dir + "/metrics.jsonl");

  const int64_t per_rank = global_batch_size / world;
  for (int64_t step = 1; step <= steps; ++step) {
    Timer step_timer;
    auto batch = global_batch(problem, seed, step, global_batch_size);
    at::Tensor x = batch.first.narrow(0, rank * per_rank, per_rank);
    at::Tensor y = batch.second.narrow(0, rank * per_rank, per_rank);

    // Sums over this rank's micro-batches: d/dw, d/db of sum((xw + b - y)^2), and the loss.
    // One all-reduce of the packed sums, divided by the global batch, gives the gradient of the
    // mean loss: the same whatever world_size and micro_batch_size are.
    at::Tensor sums = at::zeros({dim + 2});
    for (int64_t start = 0; start < per_rank; start += micro_batch_size) {
      at::Tensor xm = x.narrow(0, start, micro_batch_size);
      at::Tensor err = at::mv(xm, weight) + bias - y.narrow(0, start, micro_batch_size);
      sums.narrow(0, 0, dim).add_(at::mv(xm.t(), err), 2.0);
      sums.narrow(0, dim, 1).add_(err.sum() * 2.0);
      sums.narrow(0, dim + 1, 1).add_(err.pow(2).sum());
    }
    dp->all_reduce(sums, comm::ReduceOp::SUM);
    sums.div_(static_cast<double>(global_batch_size));
    at::Tensor grad = sums.narrow(0, 0, dim + 1);
    const double loss = sums[dim + 1].item<double>();
    const double grad_norm = grad.norm().item<double>();
    weight.sub_(grad.narrow(0, 0, dim), lr);
    bias.sub_(grad.narrow(0, dim, 1), lr);

    const bool save = step == steps || (save_interval > 0 && step % save_interval == 0);
    if (save && rank == 0) {
      save_sharded_safetensors(checkpoint_dir(output_dir, step),
                               {{"weight", weight}, {"bias", bias}}, 512ull << 20,
                               {{"step", std::to_string(step)}});
    }
    if (rank == 0) {
      const double seconds = step_timer.elapsed();
      metrics->log(step, {{"loss", loss},
                          {"grad_norm", grad_norm},
                          {"lr", lr},
                          {"step_time", seconds},
                          {"samples_per_second", global_batch_size / seconds}});
      if (step == 1 || step % 10 == 0 || step == steps) {
        OOZE_LOG(INFO) << "step " << step << "/" << steps << " loss " << loss << " grad_norm "
                       << grad_norm;
      }
    }
  }

  // Data parallelism is only right if every replica ended bit-identical.
  at::Tensor mine = at::cat({weight, bias});
  at::Tensor all = at::empty({world * mine.numel()});
  dp->all_gather(all, mine);
  for (int r = 0; r < world; ++r) {
    if (!at::equal(all.narrow(0, r * mine.numel(), mine.numel()), mine)) {
      OOZE_LOG(ERROR) << "replica of rank " << r << " differs from this rank's";
      return 1;
    }
  }
  double distance = (weight.to(at::kDouble) - problem.true_weight).norm().item<double>();
  OOZE_LOG(INFO) << "replicas identical; |w - w*| = " << distance;
  dp->barrier();
  return 0;
}

}  // namespace launcher
}  // namespace ooze
