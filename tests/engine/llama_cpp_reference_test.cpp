// ooze's engine against llama.cpp, an engine no one here wrote: a small Qwen3 (byte tokenizer,
// its LM head scaled so that the distributions are peaked, not flat) is exported by
// models::export_gguf and loaded by the prebuilt llama.cpp of npm's node-llama-cpp
// (tests/engine/llama_cpp_engine.mjs). Both engines decode greedily from the same prompts; the
// tokens must be the same, and every prompt and output log-prob within a stated tolerance.
//
// llama.cpp runs here with an F32 KV cache and without flash attention (which computes in F16
// on the CPU): with its defaults the log-probs are ~5e-4 off an fp64 forward.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "engine/engine.h"
#include "models/gguf_export.h"
#include "models/model_init.h"
#include "tests/support/llama_cpp_engine.h"
#include "tests/support/process.h"

namespace ooze::engine {
namespace llama_cpp_reference_test {

namespace fs = std::filesystem;
using nlohmann::json;

// The repository this test was compiled from (CMake passes absolute source paths).
fs::path source_root() { return fs::path(__FILE__).parent_path().parent_path().parent_path(); }

constexpr int64_t kNewTokens = 12;
constexpr float kLmHeadScale = 8.0f;

// A Qwen3 with the byte tokenizer whose LM head is kLmHeadScale times its initial one.
std::string peaked_model(const std::string& dir) {
  models::ModelInitOptions options;
  options.arch = "qwen3";
  options.hidden_size = 128;
  options.num_layers = 2;
  options.num_heads = 4;
  options.num_kv_heads = 2;
  options.head_dim = 32;
  options.intermediate_size = 256;
  options.tokenizer = "byte";
  options.out_dir = dir;
  options.seed = 3;
  models::init_hf_model(options);
  const std::string weights = dir + "/model.safetensors";
  NamedTensors tensors;
  {
    const SafetensorsFile file = SafetensorsFile::open(weights);
    for (const std::string& name : file.names()) {
      at::Tensor tensor = file.tensor(name).clone();
      if (name == "lm_head.weight") tensor.mul_(kLmHeadScale);
      tensors.emplace_back(name, tensor);
    }
  }
  save_safetensors(weights, tensors, {{"format", "pt"}});
  return dir;
}

struct Greedy {
  std::vector<int64_t> output_ids;
  std::vector<double> output_logprobs;
  std::vector<double> input_logprobs;  // positions 1..n-1
};

std::vector<Greedy> run_ooze(const std::string& model,
                             const std::vector<std::vector<int64_t>>& prompts) {
  at::set_num_threads(1);
  EngineOptions options;
  options.model_dir = model;
  options.kv_cache_blocks = 64;
  options.intra_op_threads = 1;
  Engine engine(options);
  std::vector<Greedy> results;
  for (const std::vector<int64_t>& prompt : prompts) {
    GenerateRequest request;
    request.input_ids = prompt;
    request.sampling.temperature = 0.0;
    request.sampling.max_new_tokens = kNewTokens;
    request.sampling.ignore_eos = true;
    request.return_logprob = true;
    request.logprob_start_len = 0;
    const GenerateOutput output = engine.generate(request).at(0);
    Greedy greedy;
    greedy.output_ids = output.output_ids;
    greedy.output_logprobs.assign(output.output_logprobs.begin(), output.output_logprobs.end());
    // From position 1 on (engine/request.h): the first token has no prefix.
    greedy.input_logprobs.assign(output.input_logprobs.begin(), output.input_logprobs.end());
    results.push_back(greedy);
  }
  return results;
}

std::vector<Greedy> run_llama_cpp(const std::string& gguf,
                                  const std::vector<std::vector<int64_t>>& prompts,
                                  const std::string& dir) {
  const json answer = ::ooze::testing::run_llama_cpp_engine(
      "logprobs",
      {{"model", gguf}, {"threads", 1}, {"prompts", prompts}, {"max_new_tokens", kNewTokens}}, dir);
  std::vector<Greedy> results;
  if (!answer.contains("results")) {
    ADD_FAILURE() << "no results from llama.cpp: " << answer.dump();
    return results;
  }
  for (const json& result : answer["results"]) {
    Greedy greedy;
    greedy.output_ids = result["output_ids"].get<std::vector<int64_t>>();
    // null: below float32's smallest probability (about -87), kept as NaN.
    auto logprob = [](const json& value) { return value.is_null() ? NAN : value.get<double>(); };
    for (const json& value : result["output_logprobs"]) {
      greedy.output_logprobs.push_back(logprob(value));
    }
    for (size_t i = 1; i < result["input_logprobs"].size(); ++i) {
      greedy.input_logprobs.push_back(logprob(result["input_logprobs"][i]));
    }
    results.push_back(greedy);
  }
  return results;
}

class LlamaCppReferenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path package =
        source_root() / ".deps/npm-llama/node_modules/node-llama-cpp/package.json";
    if (std::system("node --version > /dev/null 2>&1") != 0) {
      GTEST_SKIP() << "node is not installed (scripts/install-deps.sh installs it)";
    }
    if (!fs::exists(package)) {
      GTEST_SKIP() << "node-llama-cpp is not in .deps/npm-llama (run scripts/install-deps.sh)";
    }
    dir_ = ::ooze::testing::make_temp_dir("llama-cpp-reference");
    model_ = peaked_model(dir_ + "/model");
  }
  void TearDown() override {
    if (!dir_.empty() && !HasFailure()) fs::remove_all(dir_);
  }

  // Greedy tokens equal, and the largest log-prob difference (prompt and output) below
  // `tolerance`; returns that difference.
  double compare(models::GgufType type, double tolerance) {
    const std::string gguf = dir_ + "/model.gguf";
    const models::GgufExport written = models::export_gguf(model_, gguf, type);
    EXPECT_EQ(written.tensors, 25);  // embedding, final norm, LM head, 11 per layer
    EXPECT_EQ(written.bytes, fs::file_size(gguf));
    const std::vector<std::vector<int64_t>> prompts = {
        {72, 101, 108, 108, 111},
        {256, 10, 84, 104, 101, 32, 97, 110, 115, 119, 101, 114},
        {5,   9,   200, 31, 77, 77, 77, 140, 33, 2,  64,  64,  12, 250, 99, 1,  0,  45, 67,  89,
         120, 121, 122, 3,  18, 44, 90, 91,  92, 93, 160, 161, 7,  8,   13, 21, 34, 55, 144, 233}};
    const std::vector<Greedy> ooze = run_ooze(model_, prompts);
    const std::vector<Greedy> llama = run_llama_cpp(gguf, prompts, dir_);
    if (llama.size() != prompts.size()) {
      ADD_FAILURE() << "llama.cpp answered " << llama.size() << " of " << prompts.size();
      return INFINITY;
    }
    // The difference at one position; where llama.cpp's probability underflowed, ooze's must be
    // as small.
    auto difference = [](double ooze_logprob, double llama_logprob) {
      if (std::isnan(llama_logprob)) return ooze_logprob < -80 ? 0.0 : INFINITY;
      return std::abs(ooze_logprob - llama_logprob);
    };
    double largest = 0, greedy_logprob_sum = 0;
    size_t greedy_count = 0;
    for (size_t p = 0; p < prompts.size(); ++p) {
      EXPECT_EQ(ooze[p].output_ids, llama[p].output_ids) << "prompt " << p;
      if (ooze[p].output_ids != llama[p].output_ids) continue;
      for (size_t i = 0; i < ooze[p].output_logprobs.size(); ++i) {
        largest =
            std::max(largest, difference(ooze[p].output_logprobs[i], llama[p].output_logprobs[i]));
        greedy_logprob_sum += ooze[p].output_logprobs[i];
        ++greedy_count;
      }
      EXPECT_EQ(ooze[p].input_logprobs.size(), llama[p].input_logprobs.size());
      for (size_t i = 0;
           i < std::min(ooze[p].input_logprobs.size(), llama[p].input_logprobs.size()); ++i) {
        largest =
            std::max(largest, difference(ooze[p].input_logprobs[i], llama[p].input_logprobs[i]));
      }
    }
    // Peaked: the greedy tokens are far likelier than the uniform 1/259 (log -5.56), so a
    // difference in the logits would show.
    EXPECT_GT(greedy_logprob_sum / std::max<size_t>(greedy_count, 1), -2.0);
    EXPECT_LT(largest, tolerance);
    std::printf("%s GGUF: greedy tokens equal, largest log-prob difference %.3g\n",
                type == models::GgufType::kF16 ? "f16" : "f32", largest);
    return largest;
  }

  std::string dir_, model_;
};

TEST_F(LlamaCppReferenceTest, Float32GgufGivesOozesTokensAndLogProbs) {
  compare(models::GgufType::kF32, 1e-4);
}

TEST_F(LlamaCppReferenceTest, Float16GgufStaysCloseToOozesFloat32) {
  // Matrices rounded to float16 (a relative 2^-11 each): llama.cpp on them against ooze on the
  // float32 originals.
  compare(models::GgufType::kF16, 0.02);
}

}  // namespace llama_cpp_reference_test
}  // namespace ooze::engine
