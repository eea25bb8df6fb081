#include "launcher/rl_placement.h"

#include <cstdlib>

#include "actors/errors.h"
#include "actors/node_agent.h"
#include "actors/runtime.h"
#include "core/error.h"
#include "weight_sync/weight_sync_options.h"

namespace ooze::launcher {
namespace {

std::string cluster_address(const Config& config) {
  const std::string address = config.get<std::string>("address");
  if (!address.empty()) return address;
  const char* from_environment = std::getenv("OOZE_ADDRESS");
  return from_environment != nullptr ? from_environment : "";
}

// Colocated, a rank and an engine share a bundle half and half.
double share_of_bundle(const TrainPlan& plan) {
  return plan.colocate && plan.with_trainers && plan.with_engines() ? 0.5 : 1.0;
}

void start_runtime(const Config& config, const TrainPlan& plan) {
  actors::RuntimeOptions runtime;
  runtime.address = cluster_address(config);
  if (runtime.address.empty()) {
    // This machine alone: its GPUs as they are, and as many CPU slots as the job has bundles
    // (a CPU machine's "GPUs").
    runtime.resources = actors::detect_node_resources();
    runtime.resources["CPU"] = std::max<double>(plan.gpus_needed(), runtime.resources["CPU"]);
    if (runtime.resources.count("GPU") == 0) runtime.resources["CPU"] = plan.gpus_needed();
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

actors::PlacementGroup reserve_bundles(const TrainPlan& plan, const std::string& resource) {
  const std::vector<actors::ResourceSet> bundles(plan.gpus_needed(), {{resource, 1.0}});
  const std::string asked = std::to_string(plan.gpus_needed()) + " bundles of " + resource +
                            " = 1 (trainer: --actor-num-nodes * --actor-num-gpus-per-node = " +
                            std::to_string(plan.world_size) +
                            "; engines: --rollout-num-gpus = " + std::to_string(plan.num_engines) +
                            (plan.colocate ? ", colocated" : ", disaggregated") + ")";
  try {
    actors::PlacementGroup group = actors::PlacementGroup::create(bundles, "PACK");
    group.ready();
    return group;
  } catch (const actors::PlacementError& error) {
    throw ConfigError("the cluster cannot hold this job's " + asked + ": " + error.what() +
                      ". Lower those flags, add nodes (`ooze start --address`), or use "
                      "--colocate");
  }
}

std::vector<actors::ActorHandle<rollout::RolloutEngine>> start_engines(
    const Config& config, const TrainPlan& plan, const actors::PlacementGroup& group,
    const std::string& resource) {
  rollout::EngineOptions engine;
  engine.model_dir = config.get<std::string>("hf_checkpoint");
  engine.max_running_requests = config.get<int64_t>("engine_max_running_requests");
  engine.kv_cache_memory_mb = config.get<int64_t>("engine_kv_cache_memory_mb");
  engine.intra_op_threads = static_cast<int>(config.get<int64_t>("engine_threads"));
  const int first_bundle = plan.with_trainers && !plan.colocate ? plan.world_size : 0;
  std::vector<actors::ActorHandle<rollout::RolloutEngine>> engines;
  for (int e = 0; e < plan.num_engines; ++e) {
    actors::ActorOptions options =
        rollout::rollout_engine_actor_options({{resource, share_of_bundle(plan)}});
    options.placement_group_id = group.id();
    options.bundle_index = group.bundles().at(first_bundle + e).index;
    engines.push_back(actors::spawn<rollout::RolloutEngine>(options, engine));
  }
  return engines;
}

}  // namespace

RlProcesses start_rl_processes(const Config& config, const TrainPlan& plan, const TrainInit& init) {
  start_runtime(config, plan);
  const std::string resource = slot_resource();
  RlProcesses job;
  job.placement = reserve_bundles(plan, resource);

  if (plan.with_trainers) {
    actors::ActorGroupOptions group;
    group.actor.resources = {{resource, share_of_bundle(plan)}};
    group.placement_group = &*job.placement;  // ranks take the first world_size bundles
    group.group_name = init.group_name;
    job.trainers = TrainerGroup::spawn(plan.world_size, group);
    actors::get_all(job.trainers.call_all(&TrainActor::init, init));
  }
  if (plan.with_engines()) {
    job.engines = start_engines(config, plan, *job.placement, resource);
    rollout::RouterOptions router;
    for (const auto& engine : job.engines) {
      router.engine_urls.push_back(
          engine.call(&rollout::RolloutEngine::start_server, std::string(), 0, std::string())
              .get(std::chrono::minutes(10)));
    }
    job.router = std::make_unique<rollout::Router>(router);
  }
  if (plan.with_trainers && plan.with_engines()) {
    RolloutEngineConnection connection;
    connection.engines = job.engines;
    connection.colocate = plan.colocate;
    connection.options = weight_sync::WeightSyncOptions::from_config(config);
    actors::get_all(job.trainers.call_all(&TrainActor::connect_rollout_engines, connection));
  }
  return job;
}

}  // namespace ooze::launcher
