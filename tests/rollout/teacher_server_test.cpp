// The distillation teacher's client (--opd-type engine) against a real `ooze serve` engine
// server: the response tokens' log-probs it returns equal an independent computation (the
// model's packed forward and an fp64 log-softmax), for sequences and for a group of samples, and
// a server that cannot score says so.
#include "rollout/teacher_server.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "serving/engine_server.h"
#include "tests/support/expect_error.h"
#include "tests/support/reference_log_probs.h"
#include "tests/support/small_engine_options.h"
#include "tests/support/tiny_model.h"

namespace ooze::rollout {
namespace teacher_server_test {

TEST(TeacherServerTest, ResponseLogProbsEqualTheTeachersOwnForward) {
  engine::Engine engine(testing::small_engine_options(testing::tiny_model_dir()));
  serving::EngineServer server(engine, serving::ServerOptions{});

  const std::vector<std::vector<int64_t>> tokens = {
      {72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100},
      {49, 43, 50, 61, 51},
      {84, 104, 101, 32, 99, 97, 116, 32, 115, 97, 116, 32, 111, 110, 32, 109, 97, 116}};
  const std::vector<int64_t> responses = {4, 1, 11};
  TeacherServer teacher({server.url()}, std::chrono::seconds(60));
  const std::vector<std::vector<float>> scored = teacher.response_log_probs(tokens, responses);
  ASSERT_EQ(scored.size(), tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::vector<double> expected =
        testing::reference_log_probs(testing::tiny_model_dir(), tokens[i], responses[i]);
    ASSERT_EQ(scored[i].size(), expected.size()) << "sequence " << i;
    for (size_t t = 0; t < expected.size(); ++t) {
      EXPECT_NEAR(scored[i][t], expected[t], 1e-5) << "sequence " << i << " token " << t;
    }
  }

  // Nothing to score, and no server at all.
  EXPECT_CONTAINS(testing::error_message_of<Error>([&] {
                    teacher.response_log_probs({{1, 2, 3}}, {3});
                  }),
                  "sequence 0 has 3 tokens and a response of 3");
  TeacherServer nobody({"http://127.0.0.1:1"}, std::chrono::seconds(5));
  EXPECT_THROW(nobody.response_log_probs(tokens, responses), Error);
}

// A group's samples as the rollout manager hands them over: each generated response scored into
// teacher_log_probs (the same values as above), a sample scored already or without a response
// left alone, and a teacher that cannot be reached named with the samples it was to score.
TEST(TeacherServerTest, ScoresEverySampleOfAGroupThatHasAResponse) {
  engine::Engine engine(testing::small_engine_options(testing::tiny_model_dir()));
  serving::EngineServer first(engine, serving::ServerOptions{});
  serving::EngineServer second(engine, serving::ServerOptions{});

  std::vector<Sample> group(4);
  for (size_t i = 0; i < group.size(); ++i) {
    group[i].group_index = 3;
    group[i].index = 12 + static_cast<int64_t>(i);
    group[i].tokens = {49, 43, 50, 61, 51 + static_cast<int64_t>(i), 258};
    group[i].response_length = 2;
  }
  group[2].teacher_log_probs = {-1.0f, -2.0f};  // a generate function's own
  group[3].tokens.resize(4);
  group[3].response_length = 0;  // nothing to score
  TeacherServer teacher({first.url(), second.url()}, std::chrono::seconds(60));
  EXPECT_EQ(teacher.busy_seconds(), 0.0);
  teacher.score(group);
  for (size_t i : {0, 1}) {
    const std::vector<double> expected =
        testing::reference_log_probs(testing::tiny_model_dir(), group[i].tokens, 2);
    ASSERT_EQ(group[i].teacher_log_probs.size(), 2u) << "sample " << i;
    for (size_t t = 0; t < 2; ++t) {
      EXPECT_NEAR(group[i].teacher_log_probs[t], expected[t], 1e-5) << "sample " << i;
    }
  }
  EXPECT_EQ(group[2].teacher_log_probs, (std::vector<float>{-1.0f, -2.0f}));
  EXPECT_TRUE(group[3].teacher_log_probs.empty());
  EXPECT_GT(teacher.busy_seconds(), 0.0);

  group[0].teacher_log_probs.clear();
  TeacherServer nobody({"http://127.0.0.1:1"}, std::chrono::seconds(5));
  const std::string message = testing::error_message_of<Error>([&] { nobody.score(group); });
  EXPECT_CONTAINS(message, "the distillation teacher at http://127.0.0.1:1 could not score");
  EXPECT_CONTAINS(message, "sample 12 (group 3)");
  EXPECT_TRUE(group[0].teacher_log_probs.empty());
}

}  // namespace teacher_server_test
}  // namespace ooze::rollout
