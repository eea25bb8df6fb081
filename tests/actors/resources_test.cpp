#include "actors/resources.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"

namespace ooze::actors {
namespace resources_test {

// Runs `parse_resources(text)` and returns the ConfigError message ("" when none was thrown).
std::string parse_error(const std::string& text) {
  try {
    parse_resources(text);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

void expect_same_node(const NodeCapacity& a, const NodeCapacity& b) {
  EXPECT_EQ(a.node_id, b.node_id);
  EXPECT_EQ(a.address, b.address);
  EXPECT_EQ(a.total, b.total);
  EXPECT_EQ(a.available, b.available);
  EXPECT_EQ(a.gpu_free, b.gpu_free);
  EXPECT_EQ(a.alive, b.alive);
}

TEST(Resources, ParseReadsNumbersAndDropsZeros) {
  ResourceSet parsed =
      parse_resources(R"({"CPU": 1, "GPU": 0.5, "memory": 1099511627776, "TPU": 0, "x": 2.25})");
  ResourceSet expected{{"CPU", 1.0}, {"GPU", 0.5}, {"memory", 1099511627776.0}, {"x", 2.25}};
  EXPECT_EQ(parsed, expected);
  EXPECT_EQ(parse_resources("{}"), ResourceSet{});
  EXPECT_EQ(parse_resources(R"({"GPU": 3})"), (ResourceSet{{"GPU", 3.0}}));
}

TEST(Resources, FormatIsCompactSortedAndPrintsWholeNumbersPlainly) {
  ResourceSet resources{
      {"memory", 1099511627776.0}, {"GPU", 2.0}, {"CPU", 16.0}, {"custom", 0.25}, {"zero", 0.0}};
  EXPECT_EQ(format_resources(resources),
            R"({"CPU":16,"GPU":2,"custom":0.25,"memory":1099511627776})");
  EXPECT_EQ(format_resources({}), "{}");
  EXPECT_EQ(format_resources({{"GPU", 0.1 + 0.2}}), R"({"GPU":0.3})");  // float drift hidden
  EXPECT_EQ(format_resources({{"a\"b", 1.0}}), R"({"a\"b":1})");        // names are escaped
}

TEST(Resources, FormatThenParseRoundTrips) {
  std::vector<ResourceSet> sets = {
      {},
      {{"CPU", 1.0}},
      {{"CPU", 0.1}, {"GPU", 0.3}, {"memory", 68719476736.0}},
      {{"GPU", 8.0}, {"node:10.0.0.1", 0.001}, {"custom resource", 1.5}},
      {{"a\"b\\c", 12345.678}},
  };
  for (const ResourceSet& set : sets) {
    EXPECT_EQ(parse_resources(format_resources(set)), set) << format_resources(set);
  }
  std::string text = R"({"CPU":4,"GPU":0.25,"memory":1024})";
  EXPECT_EQ(format_resources(parse_resources(text)), text);
}

TEST(Resources, ParseRejectsBadInputNamingTheProblem) {
  EXPECT_NE(parse_error("{\"CPU\": 1").find("not valid JSON"), std::string::npos);
  EXPECT_NE(parse_error("").find("not valid JSON"), std::string::npos);
  EXPECT_NE(parse_error("[1, 2]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(parse_error("4").find("not a JSON object"), std::string::npos);
  EXPECT_NE(parse_error(R"({"CPU": "1"})").find("CPU is \"1\", not a number"), std::string::npos);
  EXPECT_NE(parse_error(R"({"CPU": true})").find("not a number"), std::string::npos);
  EXPECT_NE(parse_error(R"({"CPU": null})").find("not a number"), std::string::npos);
  std::string negative = parse_error(R"({"CPU": -1})");
  EXPECT_NE(negative.find("CPU = -1"), std::string::npos) << negative;
  EXPECT_NE(negative.find("non-negative"), std::string::npos) << negative;
  // JSON has no NaN or infinity: the parser refuses them and the message says what is allowed.
  std::string nan = parse_error(R"({"GPU": NaN})");
  EXPECT_NE(nan.find("not valid JSON"), std::string::npos) << nan;
  EXPECT_NE(nan.find("finite non-negative"), std::string::npos) << nan;
  std::string huge = parse_error(R"({"GPU": 1e999})");
  EXPECT_NE(huge.find("finite non-negative"), std::string::npos) << huge;
  std::string fractional = parse_error(R"({"GPU": 1.5})");
  EXPECT_NE(fractional.find("GPU = 1.5"), std::string::npos) << fractional;
  EXPECT_NE(fractional.find("whole number"), std::string::npos) << fractional;
  EXPECT_NE(parse_error(R"({"": 1})").find("name is empty"), std::string::npos);
  // The message names the input.
  EXPECT_NE(negative.find(R"({"CPU": -1})"), std::string::npos) << negative;
  // Fractions below one device and whole devices are fine.
  EXPECT_EQ(parse_error(R"({"GPU": 0.999})"), "");
  EXPECT_EQ(parse_error(R"({"GPU": 2.0, "CPU": 1.5})"), "");
}

TEST(Resources, MakeStartsWithEverythingFree) {
  NodeCapacity node = NodeCapacity::make("n1", "10.0.0.1", {{"CPU", 8.0}, {"GPU", 4.0}});
  EXPECT_EQ(node.available, node.total);
  EXPECT_EQ(node.gpu_free, std::vector<double>(4, 1.0));
  EXPECT_TRUE(node.alive);
  EXPECT_TRUE(NodeCapacity::make("n2", "h", {{"CPU", 2.0}}).gpu_free.empty());
  EXPECT_THROW(NodeCapacity::make("n3", "h", {{"GPU", 1.5}}), ConfigError);
  EXPECT_THROW(NodeCapacity::make("n3", "h", {{"GPU", 0.5}}), ConfigError);
  EXPECT_THROW(NodeCapacity::make("n3", "h", {{"CPU", -2.0}}), ConfigError);
}

TEST(Resources, FractionalGpusPackOntoTheMostUsedDevice) {
  NodeCapacity node = NodeCapacity::make("n1", "h", {{"GPU", 2.0}});
  NodeCapacity initial = node;
  // Worked by hand: 0.3 -> device 0 (both whole, lowest id); 0.5 -> device 0 (0.7 left, the most
  // used that has room); 0.5 -> device 1 (device 0 has only 0.2); 0.2 -> device 0 (0.2 left vs
  // 0.5: device 0 is the more used); 0.6 -> nothing (0 and 0.5 left).
  std::vector<Allocation> held;
  for (auto [amount, device] :
       std::vector<std::pair<double, int>>{{0.3, 0}, {0.5, 0}, {0.5, 1}, {0.2, 0}}) {
    std::optional<Allocation> allocation = try_allocate(node, {{"GPU", amount}});
    ASSERT_TRUE(allocation.has_value()) << amount;
    EXPECT_EQ(allocation->gpu_ids, std::vector<int>{device}) << amount;
    EXPECT_EQ(allocation->resources, (ResourceSet{{"GPU", amount}}));
    EXPECT_EQ(allocation->node_id, "n1");
    held.push_back(*allocation);
  }
  EXPECT_EQ(node.gpu_free[0], 0.0);  // 1 - 0.3 - 0.5 - 0.2 snapped to exactly zero
  EXPECT_NEAR(node.gpu_free[1], 0.5, 1e-12);
  EXPECT_NEAR(node.available["GPU"], 0.5, 1e-12);
  NodeCapacity before = node;
  EXPECT_FALSE(try_allocate(node, {{"GPU", 0.6}}).has_value());
  EXPECT_FALSE(try_allocate(node, {{"GPU", 1.0}}).has_value());
  expect_same_node(node, before);  // a refused request changes nothing

  release(node, held[1]);  // device 0 gets 0.5 back
  EXPECT_NEAR(node.gpu_free[0], 0.5, 1e-12);
  for (size_t i : {3, 0, 2}) release(node, held[i]);
  expect_same_node(node, initial);
}

TEST(Resources, TwoHalvesShareOneDeviceAndTenthsFillItExactly) {
  NodeCapacity node = NodeCapacity::make("n1", "h", {{"GPU", 2.0}, {"CPU", 1.0}});
  NodeCapacity initial = node;
  std::optional<Allocation> a = try_allocate(node, {{"GPU", 0.5}});
  std::optional<Allocation> b = try_allocate(node, {{"GPU", 0.5}});
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->gpu_ids, std::vector<int>{0});
  EXPECT_EQ(b->gpu_ids, std::vector<int>{0});
  EXPECT_EQ(node.gpu_free, (std::vector<double>{0.0, 1.0}));
  release(node, *a);
  release(node, *b);
  expect_same_node(node, initial);

  std::vector<Allocation> tenths;
  for (int i = 0; i < 20; ++i) {
    std::optional<Allocation> tenth = try_allocate(node, {{"GPU", 0.1}, {"CPU", 0.05}});
    ASSERT_TRUE(tenth.has_value()) << i;
    EXPECT_EQ(tenth->gpu_ids, std::vector<int>{i < 10 ? 0 : 1}) << i;  // device 0 fills first
    tenths.push_back(*tenth);
  }
  EXPECT_EQ(node.gpu_free, (std::vector<double>{0.0, 0.0}));
  EXPECT_EQ(node.available["GPU"], 0.0);
  EXPECT_EQ(node.available["CPU"], 0.0);
  EXPECT_FALSE(try_allocate(node, {{"GPU", 0.1}}).has_value());
  for (const Allocation& tenth : tenths) release(node, tenth);
  expect_same_node(node, initial);
}

TEST(Resources, WholeGpusTakeTheLowestFullyFreeIds) {
  NodeCapacity node = NodeCapacity::make("n1", "h", {{"GPU", 4.0}});
  NodeCapacity initial = node;
  std::optional<Allocation> half = try_allocate(node, {{"GPU", 0.5}});
  ASSERT_TRUE(half.has_value());
  EXPECT_EQ(half->gpu_ids, std::vector<int>{0});
  std::optional<Allocation> two = try_allocate(node, {{"GPU", 2.0}});  // device 0 is not whole
  ASSERT_TRUE(two.has_value());
  EXPECT_EQ(two->gpu_ids, (std::vector<int>{1, 2}));
  std::optional<Allocation> one = try_allocate(node, {{"GPU", 1.0}});
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->gpu_ids, std::vector<int>{3});
  EXPECT_FALSE(try_allocate(node, {{"GPU", 1.0}}).has_value());  // 0.5 left, but not whole
  EXPECT_EQ(node.gpu_free, (std::vector<double>{0.5, 0.0, 0.0, 0.0}));
  EXPECT_EQ(node.available["GPU"], 0.5);
  release(node, *two);
  EXPECT_EQ(node.gpu_free, (std::vector<double>{0.5, 1.0, 1.0, 0.0}));
  std::optional<Allocation> again = try_allocate(node, {{"GPU", 2.0}});
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->gpu_ids, (std::vector<int>{1, 2}));
  for (const Allocation* allocation : {&*half, &*again, &*one}) release(node, *allocation);
  expect_same_node(node, initial);
}

TEST(Resources, FitsNowAndEver) {
  NodeCapacity node =
      NodeCapacity::make("n1", "h", {{"CPU", 8.0}, {"GPU", 2.0}, {"memory", 1000.0}});
  ASSERT_TRUE(try_allocate(node, {{"GPU", 1.5 - 0.5}, {"CPU", 6.0}}).has_value());
  EXPECT_TRUE(fits_now(node, {{"CPU", 2.0}, {"GPU", 1.0}, {"memory", 1000.0}}));
  EXPECT_FALSE(fits_now(node, {{"CPU", 2.5}}));
  EXPECT_TRUE(fits_ever(node, {{"CPU", 8.0}}));
  EXPECT_FALSE(fits_now(node, {{"GPU", 2.0}}));
  EXPECT_TRUE(fits_ever(node, {{"GPU", 2.0}}));
  EXPECT_FALSE(fits_ever(node, {{"GPU", 3.0}}));
  EXPECT_FALSE(fits_ever(node, {{"CPU", 8.5}}));
  EXPECT_FALSE(fits_ever(node, {{"TPU", 1.0}}));
  EXPECT_TRUE(fits_ever(node, {{"TPU", 0.0}}));  // asking for none of a thing is no constraint
  EXPECT_TRUE(fits_now(node, {}));
  EXPECT_THROW(fits_now(node, {{"GPU", 1.5}}), ConfigError);
  EXPECT_THROW(try_allocate(node, {{"CPU", -1.0}}), ConfigError);
  NodeCapacity cpu_only = NodeCapacity::make("n2", "h", {{"CPU", 8.0}});
  EXPECT_FALSE(fits_ever(cpu_only, {{"GPU", 0.25}}));
}

TEST(Resources, ReleaseRestoresExactlyInAnyOrder) {
  NodeCapacity node = NodeCapacity::make("n1", "h", {{"CPU", 3.0}, {"GPU", 3.0}, {"mem", 1.0}});
  NodeCapacity initial = node;
  std::vector<ResourceSet> requests = {{{"CPU", 0.7}, {"GPU", 0.3}, {"mem", 0.1}},
                                       {{"CPU", 1.1}, {"GPU", 1.0}},
                                       {{"GPU", 0.35}, {"mem", 0.2}},
                                       {{"CPU", 0.2}, {"GPU", 0.35}, {"mem", 0.7}},
                                       {{"GPU", 1.0}}};
  std::vector<Allocation> held;
  for (const ResourceSet& request : requests) {
    std::optional<Allocation> allocation = try_allocate(node, request);
    ASSERT_TRUE(allocation.has_value()) << format_resources(request);
    held.push_back(*allocation);
  }
  // Hand-worked: 0.3 -> dev 0; whole -> dev 1; 0.35 -> dev 0 (most used); 0.35 -> dev 0 (0.35
  // left, fits exactly); whole -> dev 2.
  EXPECT_EQ(held[0].gpu_ids, std::vector<int>{0});
  EXPECT_EQ(held[1].gpu_ids, std::vector<int>{1});
  EXPECT_EQ(held[2].gpu_ids, std::vector<int>{0});
  EXPECT_EQ(held[3].gpu_ids, std::vector<int>{0});
  EXPECT_EQ(held[4].gpu_ids, std::vector<int>{2});
  EXPECT_EQ(node.gpu_free, (std::vector<double>{0.0, 0.0, 0.0}));
  EXPECT_NEAR(node.available["CPU"], 3.0 - 0.7 - 1.1 - 0.2, 1e-12);
  EXPECT_EQ(node.available["mem"], 0.0);
  for (size_t i : {2, 4, 0, 3, 1}) release(node, held[i]);
  expect_same_node(node, initial);
}

TEST(Resources, ReleaseRefusesAnotherNodesAllocation) {
  NodeCapacity a = NodeCapacity::make("a", "h", {{"GPU", 1.0}});
  NodeCapacity b = NodeCapacity::make("b", "h", {{"GPU", 1.0}});
  std::optional<Allocation> allocation = try_allocate(a, {{"GPU", 1.0}});
  ASSERT_TRUE(allocation.has_value());
  EXPECT_THROW(release(b, *allocation), Error);
}

}  // namespace resources_test
}  // namespace ooze::actors
