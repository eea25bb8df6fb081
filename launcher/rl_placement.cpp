#include "launcher/rl_placement.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>

#include "actors/errors.h"
#include "actors/node_agent.h"
#include "actors/runtime.h"
#include "algorithms/algorithm_options.h"
#include "algorithms/value_loss.h"
#include "core/error.h"
#include "core/logging.h"
#include "launcher/cluster_command.h"
#include "models/lora.h"
#include "python/hook_path.h"
#include "rollout/rollout_options.h"
#include "trainer/weight_sync_options.h"

namespace ooze::launcher {
namespace {

// The cluster to join, and where it was named: --address, else $OOZE_ADDRESS; empty: none.
struct ClusterAddress {
  std::string address;
  std::string named_by;
};

ClusterAddress cluster_address(const Config& config) {
  const std::string address = config.get<std::string>("address");
  if (!address.empty()) return {address, "--address " + address};
  const char* from_environment = std::getenv("OOZE_ADDRESS");
  if (from_environment == nullptr || *from_environment == '\0') return {};
  return {from_environment, std::string("$OOZE_ADDRESS ") + from_environment};
}

// Colocated, a rank and an engine share a bundle half and half.
double share_of_bundle(const TrainPlan& plan) {
  return plan.colocate && plan.with_trainers && plan.with_engines() ? 0.5 : 1.0;
}

void start_runtime(const Config& config, const TrainPlan& plan) {
  actors::RuntimeOptions runtime;
  const ClusterAddress cluster = cluster_address(config);
  runtime.address = cluster.address;
  if (!runtime.address.empty()) {
    // The token as `ooze start` and `ooze status` find it on this machine.
    runtime.token = find_cluster_token();
    if (runtime.token.empty()) {
      throw ConfigError(cluster.named_by +
                        " joins a cluster, which needs its token: set OOZE_CLUSTER_TOKEN to the "
                        "one `ooze start --head` printed, or run where `ooze start` saved it "
                        "($OOZE_CLUSTER_DIR/token, default /tmp/ooze/cluster/token)");
    }
  } else {
    // This machine alone: its GPUs as they are; without any, as many CPU slots as the job has
    // bundles (a CPU machine's "GPUs").
    runtime.resources = actors::detect_node_resources();
    if (runtime.resources.count("GPU") == 0) {
      runtime.resources["CPU"] =
          plan.gpus_needed() + (plan.with_critic ? plan.critic_world_size : 0);
    }
  }
  actors::init(runtime);
}

// GPUs when the cluster has any, else CPU slots.
std::string slot_resource() {
  for (const actors::NodeInfo& node : actors::cluster_status().nodes) {
    auto gpus = node.total.find("GPU");
    if (node.alive && gpus != node.total.end() && gpus->second > 0) return "GPU";
  }
  return "CPU";
}

// How long a job that fits the cluster waits for other jobs to free what it needs.
constexpr std::chrono::seconds kWaitForBusyCluster{60};

// The trainer's and the engines' bundles.
std::string what_the_job_asks(const TrainPlan& plan, const std::string& resource) {
  return std::to_string(plan.gpus_needed()) + " bundles of " + resource +
         " = 1 (trainer: --actor-num-nodes * --actor-num-gpus-per-node = " +
         std::to_string(plan.world_size) +
         "; engines: --rollout-num-gpus = " + std::to_string(plan.num_engines) +
         (plan.colocate ? ", colocated" : ", disaggregated") +
         (plan.num_teacher_engines > 0 ? "; teacher engines: --opd-teacher-num-engines = " +
                                             std::to_string(plan.num_teacher_engines)
                                       : "") +
         ")";
}

// The critic's bundles.
std::string what_the_critic_asks(const TrainPlan& plan, const std::string& resource) {
  return std::to_string(plan.critic_world_size) + " bundles of " + resource +
         " = 1 (critic: --critic-num-nodes * --critic-num-gpus-per-node)";
}

actors::PlacementGroup reserve_bundles(int count, const std::string& asked,
                                       const std::string& resource, const std::string& address) {
  const std::vector<actors::ResourceSet> bundles(count, {{resource, 1.0}});
  const std::string cluster = address.empty() ? "this machine" : "the cluster at " + address;
  std::optional<actors::PlacementGroup> group;
  try {
    // Refused at once when the cluster's nodes could not hold it even with nothing else running.
    group = actors::PlacementGroup::create(bundles, "PACK");
  } catch (const actors::PlacementError& error) {
    const std::string more = address.empty()
                                 ? "run on a cluster (`ooze start` on each machine, then --address)"
                                 : "add nodes (`ooze start --address` on more machines)";
    throw ConfigError(cluster + " cannot hold this job's " + asked + ": " + error.what() +
                      ". Lower those flags, use --colocate, or " + more);
  }
  try {
    group->ready(kWaitForBusyCluster);  // other jobs hold what it needs
  } catch (const actors::PlacementError& error) {
    throw ConfigError(cluster + " stayed too busy for this job's " + asked + " for " +
                      std::to_string(kWaitForBusyCluster.count()) + " s: " + error.what() +
                      ". Wait for other jobs to end (`ooze status` lists them) or lower those "
                      "flags");
  }
  return std::move(*group);
}

// Which trainer ranks and engines bundle b (in the group's order) holds.
std::string bundle_roles(const TrainPlan& plan, int b) {
  std::string roles;
  auto add = [&](const std::string& role) { roles += (roles.empty() ? "" : " + ") + role; };
  const int trainer_bundles = plan.with_trainers ? plan.world_size : 0;
  if (b < trainer_bundles) add("rank " + std::to_string(b));
  const int engine = b - plan.first_engine_bundle();
  if (plan.with_engines() && engine >= 0 && engine < plan.num_engines) {
    add("engine " + std::to_string(engine));
  }
  const int teacher = b - plan.first_teacher_bundle();
  if (teacher >= 0 && teacher < plan.num_teacher_engines) {
    add("teacher engine " + std::to_string(teacher));
  }
  return roles;
}

// Where each trainer rank and engine runs, node by node: on a cluster, the machine whose
// session logs hold its output.
void log_placement(const TrainPlan& plan, const actors::PlacementGroup& group) {
  std::vector<std::string> nodes;  // in bundle order
  std::map<std::string, std::string> roles_on;
  for (size_t b = 0; b < group.bundles().size(); ++b) {
    const actors::BundleInfo& bundle = group.bundles()[b];
    const std::string node = bundle.node_address + " (node " + bundle.node_id + ")";
    if (roles_on.count(node) == 0) nodes.push_back(node);
    std::string& roles = roles_on[node];
    roles += (roles.empty() ? "" : ", ") + bundle_roles(plan, static_cast<int>(b));
  }
  std::ostringstream line;
  line << "placed on " << nodes.size() << (nodes.size() == 1 ? " node:" : " nodes:");
  for (const std::string& node : nodes) line << " " << node << ": " << roles_on[node] << ";";
  OOZE_LOG(INFO) << line.str();
}

}  // namespace

trainer::TrainInit policy_init(const Config& config, const TrainPlan& plan) {
  trainer::TrainInit init;
  init.model_dir = config.get<std::string>("hf_checkpoint");
  init.group_name = "train-" + actors::random_id(4);
  init.options =
      trainer::trainer_options_from_config(config, plan.num_rollout * plan.steps_per_rollout);
  init.options.step.policy_loss = algorithms::AlgorithmOptions::from_config(config).policy_loss;
  // The policy's log-probs are those of the distribution the rollouts sampled (greedy: T = 1).
  const double temperature = rollout::RolloutOptions::fields().read(config).sampling.temperature;
  init.options.step.temperature = temperature > 0 ? temperature : 1.0;
  init.reference_model = plan.needs_reference || plan.self_distills;
  init.ref_load = config.get<std::string>("ref_load");
  const algorithms::OpdOptions opd = algorithms::OpdOptions::fields().read(config);
  init.options.step.opd = opd;
  if (opd.use_opd && opd.type == algorithms::OpdType::kTrainer) {
    init.teacher_load = opd.teacher_hf_checkpoint;
  }
  // A Python loss's file is the one this command names, wherever a rank runs; its `args` are the
  // run's flags.
  for (std::string* path : {&init.options.step.custom_loss_function_path,
                            &init.options.step.custom_pg_loss_reducer_function_path,
                            &init.options.step.policy_loss.mismatch.custom_tis_function_path}) {
    *path = python::with_absolute_file(*path);
  }
  if (!init.options.lora.load.empty()) {
    init.options.lora.load = std::filesystem::absolute(init.options.lora.load).string();
  }
  init.hook_args = config.to_json().dump();
  return init;
}

trainer::TrainInit critic_init(const Config& config, const trainer::TrainInit& actor) {
  trainer::TrainInit critic = actor;
  critic.role = trainer::TrainerRole::kCritic;
  critic.group_name = actor.group_name + "-critic";
  const std::string critic_load = config.get<std::string>("critic_load");
  if (!critic_load.empty()) critic.model_dir = critic_load;
  critic.reference_model = false;
  critic.options.lora = {};  // the value head is new: the critic trains in full
  critic.options.step.loss_type = trainer::LossType::kValueLoss;
  critic.options.step.value_loss = algorithms::ValueLossOptions::fields().read(config);
  const double critic_lr = config.get<double>("critic_lr");
  if (critic_lr > 0) critic.options.lr_schedule.lr = critic_lr;
  return critic;
}

actors::ActorHandle<serving::RolloutEngine> spawn_engine(const Config& config,
                                                         const TrainPlan& plan,
                                                         const RlProcesses& job, int e) {
  engine::EngineOptions engine = engine::EngineOptions::launched_engine_fields().read(
      config, engine::launched_engine_defaults());
  engine.model_dir = config.get<std::string>("hf_checkpoint");
  const models::LoraOptions lora = models::LoraOptions::fields().read(config);
  if (lora.enabled() && lora.sync == models::LoraSync::kAdapter) engine.adapter = lora;
  actors::ActorOptions options =
      serving::rollout_engine_actor_options({{job.on_gpus ? "GPU" : "CPU", share_of_bundle(plan)}});
  options.placement_group_id = job.placement->id();
  options.bundle_index = job.placement->bundles().at(plan.first_engine_bundle() + e).index;
  // With --use-fault-tolerance the runtime starts a dead engine again in its bundle (the engine
  // supervisor then serves it and gives it the current weights).
  if (plan.fault_tolerance) {
    options.max_restarts = static_cast<int>(config.get<int64_t>("max_engine_restarts"));
  }
  return actors::spawn<serving::RolloutEngine>(options, engine);
}

// Teacher engine t: the engine's flags on the teacher's model, a bundle of its own.
actors::ActorHandle<serving::RolloutEngine> spawn_teacher_engine(const Config& config,
                                                                 const TrainPlan& plan,
                                                                 const RlProcesses& job, int t) {
  engine::EngineOptions engine = engine::EngineOptions::launched_engine_fields().read(
      config, engine::launched_engine_defaults());
  engine.model_dir = algorithms::OpdOptions::fields().read(config).teacher_hf_checkpoint;
  actors::ActorOptions options =
      serving::rollout_engine_actor_options({{job.on_gpus ? "GPU" : "CPU", 1.0}});
  options.label = "TeacherEngine";
  options.placement_group_id = job.placement->id();
  options.bundle_index = job.placement->bundles().at(plan.first_teacher_bundle() + t).index;
  return actors::spawn<serving::RolloutEngine>(options, engine);
}

std::string serve_engine(const actors::ActorHandle<serving::RolloutEngine>& engine) {
  // The first call waits for the engine to load its model.
  return engine.call(&serving::RolloutEngine::start_server, std::string(), 0, std::string())
      .get(std::chrono::minutes(10));
}

RlProcesses start_rl_processes(const Config& config, const TrainPlan& plan,
                               const trainer::TrainInit& init) {
  const std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  start_runtime(config, plan);
  const std::string resource = slot_resource();
  RlProcesses job;
  job.started = started;
  job.on_gpus = resource == "GPU";
  const std::string address = cluster_address(config).address;
  job.placement =
      reserve_bundles(plan.gpus_needed(), what_the_job_asks(plan, resource), resource, address);
  log_placement(plan, *job.placement);
  if (plan.with_critic) {
    job.critic_placement = reserve_bundles(plan.critic_world_size,
                                           what_the_critic_asks(plan, resource), resource, address);
  }

  if (plan.with_trainers) {
    actors::ActorGroupOptions group;
    group.actor.resources = {{resource, share_of_bundle(plan)}};
    group.placement_group = &*job.placement;  // ranks take the first world_size bundles
    group.group_name = init.group_name;
    job.trainers = trainer::TrainerGroup::spawn(plan.world_size, group);
    actors::get_all(job.trainers.call_all(&trainer::TrainActor::init, init));
  }
  if (plan.with_critic) {
    actors::ActorGroupOptions group;
    group.actor.resources = {{resource, 1.0}};
    group.actor.label = "CriticActor";
    group.placement_group = &*job.critic_placement;
    const trainer::TrainInit critic = critic_init(config, init);
    group.group_name = critic.group_name;
    job.critics = trainer::TrainerGroup::spawn(plan.critic_world_size, group);
    actors::get_all(job.critics.call_all(&trainer::TrainActor::init, critic));
  }
  if (plan.with_engines() || plan.num_teacher_engines > 0) {
    // Every engine, the teacher's too, loads its model at once; then their servers start.
    for (int e = 0; plan.with_engines() && e < plan.num_engines; ++e) {
      job.engines.push_back(spawn_engine(config, plan, job, e));
    }
    for (int t = 0; t < plan.num_teacher_engines; ++t) {
      job.teacher_engines.push_back(spawn_teacher_engine(config, plan, job, t));
    }
  }
  if (plan.with_engines()) {
    serving::RouterOptions router;
    for (const auto& engine : job.engines) router.engine_urls.push_back(serve_engine(engine));
    std::string urls;
    for (const std::string& url : router.engine_urls) urls += " " + url;
    OOZE_LOG(INFO) << "engines serving at" << urls;
    job.router = std::make_shared<serving::Router>(router);
  }
  if (plan.num_teacher_engines > 0) {
    std::string urls;
    for (const auto& engine : job.teacher_engines) {
      job.teacher_urls.push_back(serve_engine(engine));
      urls += " " + job.teacher_urls.back();
    }
    OOZE_LOG(INFO) << "teacher engines ("
                   << algorithms::OpdOptions::fields().read(config).teacher_hf_checkpoint
                   << ") serving at" << urls;
  }
  if (plan.with_trainers && plan.with_engines()) {
    trainer::RolloutEngineConnection connection;
    connection.engines = job.engines;
    connection.colocate = plan.colocate;
    connection.options = trainer::WeightSyncOptions::fields().read(config);
    actors::get_all(
        job.trainers.call_all(&trainer::TrainActor::connect_rollout_engines, connection));
  }
  return job;
}

}  // namespace ooze::launcher
