// Modules declare their own config fields under a section named after themselves, possibly in
// several places of one schema; help() and describe() list each section's fields together.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/config.h"

namespace ooze {
namespace config_sections_test {

// "optimizer" is declared twice, with "fsdp" in between, as two modules adding fields would.
ConfigSchema interleaved_schema() {
  ConfigSchema schema;
  schema.add_int("seed", 1, "Random seed.");  // before any section(): "general"
  schema.section("optimizer");
  schema.add_double("lr", 1e-6, "Peak learning rate.").greater_than(0);
  schema.section("fsdp");
  schema.add_bool("cpu_offload", false, "Keep master weights on the CPU.");
  schema.section("optimizer");
  schema.add_double("weight_decay", 0.01, "Decoupled weight decay.").min(0);
  schema.section("batching");
  schema.add_int("micro_batch_tokens", 4096, "Token budget of one micro-batch.").min(1);
  return schema;
}

// Position of `part` in `text`, failing the test when absent.
size_t position(const std::string& text, const std::string& part) {
  size_t at = text.find(part);
  EXPECT_NE(at, std::string::npos) << "'" << part << "' missing from:\n" << text;
  return at;
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(ConfigSections, SectionsAreListedOnceInOrderOfFirstUse) {
  EXPECT_EQ(interleaved_schema().sections(),
            (std::vector<std::string>{"general", "optimizer", "fsdp", "batching"}));
}

TEST(ConfigSections, HelpGroupsFieldsUnderTheirSection) {
  const std::string help = interleaved_schema().help();
  EXPECT_EQ(count(help, "\noptimizer:\n"), 1u) << help;
  const size_t general = position(help, "\ngeneral:\n");
  const size_t optimizer = position(help, "\noptimizer:\n");
  const size_t fsdp = position(help, "\nfsdp:\n");
  const size_t batching = position(help, "\nbatching:\n");
  EXPECT_LT(general, position(help, "--seed <int>"));
  EXPECT_LT(position(help, "--seed <int>"), optimizer);
  // Both optimizer fields, in declaration order, before the next section.
  EXPECT_LT(optimizer, position(help, "--lr <float>"));
  EXPECT_LT(position(help, "--lr <float>"), position(help, "--weight-decay <float>"));
  EXPECT_LT(position(help, "--weight-decay <float>"), fsdp);
  EXPECT_LT(fsdp, position(help, "--[no-]cpu-offload"));
  EXPECT_LT(position(help, "--[no-]cpu-offload"), batching);
  EXPECT_LT(batching, position(help, "--micro-batch-tokens <int>"));
}

TEST(ConfigSections, DescribeGroupsFieldsLikeHelp) {
  const std::string text =
      load_config(interleaved_schema(), "", {"--weight-decay", "0.1"}).describe();
  EXPECT_EQ(count(text, "optimizer:\n"), 1u) << text;
  const size_t optimizer = position(text, "optimizer:\n");
  const size_t fsdp = position(text, "fsdp:\n");
  EXPECT_LT(position(text, "general:\n"), optimizer);
  EXPECT_LT(optimizer, position(text, " lr "));
  EXPECT_LT(position(text, " lr "), position(text, "* weight_decay"));
  EXPECT_LT(position(text, "* weight_decay"), fsdp);
  EXPECT_LT(fsdp, position(text, " cpu_offload "));
  EXPECT_LT(position(text, " cpu_offload "), position(text, "batching:\n"));
  EXPECT_NE(text.find("(flag --weight-decay; default 0.01)"), std::string::npos) << text;
}

}  // namespace config_sections_test
}  // namespace ooze
