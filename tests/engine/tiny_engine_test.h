// What the engine tests share: the tests' tiny Qwen3 (tests/support/tiny_model.h), the same
// weights loaded into a plain TransformerModel as the independent reference, one intra-op
// thread, and prompts of printable byte tokens.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "models/hf_checkpoint.h"
#include "models/model_config.h"
#include "models/transformer.h"
#include "tests/support/tiny_model.h"

namespace ooze::testing {

// `length` printable byte tokens, different for each `salt`.
inline std::vector<int64_t> prompt(int64_t length, int64_t salt) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < length; ++i) ids.push_back(32 + (i * 7 + salt * 13) % 90);
  return ids;
}

class TinyEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    at::set_num_threads(1);
    dir_ = new std::string(tiny_model_dir());
    reference_ = new models::TransformerModel(models::load_model_config(*dir_));
    models::load_hf_weights(**reference_, *dir_);
    (*reference_)->eval();
  }

  static inline std::string* dir_ = nullptr;
  static inline models::TransformerModel* reference_ = nullptr;
};

}  // namespace ooze::testing
