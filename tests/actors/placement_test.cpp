#include "actors/placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"

namespace ooze::actors {
namespace placement_test {

bool same_node(const NodeCapacity& a, const NodeCapacity& b) {
  return a.node_id == b.node_id && a.address == b.address && a.total == b.total &&
         a.available == b.available && a.gpu_free == b.gpu_free && a.alive == b.alive;
}

bool same_nodes(const std::vector<NodeCapacity>& a, const std::vector<NodeCapacity>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!same_node(a[i], b[i])) return false;
  }
  return true;
}

std::vector<ResourceSet> copies(size_t n, const ResourceSet& bundle) {
  return std::vector<ResourceSet>(n, bundle);
}

std::vector<std::string> node_ids(const PlacementDecision& decision) {
  std::vector<std::string> ids;
  for (const Allocation& allocation : decision.allocations) ids.push_back(allocation.node_id);
  return ids;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

NodeCapacity* find_node(std::vector<NodeCapacity>& nodes, const std::string& id) {
  for (NodeCapacity& node : nodes) {
    if (node.node_id == id) return &node;
  }
  return nullptr;
}

TEST(Placement, StrategyNames) {
  for (const char* name : {"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"}) {
    EXPECT_STREQ(placement_strategy_name(parse_placement_strategy(name)), name);
  }
  EXPECT_EQ(parse_placement_strategy("STRICT_SPREAD"), PlacementStrategy::kStrictSpread);
  try {
    parse_placement_strategy("BALANCED");
    ADD_FAILURE() << "BALANCED was accepted";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "BALANCED")) << e.what();
    EXPECT_TRUE(contains(e.what(), "PACK, SPREAD, STRICT_PACK, STRICT_SPREAD")) << e.what();
  }
}

TEST(Placement, AddressesOrderNumericallyForIpv4) {
  EXPECT_TRUE(address_less("10.0.0.9", "10.0.0.10"));
  EXPECT_FALSE(address_less("10.0.0.10", "10.0.0.9"));
  EXPECT_TRUE(address_less("9.255.0.0", "10.0.0.0"));
  EXPECT_TRUE(address_less("node-a", "node-b"));
  EXPECT_TRUE(address_less("192.168.1.1", "alpha"));  // IPv4 addresses before host names
  EXPECT_FALSE(address_less("alpha", "192.168.1.1"));
  EXPECT_FALSE(address_less("10.0.0.1", "10.0.0.1"));
}

TEST(Placement, PackPutsFourGpuBundlesOnOneNode) {
  // The node with the lower address comes second in the vector: order must come from addresses.
  std::vector<NodeCapacity> nodes = {NodeCapacity::make("b", "10.0.0.2", {{"GPU", 4.0}}),
                                     NodeCapacity::make("a", "10.0.0.1", {{"GPU", 4.0}})};
  PlacementDecision decision =
      place_bundles(nodes, copies(4, {{"GPU", 1.0}}), PlacementStrategy::kPack);
  ASSERT_EQ(decision.outcome, PlacementOutcome::kPlaced) << decision.reason;
  EXPECT_EQ(node_ids(decision), std::vector<std::string>(4, "a"));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(decision.allocations[i].gpu_ids, std::vector<int>{i});
  EXPECT_EQ(nodes[1].gpu_free, std::vector<double>(4, 0.0));
  EXPECT_TRUE(same_node(nodes[0], NodeCapacity::make("b", "10.0.0.2", {{"GPU", 4.0}})));
}

TEST(Placement, PackFillsTheFreestNodeThenSpills) {
  std::vector<NodeCapacity> nodes = {NodeCapacity::make("small", "10.0.0.1", {{"GPU", 4.0}}),
                                     NodeCapacity::make("big", "10.0.0.2", {{"GPU", 8.0}})};
  PlacementDecision first =
      place_bundles(nodes, copies(6, {{"GPU", 1.0}}), PlacementStrategy::kPack);
  ASSERT_EQ(first.outcome, PlacementOutcome::kPlaced) << first.reason;
  EXPECT_EQ(node_ids(first), std::vector<std::string>(6, "big"));  // 8 free beats 4 free
  // Now "small" has 4 free and "big" 2: the next 5 fill "small" first and spill one onto "big".
  PlacementDecision second =
      place_bundles(nodes, copies(5, {{"GPU", 1.0}}), PlacementStrategy::kPack);
  ASSERT_EQ(second.outcome, PlacementOutcome::kPlaced) << second.reason;
  EXPECT_EQ(node_ids(second),
            (std::vector<std::string>{"small", "small", "small", "small", "big"}));
  EXPECT_EQ(second.allocations[4].gpu_ids, std::vector<int>{6});
}

TEST(Placement, SpreadPutsOneBundlePerNodeThenShares) {
  std::vector<NodeCapacity> nodes = {NodeCapacity::make("c", "10.0.0.3", {{"CPU", 4.0}}),
                                     NodeCapacity::make("a", "10.0.0.1", {{"CPU", 4.0}}),
                                     NodeCapacity::make("b", "10.0.0.2", {{"CPU", 4.0}})};
  PlacementDecision three =
      place_bundles(nodes, copies(3, {{"CPU", 1.0}}), PlacementStrategy::kSpread);
  ASSERT_EQ(three.outcome, PlacementOutcome::kPlaced) << three.reason;
  EXPECT_EQ(node_ids(three), (std::vector<std::string>{"a", "b", "c"}));
  for (const NodeCapacity& node : nodes) EXPECT_EQ(node.available.at("CPU"), 3.0);
  // Five bundles on three nodes: round-robin, two nodes get a second one.
  PlacementDecision five =
      place_bundles(nodes, copies(5, {{"CPU", 1.0}}), PlacementStrategy::kSpread);
  ASSERT_EQ(five.outcome, PlacementOutcome::kPlaced) << five.reason;
  EXPECT_EQ(node_ids(five), (std::vector<std::string>{"a", "b", "c", "a", "b"}));
}

TEST(Placement, StrictSpreadOfFourOnThreeNodesIsNever) {
  std::vector<NodeCapacity> nodes;
  for (int i = 0; i < 3; ++i) {
    nodes.push_back(NodeCapacity::make("n" + std::to_string(i), "10.0.0." + std::to_string(i),
                                       {{"GPU", 8.0}, {"CPU", 32.0}}));
  }
  std::vector<NodeCapacity> before = nodes;
  PlacementDecision decision =
      place_bundles(nodes, copies(4, {{"GPU", 1.0}}), PlacementStrategy::kStrictSpread);
  EXPECT_EQ(decision.outcome, PlacementOutcome::kNever);
  EXPECT_TRUE(contains(decision.reason, "4 nodes")) << decision.reason;
  EXPECT_TRUE(contains(decision.reason, "3 alive nodes")) << decision.reason;
  EXPECT_TRUE(decision.allocations.empty());
  EXPECT_TRUE(same_nodes(nodes, before));
  // Three bundles do fit, one per node.
  PlacementDecision three =
      place_bundles(nodes, copies(3, {{"GPU", 1.0}}), PlacementStrategy::kStrictSpread);
  ASSERT_EQ(three.outcome, PlacementOutcome::kPlaced) << three.reason;
  std::vector<std::string> ids = node_ids(three);
  EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()).size(), 3u);
}

TEST(Placement, StrictSpreadFindsTheOnlyDistinctAssignment) {
  // Bundle 0 fits both nodes, bundle 1 only "gpu": a first-fit would put bundle 0 on "gpu" (the
  // lower address) and strand bundle 1. The only valid assignment is 0 -> cpu, 1 -> gpu.
  std::vector<NodeCapacity> nodes = {
      NodeCapacity::make("gpu", "10.0.0.1", {{"CPU", 1.0}, {"GPU", 1.0}}),
      NodeCapacity::make("cpu", "10.0.0.2", {{"CPU", 1.0}})};
  PlacementDecision decision =
      place_bundles(nodes, {{{"CPU", 1.0}}, {{"GPU", 1.0}}}, PlacementStrategy::kStrictSpread);
  ASSERT_EQ(decision.outcome, PlacementOutcome::kPlaced) << decision.reason;
  EXPECT_EQ(node_ids(decision), (std::vector<std::string>{"cpu", "gpu"}));
}

TEST(Placement, StrictPackOfSixGpusOnNodesOfFourIsNever) {
  std::vector<NodeCapacity> nodes = {NodeCapacity::make("a", "10.0.0.1", {{"GPU", 4.0}}),
                                     NodeCapacity::make("b", "10.0.0.2", {{"GPU", 4.0}})};
  std::vector<NodeCapacity> before = nodes;
  PlacementDecision decision =
      place_bundles(nodes, copies(6, {{"GPU", 1.0}}), PlacementStrategy::kStrictPack);
  EXPECT_EQ(decision.outcome, PlacementOutcome::kNever);
  EXPECT_TRUE(contains(decision.reason, R"({"GPU":6})")) << decision.reason;
  EXPECT_TRUE(contains(decision.reason, R"({"GPU":4})")) << decision.reason;
  EXPECT_TRUE(contains(decision.reason, "short of GPU")) << decision.reason;
  EXPECT_TRUE(same_nodes(nodes, before));
  // PACK may use both nodes: 4 + 2.
  PlacementDecision pack =
      place_bundles(nodes, copies(6, {{"GPU", 1.0}}), PlacementStrategy::kPack);
  ASSERT_EQ(pack.outcome, PlacementOutcome::kPlaced) << pack.reason;
  EXPECT_EQ(node_ids(pack), (std::vector<std::string>{"a", "a", "a", "a", "b", "b"}));
}

TEST(Placement, StrictPackUsesOneNode) {
  std::vector<NodeCapacity> nodes = {NodeCapacity::make("a", "10.0.0.1", {{"GPU", 2.0}}),
                                     NodeCapacity::make("b", "10.0.0.2", {{"GPU", 4.0}})};
  PlacementDecision decision =
      place_bundles(nodes, copies(3, {{"GPU", 1.0}}), PlacementStrategy::kStrictPack);
  ASSERT_EQ(decision.outcome, PlacementOutcome::kPlaced) << decision.reason;
  EXPECT_EQ(node_ids(decision), std::vector<std::string>(3, "b"));
  // Now b has 1 free and a 2: another 3 fit neither now, but would fit b when empty.
  std::vector<NodeCapacity> before = nodes;
  PlacementDecision later =
      place_bundles(nodes, copies(3, {{"GPU", 1.0}}), PlacementStrategy::kStrictPack);
  EXPECT_EQ(later.outcome, PlacementOutcome::kNotNow);
  EXPECT_TRUE(contains(later.reason, "GPU")) << later.reason;
  EXPECT_TRUE(same_nodes(nodes, before));
}

TEST(Placement, AResourceNoNodeHasIsNever) {
  std::vector<NodeCapacity> nodes = {
      NodeCapacity::make("a", "10.0.0.1", {{"GPU", 4.0}, {"CPU", 16.0}}),
      NodeCapacity::make("b", "10.0.0.2", {{"GPU", 4.0}, {"CPU", 16.0}})};
  std::vector<NodeCapacity> before = nodes;
  for (PlacementStrategy strategy :
       {PlacementStrategy::kPack, PlacementStrategy::kSpread, PlacementStrategy::kStrictPack,
        PlacementStrategy::kStrictSpread}) {
    PlacementDecision decision = place_bundles(nodes, {{{"GPU", 1.0}}, {{"TPU", 1.0}}}, strategy);
    EXPECT_EQ(decision.outcome, PlacementOutcome::kNever) << placement_strategy_name(strategy);
    EXPECT_TRUE(contains(decision.reason, "bundle 1")) << decision.reason;
    EXPECT_TRUE(contains(decision.reason, "TPU")) << decision.reason;
  }
  // A bundle larger than every node names the short resource and the largest node.
  PlacementDecision big = place_bundles(nodes, {{{"GPU", 8.0}}}, PlacementStrategy::kPack);
  EXPECT_EQ(big.outcome, PlacementOutcome::kNever);
  EXPECT_TRUE(contains(big.reason, R"(bundle 0 needs {"GPU":8})")) << big.reason;
  EXPECT_TRUE(contains(big.reason, R"({"CPU":16,"GPU":4})")) << big.reason;
  EXPECT_TRUE(contains(big.reason, "short of GPU")) << big.reason;
  // Each bundle fits some node but together they exceed the cluster.
  PlacementDecision many =
      place_bundles(nodes, copies(3, {{"GPU", 3.0}}), PlacementStrategy::kPack);
  EXPECT_EQ(many.outcome, PlacementOutcome::kNever) << many.reason;
  EXPECT_TRUE(contains(many.reason, "GPU")) << many.reason;
  EXPECT_TRUE(same_nodes(nodes, before));
}

TEST(Placement, BusyClusterIsNotNowThenPlacesAfterRelease) {
  std::vector<NodeCapacity> nodes = {NodeCapacity::make("a", "10.0.0.1", {{"GPU", 4.0}}),
                                     NodeCapacity::make("b", "10.0.0.2", {{"GPU", 4.0}})};
  PlacementDecision full =
      place_bundles(nodes, copies(8, {{"GPU", 1.0}}), PlacementStrategy::kPack);
  ASSERT_EQ(full.outcome, PlacementOutcome::kPlaced) << full.reason;
  std::vector<NodeCapacity> before = nodes;
  for (PlacementStrategy strategy :
       {PlacementStrategy::kPack, PlacementStrategy::kSpread, PlacementStrategy::kStrictPack,
        PlacementStrategy::kStrictSpread}) {
    PlacementDecision decision = place_bundles(nodes, copies(2, {{"GPU", 1.0}}), strategy);
    EXPECT_EQ(decision.outcome, PlacementOutcome::kNotNow) << placement_strategy_name(strategy);
    EXPECT_TRUE(contains(decision.reason, "GPU") || contains(decision.reason, "matched"))
        << decision.reason;
    EXPECT_TRUE(same_nodes(nodes, before)) << placement_strategy_name(strategy);
  }
  PlacementDecision actor = place_actor(nodes, {{"GPU", 1.0}}, "");
  EXPECT_EQ(actor.outcome, PlacementOutcome::kNotNow);
  EXPECT_TRUE(contains(actor.reason, "the actor needs")) << actor.reason;
  EXPECT_TRUE(contains(actor.reason, "short of GPU")) << actor.reason;

  // Free bundle 5 (node b, device 1): the same single-GPU request now lands exactly there.
  ASSERT_EQ(full.allocations[5].node_id, "b");
  ASSERT_EQ(full.allocations[5].gpu_ids, std::vector<int>{1});
  release(*find_node(nodes, "b"), full.allocations[5]);
  PlacementDecision retry = place_bundles(nodes, {{{"GPU", 1.0}}}, PlacementStrategy::kPack);
  ASSERT_EQ(retry.outcome, PlacementOutcome::kPlaced) << retry.reason;
  EXPECT_EQ(retry.allocations[0].node_id, "b");
  EXPECT_EQ(retry.allocations[0].gpu_ids, std::vector<int>{1});
}

TEST(Placement, DeadNodesAreIgnored) {
  std::vector<NodeCapacity> nodes = {NodeCapacity::make("dead", "10.0.0.1", {{"GPU", 8.0}}),
                                     NodeCapacity::make("live", "10.0.0.2", {{"GPU", 2.0}})};
  nodes[0].alive = false;
  PlacementDecision two = place_bundles(nodes, copies(2, {{"GPU", 1.0}}), PlacementStrategy::kPack);
  ASSERT_EQ(two.outcome, PlacementOutcome::kPlaced) << two.reason;
  EXPECT_EQ(node_ids(two), (std::vector<std::string>{"live", "live"}));
  EXPECT_EQ(nodes[0].gpu_free, std::vector<double>(8, 1.0));
  // Only the dead node could hold 4 GPUs: never, on the live node's totals.
  PlacementDecision four = place_bundles(nodes, {{{"GPU", 4.0}}}, PlacementStrategy::kPack);
  EXPECT_EQ(four.outcome, PlacementOutcome::kNever) << four.reason;
  PlacementDecision spread =
      place_bundles(nodes, copies(2, {{"CPU", 0.0}}), PlacementStrategy::kStrictSpread);
  EXPECT_EQ(spread.outcome, PlacementOutcome::kNever);
  EXPECT_TRUE(contains(spread.reason, "1 alive node")) << spread.reason;
  // The preferred node is ignored when dead.
  PlacementDecision actor = place_actor(nodes, {}, "dead");
  ASSERT_EQ(actor.outcome, PlacementOutcome::kPlaced) << actor.reason;
  EXPECT_EQ(actor.allocations[0].node_id, "live");
  nodes[1].alive = false;
  PlacementDecision none = place_actor(nodes, {}, "");
  EXPECT_EQ(none.outcome, PlacementOutcome::kNever);
  EXPECT_TRUE(contains(none.reason, "no alive nodes")) << none.reason;
}

TEST(Placement, ActorGoesToPreferredNodeElseTheFreest) {
  std::vector<NodeCapacity> nodes = {NodeCapacity::make("a", "10.0.0.1", {{"CPU", 8.0}}),
                                     NodeCapacity::make("b", "10.0.0.2", {{"CPU", 16.0}})};
  PlacementDecision free_choice = place_actor(nodes, {{"CPU", 4.0}}, "");
  ASSERT_EQ(free_choice.outcome, PlacementOutcome::kPlaced);
  EXPECT_EQ(free_choice.allocations[0].node_id, "b");  // 16 free vs 8
  PlacementDecision preferred = place_actor(nodes, {{"CPU", 8.0}}, "a");
  ASSERT_EQ(preferred.outcome, PlacementOutcome::kPlaced);
  EXPECT_EQ(preferred.allocations[0].node_id, "a");
  EXPECT_EQ(nodes[0].available.at("CPU"), 0.0);
  PlacementDecision a_full = place_actor(nodes, {{"CPU", 1.0}}, "a");  // a is full: b instead
  ASSERT_EQ(a_full.outcome, PlacementOutcome::kPlaced);
  EXPECT_EQ(a_full.allocations[0].node_id, "b");
  PlacementDecision unknown = place_actor(nodes, {{"CPU", 1.0}}, "zzz");
  ASSERT_EQ(unknown.outcome, PlacementOutcome::kPlaced);
  EXPECT_EQ(unknown.allocations[0].node_id, "b");
  PlacementDecision gpu = place_actor(nodes, {{"GPU", 1.0}}, "");
  EXPECT_EQ(gpu.outcome, PlacementOutcome::kNever);
  EXPECT_TRUE(contains(gpu.reason, "the actor needs")) << gpu.reason;
  EXPECT_TRUE(contains(gpu.reason, "no alive node has GPU")) << gpu.reason;
}

TEST(Placement, ReportOrderSortsByAddressThenGpuId) {
  std::map<std::string, std::string> address = {
      {"n-high", "10.0.0.10"}, {"n-low", "10.0.0.9"}, {"n-name", "worker-1"}};
  std::vector<Allocation> allocations = {
      {"n-high", {{"GPU", 1.0}}, {1}},    // 0
      {"n-low", {{"GPU", 1.0}}, {3}},     // 1
      {"n-name", {{"CPU", 1.0}}, {}},     // 2
      {"n-high", {{"GPU", 1.0}}, {0}},    // 3
      {"n-low", {{"GPU", 2.0}}, {0, 2}},  // 4: lowest id 0
      {"n-name", {{"GPU", 1.0}}, {5}},    // 5
      {"n-name", {{"CPU", 1.0}}, {}},     // 6
  };
  // 10.0.0.9 < 10.0.0.10 numerically; host names after IPs; on a node by lowest GPU id, bundles
  // without GPUs last and by index.
  std::vector<size_t> expected = {4, 1, 3, 0, 5, 2, 6};
  EXPECT_EQ(bundle_report_order(allocations, address), expected);
  allocations.push_back({"missing", {}, {}});
  EXPECT_THROW(bundle_report_order(allocations, address), Error);
}

// ---- randomized invariants ----

struct Holding {
  size_t group;
  Allocation allocation;
};

// Whether `bundles` can go on distinct nodes of `totals` (each fitting whole), by trying every
// assignment: the independent oracle for STRICT_SPREAD.
bool distinct_assignment_exists(const std::vector<ResourceSet>& totals,
                                const std::vector<ResourceSet>& bundles, size_t next,
                                std::vector<bool>& used) {
  if (next == bundles.size()) return true;
  for (size_t n = 0; n < totals.size(); ++n) {
    if (used[n]) continue;
    bool fits = true;
    for (const auto& [name, amount] : bundles[next]) {
      double have = totals[n].count(name) ? totals[n].at(name) : 0.0;
      if (name == "GPU" && amount > 0 && amount < 1)
        fits = fits && have >= 1;
      else
        fits = fits && have >= amount;
    }
    if (!fits) continue;
    used[n] = true;
    if (distinct_assignment_exists(totals, bundles, next + 1, used)) return true;
    used[n] = false;
  }
  return false;
}

TEST(Placement, RandomizedInvariantsHold) {
  std::mt19937 rng(20240611);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const std::vector<double> gpu_amounts = {0, 0, 0.25, 0.5, 0.3, 1, 1, 2, 4};
  const PlacementStrategy strategies[] = {PlacementStrategy::kPack, PlacementStrategy::kSpread,
                                          PlacementStrategy::kStrictPack,
                                          PlacementStrategy::kStrictSpread};
  int placed = 0, not_now = 0, never = 0;
  for (int round = 0; round < 300; ++round) {
    std::vector<NodeCapacity> nodes;
    int node_count = pick(1, 5);
    for (int i = 0; i < node_count; ++i) {
      ResourceSet total{{"CPU", static_cast<double>(pick(0, 16))},
                        {"GPU", static_cast<double>(pick(0, 8))}};
      if (pick(0, 3) == 0) total["memory"] = 1000.0 * pick(1, 8);
      nodes.push_back(NodeCapacity::make(
          "node" + std::to_string(i),
          "10.0." + std::to_string(pick(0, 2)) + "." + std::to_string(pick(0, 20)), total));
      nodes.back().alive = pick(0, 6) != 0;
    }
    const std::vector<NodeCapacity> initial = nodes;
    std::vector<Holding> held;
    for (size_t group = 0; group < 8; ++group) {
      PlacementStrategy strategy = strategies[pick(0, 3)];
      std::vector<ResourceSet> bundles(pick(1, 4));
      for (ResourceSet& bundle : bundles) {
        bundle["CPU"] = pick(0, 4) * 0.5;
        double gpu = gpu_amounts[pick(0, static_cast<int>(gpu_amounts.size()) - 1)];
        if (gpu > 0) bundle["GPU"] = gpu;
        if (pick(0, 9) == 0) bundle["memory"] = 500.0 * pick(1, 4);
        if (pick(0, 29) == 0) bundle["TPU"] = 1;
      }
      const std::vector<NodeCapacity> before = nodes;
      PlacementDecision decision = place_bundles(nodes, bundles, strategy);
      std::string context = std::string(placement_strategy_name(strategy)) + " round " +
                            std::to_string(round) + " group " + std::to_string(group) + ": " +
                            decision.reason;

      // Independent judgements from the nodes' totals.
      std::vector<ResourceSet> alive_totals;
      for (const NodeCapacity& node : initial) {
        if (node.alive) alive_totals.push_back(node.total);
      }
      std::vector<bool> used(alive_totals.size(), false);
      bool some_bundle_fits_nowhere = false;
      for (const ResourceSet& bundle : bundles) {
        std::vector<bool> one_used(alive_totals.size(), false);
        if (!distinct_assignment_exists(alive_totals, {bundle}, 0, one_used)) {
          some_bundle_fits_nowhere = true;
        }
      }
      if (some_bundle_fits_nowhere) {
        EXPECT_EQ(decision.outcome, PlacementOutcome::kNever) << context;
      }
      bool whole_gpus_only = std::all_of(bundles.begin(), bundles.end(), [](const ResourceSet& b) {
        return !b.count("GPU") || b.at("GPU") >= 1;
      });
      if (strategy == PlacementStrategy::kStrictSpread) {
        bool possible = distinct_assignment_exists(alive_totals, bundles, 0, used);
        EXPECT_EQ(decision.outcome == PlacementOutcome::kNever, !possible) << context;
      }
      if (strategy == PlacementStrategy::kStrictPack && whole_gpus_only) {
        ResourceSet sum;
        for (const ResourceSet& bundle : bundles) {
          for (const auto& [name, amount] : bundle) sum[name] += amount;
        }
        bool one_node_holds_sum = false;
        for (const ResourceSet& total : alive_totals) {
          bool holds = true;
          for (const auto& [name, amount] : sum) {
            holds = holds && (total.count(name) ? total.at(name) : 0.0) >= amount - 1e-9;
          }
          one_node_holds_sum = one_node_holds_sum || holds;
        }
        EXPECT_EQ(decision.outcome == PlacementOutcome::kNever, !one_node_holds_sum) << context;
      }

      if (decision.outcome != PlacementOutcome::kPlaced) {
        EXPECT_TRUE(same_nodes(nodes, before)) << context;
        EXPECT_FALSE(decision.reason.empty()) << context;
        EXPECT_TRUE(decision.allocations.empty()) << context;
        (decision.outcome == PlacementOutcome::kNever ? never : not_now)++;
        continue;
      }
      ++placed;
      ASSERT_EQ(decision.allocations.size(), bundles.size()) << context;
      std::set<std::string> distinct;
      for (size_t b = 0; b < bundles.size(); ++b) {
        const Allocation& allocation = decision.allocations[b];
        const NodeCapacity* node = find_node(nodes, allocation.node_id);
        ASSERT_NE(node, nullptr) << context;
        EXPECT_TRUE(node->alive) << context;
        // The allocation is the bundle, with the right number of devices.
        for (const auto& [name, amount] : bundles[b]) {
          double got = allocation.resources.count(name) ? allocation.resources.at(name) : 0.0;
          EXPECT_EQ(got, amount) << context;
          double have = node->total.count(name) ? node->total.at(name) : 0.0;
          EXPECT_LE(amount, have + 1e-9) << context << " " << name;
        }
        double gpu = bundles[b].count("GPU") ? bundles[b].at("GPU") : 0.0;
        size_t devices = gpu == 0 ? 0 : gpu < 1 ? 1 : static_cast<size_t>(gpu);
        EXPECT_EQ(allocation.gpu_ids.size(), devices) << context;
        distinct.insert(allocation.node_id);
        held.push_back({group, allocation});
      }
      if (strategy == PlacementStrategy::kStrictSpread) {
        EXPECT_EQ(distinct.size(), bundles.size()) << context;
      }
      if (strategy == PlacementStrategy::kStrictPack) {
        EXPECT_EQ(distinct.size(), 1u) << context;
      }

      // Every node's books agree with the sums of what it holds, recomputed here.
      for (const NodeCapacity& node : nodes) {
        ResourceSet used_sum;
        std::vector<double> device_used(node.gpu_free.size(), 0.0);
        for (const Holding& h : held) {
          if (h.allocation.node_id != node.node_id) continue;
          for (const auto& [name, amount] : h.allocation.resources) used_sum[name] += amount;
          double gpu_amount =
              h.allocation.resources.count("GPU") ? h.allocation.resources.at("GPU") : 0.0;
          for (int id : h.allocation.gpu_ids) {
            ASSERT_GE(id, 0);
            ASSERT_LT(static_cast<size_t>(id), device_used.size());
            device_used[id] += gpu_amount >= 1 ? 1.0 : gpu_amount;
          }
        }
        for (const auto& [name, amount] : used_sum) {
          double total = node.total.count(name) ? node.total.at(name) : 0.0;
          EXPECT_LE(amount, total + 1e-9) << context << " " << node.node_id << " " << name;
          EXPECT_NEAR(node.available.at(name), total - amount, 1e-9) << context;
        }
        for (size_t id = 0; id < device_used.size(); ++id) {
          EXPECT_GE(node.gpu_free[id], 0.0) << context;
          EXPECT_LE(node.gpu_free[id], 1.0) << context;
          EXPECT_NEAR(node.gpu_free[id], 1.0 - device_used[id], 1e-9) << context;
        }
      }

      // Sometimes release a whole earlier group, as the head does when one is removed.
      if (pick(0, 2) == 0 && !held.empty()) {
        size_t victim = held[pick(0, static_cast<int>(held.size()) - 1)].group;
        std::vector<Holding> kept;
        for (const Holding& h : held) {
          if (h.group == victim)
            release(*find_node(nodes, h.allocation.node_id), h.allocation);
          else
            kept.push_back(h);
        }
        held = kept;
      }
    }
    // Releasing everything, in a shuffled order, restores the initial capacities exactly.
    std::shuffle(held.begin(), held.end(), rng);
    for (const Holding& h : held) release(*find_node(nodes, h.allocation.node_id), h.allocation);
    for (size_t i = 0; i < nodes.size(); ++i) {
      EXPECT_TRUE(same_node(nodes[i], initial[i])) << "round " << round << " node " << i;
    }
  }
  // The generator exercised every outcome.
  EXPECT_GT(placed, 100);
  EXPECT_GT(not_now, 10);
  EXPECT_GT(never, 10);
}

}  // namespace placement_test
}  // namespace ooze::actors
