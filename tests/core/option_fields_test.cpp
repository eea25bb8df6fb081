// One field list per options struct: the schema it declares (types and defaults from the struct),
// the struct it reads from a config, its JSON, and the rules it checks as the config loads.
#include "core/option_fields.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "tests/support/expect_error.h"

namespace ooze {
namespace option_fields_test {

enum class Shape { kRound, kSquare };
std::string shape_name(Shape shape) { return shape == Shape::kRound ? "round" : "square"; }

struct Inner {
  double rate = 0.5;
  std::optional<int64_t> limit;  // --limit 0: none

  static const OptionFields<Inner>& fields() {
    static const OptionFields<Inner> fields = [] {
      OptionFields<Inner> f;
      f.section("inner");
      f.add("rate", &Inner::rate, "A rate.").min(0).max(1);
      f.add_optional("limit", &Inner::limit, int64_t{0}, "A limit; 0: none.").min(0);
      return f;
    }();
    return fields;
  }
};

struct Outer {
  int64_t count = 3;
  bool verbose = false;
  std::string mode = "fast";
  Shape shape = Shape::kSquare;
  std::vector<int64_t> ranks = {0, 1};
  int threads = 2;
  Inner inner;
  double scale = 1.0;  // not a flag: the caller sets it

  static const OptionFields<Outer>& fields() {
    static const OptionFields<Outer> fields = [] {
      OptionFields<Outer> f;
      f.section("outer");
      f.add("count", &Outer::count, "How many.").min(1);
      f.add("verbose", &Outer::verbose, "Say more.");
      f.add_choice("mode", &Outer::mode, {"fast", "slow"}, "How.");
      f.add_enum("shape", &Outer::shape, {Shape::kRound, Shape::kSquare}, shape_name, "Shape.");
      f.add("ranks", &Outer::ranks, "Which ranks.");
      f.add("threads", &Outer::threads, "Threads.").min(1);
      f.include("inner", &Outer::inner, Inner::fields());
      f.add_internal("scale", &Outer::scale);
      f.add_rule([](const Outer& o) {
        if (o.mode == "slow" && o.count > 5) {
          throw ConfigError("mode = slow takes count <= 5, got count = " + std::to_string(o.count));
        }
      });
      return f;
    }();
    return fields;
  }
};

ConfigSchema outer_schema(const Outer& defaults = {}) {
  ConfigSchema schema;
  Outer::fields().declare(schema, defaults);
  return schema;
}

TEST(OptionFieldsTest, DeclaresEachMemberWithItsTypeDefaultAndSection) {
  const ConfigSchema schema = outer_schema();
  ASSERT_NE(schema.find("count"), nullptr);
  EXPECT_EQ(schema.find("count")->type, FieldType::kInt);
  EXPECT_EQ(schema.find("count")->default_value, 3);
  EXPECT_EQ(schema.find("verbose")->type, FieldType::kBool);
  EXPECT_EQ(schema.find("mode")->type, FieldType::kEnum);
  EXPECT_EQ(schema.find("shape")->default_value, "square");
  EXPECT_EQ(schema.find("shape")->choices, (std::vector<std::string>{"round", "square"}));
  EXPECT_EQ(schema.find("ranks")->type, FieldType::kIntList);
  EXPECT_EQ(schema.find("threads")->type, FieldType::kInt);
  EXPECT_EQ(schema.find("rate")->section, "inner");
  EXPECT_EQ(schema.find("limit")->default_value, 0);  // unset: the sentinel
  EXPECT_EQ(schema.find("scale"), nullptr);           // internal: no flag
  EXPECT_NE(schema.help().find("--count <int>                         default: 3; range: >= 1"),
            std::string::npos)
      << schema.help();

  // A command's own defaults replace the struct's.
  Outer defaults;
  defaults.count = 4;
  EXPECT_EQ(outer_schema(defaults).find("count")->default_value, 4);
}

TEST(OptionFieldsTest, ReadsEveryFlagIntoItsMember) {
  const Outer defaults = Outer::fields().read(load_config(outer_schema(), "", {}));
  EXPECT_EQ(defaults.count, 3);
  EXPECT_EQ(defaults.shape, Shape::kSquare);
  EXPECT_FALSE(defaults.inner.limit.has_value());

  const Outer read = Outer::fields().read(
      load_config(outer_schema(), "",
                  {"--count", "5", "--verbose", "--mode", "slow", "--shape", "round", "--ranks",
                   "2,3", "--threads", "8", "--rate", "0.25", "--limit", "7"}));
  EXPECT_EQ(read.count, 5);
  EXPECT_TRUE(read.verbose);
  EXPECT_EQ(read.mode, "slow");
  EXPECT_EQ(read.shape, Shape::kRound);
  EXPECT_EQ(read.ranks, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(read.threads, 8);
  EXPECT_DOUBLE_EQ(read.inner.rate, 0.25);
  EXPECT_EQ(read.inner.limit, 7);
  EXPECT_DOUBLE_EQ(read.scale, 1.0);
}

TEST(OptionFieldsTest, RulesAreCheckedAsTheConfigLoads) {
  const std::string message = testing::error_message_of([] {
    load_config(outer_schema(), "", {"--mode", "slow", "--count", "9"});
  });
  EXPECT_CONTAINS(message, "mode = slow takes count <= 5, got count = 9");
  EXPECT_CONTAINS(testing::error_message_of([] {
                    load_config(outer_schema(), "", {"--shape", "triangle"});
                  }),
                  "--shape");
}

TEST(OptionFieldsTest, JsonCarriesEveryMemberIncludedStructsAsObjects) {
  Outer outer;
  outer.count = 9;
  outer.shape = Shape::kRound;
  outer.inner.limit = 11;
  outer.scale = 0.125;
  const nlohmann::json json = Outer::fields().to_json(outer);
  EXPECT_EQ(json.at("shape"), "round");
  EXPECT_EQ(json.at("inner").at("limit"), 11);
  EXPECT_EQ(json.at("scale"), 0.125);

  const Outer back = Outer::fields().from_json(nlohmann::json::parse(json.dump()));
  EXPECT_EQ(back.count, 9);
  EXPECT_EQ(back.shape, Shape::kRound);
  EXPECT_EQ(back.inner.limit, 11);
  EXPECT_DOUBLE_EQ(back.scale, 0.125);
  EXPECT_EQ(back.ranks, outer.ranks);
}

}  // namespace option_fields_test
}  // namespace ooze
