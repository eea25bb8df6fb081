// Trained sharded weights outside the trainer, across real rank processes
// (tests/fsdp/fsdp_worker.cpp) at W = 2: the streamed Hugging Face export (fsdp/hf_export.h)
// loads into a plain TransformerModel that gives the sharded model's logits exactly, and the
// frozen reference model (trainer/reference_model.h) scores tokens as the plain model does.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "fsdp/fsdp_transformer.h"
#include "models/hf_checkpoint.h"
#include "models/log_probs.h"
#include "models/model_config.h"
#include "tests/fsdp/worker_launcher.h"
#include "tests/support/process.h"
#include "tests/support/training_fixture.h"

namespace hf_export_test {

namespace fs = std::filesystem;
using namespace ooze::fsdp_test;
using std::chrono::milliseconds;

// The global batch the worker scores (kScoreStep in fsdp_worker.cpp).
constexpr int kScoreStep = 100;

std::map<std::string, torch::Tensor> read_tensors(const std::string& path) {
  const ooze::SafetensorsFile file = ooze::SafetensorsFile::open(path);
  std::map<std::string, torch::Tensor> out;
  for (const std::string& name : file.names()) out[name] = file.tensor(name).clone();
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

double max_abs_difference(const torch::Tensor& a, const torch::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

// The exported directory holds one safetensors file per FSDP unit, in unit order, and an
// index that maps every parameter of the model to the file of its unit.
void expect_layout(const std::string& hf, bool tied) {
  const auto config = tiny_config(tied);
  const auto prefixes = ooze::fsdp::FsdpTransformer::unit_prefixes(config);
  const size_t files = prefixes.size() + 1;  // + the root: final norm (and lm_head)
  ASSERT_TRUE(fs::exists(hf + "/config.json"));
  ASSERT_TRUE(fs::exists(hf + "/model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(hf + "/model.safetensors"));
  const nlohmann::json index =
      nlohmann::json::parse(read_file(hf + "/model.safetensors.index.json"));
  const nlohmann::json& weight_map = index.at("weight_map");
  auto model = make_model(tied);
  EXPECT_EQ(weight_map.size(), model->named_parameters().size());
  EXPECT_EQ(index.at("metadata").at("total_size").get<int64_t>(), 4 * config.num_parameters());
  std::map<std::string, std::set<std::string>> names_by_file;
  for (const auto& item : model->named_parameters()) {
    ASSERT_TRUE(weight_map.contains(item.key())) << item.key();
    names_by_file[weight_map.at(item.key()).get<std::string>()].insert(item.key());
  }
  ASSERT_EQ(names_by_file.size(), files);
  for (size_t i = 0; i < files; ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i + 1, files);
    ASSERT_TRUE(names_by_file.count(name)) << name;
    const ooze::SafetensorsFile file = ooze::SafetensorsFile::open(hf + "/" + name);
    const std::vector<std::string> held = file.names();
    EXPECT_EQ(std::set<std::string>(held.begin(), held.end()), names_by_file[name]) << name;
    for (const std::string& tensor : held) {
      if (i < prefixes.size()) {
        EXPECT_EQ(tensor.rfind(prefixes[i] + ".", 0), 0u) << tensor;
      }
      EXPECT_EQ(file.info(tensor).dtype, ooze::SafetensorsDtype::F32) << tensor;
    }
    EXPECT_EQ(file.metadata().at("format"), "pt");
  }
  EXPECT_EQ(weight_map.contains("lm_head.weight"), !tied);
}

TEST(FsdpHfExport, ExportedModelGivesTheShardedModelsLogitsExactly) {
  at::set_num_threads(1);
  const std::string dir = ooze::testing::make_temp_dir("fsdp-hf-export");
  fs::create_directories(dir + "/tokenizer_source");
  const std::string tokenizer_json = "{\"model\": {\"type\": \"BPE\"}, \"tag\": \"export-test\"}\n";
  std::ofstream(dir + "/tokenizer_source/tokenizer.json") << tokenizer_json;
  std::ofstream(dir + "/tokenizer_source/tokenizer_config.json") << "{\"model_max_length\": 8}\n";
  // An earlier export at the same path is replaced.
  fs::create_directories(dir + "/hf_untied");
  std::ofstream(dir + "/hf_untied/config.json") << "{}";
  std::ofstream(dir + "/hf_untied/stale.bin") << "old";

  launch_workers_expecting_success(
      2,
      {"name=untied,mode=hf_export,steps=3,hf=" + dir + "/hf_untied",
       "name=tied,mode=hf_export,model=tied,steps=3,hf=" + dir + "/hf_tied"},
      dir);
  for (const bool tied : {false, true}) {
    const std::string name = tied ? "tied" : "untied";
    SCOPED_TRACE(name);
    const std::string hf = dir + "/hf_" + name;
    expect_layout(hf, tied);
    EXPECT_FALSE(fs::exists(hf + "/stale.bin"));
    EXPECT_EQ(read_file(hf + "/tokenizer.json"), tokenizer_json);
    EXPECT_TRUE(fs::exists(hf + "/tokenizer_config.json"));
    for (const auto& entry : fs::directory_iterator(dir)) {
      EXPECT_EQ(entry.path().filename().string().find("hf_" + name + ".tmp"), std::string::npos)
          << "leftover " << entry.path();
    }

    ASSERT_TRUE(fs::exists(dir + "/" + name + ".safetensors"));
    const auto outcome = read_tensors(dir + "/" + name + ".safetensors");
    ooze::models::TransformerModel plain(ooze::models::load_model_config(hf));
    ooze::models::load_hf_weights(*plain, hf);
    double weight_diff = 0.0;
    for (const auto& item : plain->named_parameters()) {
      weight_diff = std::max(weight_diff, max_abs_difference(item.value(), outcome.at(item.key())));
    }
    EXPECT_EQ(weight_diff, 0.0);

    const PackedBatch batch =
        pack(global_sequences(kScoreStep, plain->config().vocab_size), 0, kGlobalSequences);
    torch::NoGradGuard no_grad;
    const torch::Tensor logits =
        plain->logits(plain->forward(batch.input_ids, batch.position_ids, batch.cu_seqlens));
    const double diff = max_abs_difference(logits, outcome.at("logits"));
    std::printf("%s: max |exported model's logits - sharded model's| = %.3g\n", name.c_str(), diff);
    EXPECT_EQ(diff, 0.0);
    // The export holds the trained weights, not the initial ones.
    auto initial = make_model(tied);
    const torch::Tensor initial_logits =
        initial->logits(initial->forward(batch.input_ids, batch.position_ids, batch.cu_seqlens));
    EXPECT_GT(max_abs_difference(initial_logits, logits), 1e-3);
  }
}

// log p of every predicted token (each sequence's tokens after its first), in the order the
// worker gathers them (rank slices, sequence by sequence): through compute_token_log_probs in
// fp32 as the trainer computes them, and independently in double precision from the plain
// model's logits.
struct PlainScores {
  torch::Tensor fp32, fp64;
};

PlainScores plain_scores(ooze::models::TransformerModel& model, int world) {
  torch::NoGradGuard no_grad;
  const int per_rank = kGlobalSequences / world;
  const auto sequences = global_sequences(kScoreStep, model->config().vocab_size);
  std::vector<torch::Tensor> fp32, fp64;
  for (int r = 0; r < world; ++r) {
    const PackedBatch batch = pack(sequences, r * per_rank, per_rank);
    const torch::Tensor hidden =
        model->forward(batch.input_ids, batch.position_ids, batch.cu_seqlens);
    const torch::Tensor predicted = batch.mask.to(torch::kBool);
    fp32.push_back(
        ooze::models::compute_token_log_probs(hidden, model->lm_head_weight(), batch.targets)
            .log_probs.masked_select(predicted));
    const torch::Tensor logits = model->logits(hidden).to(torch::kDouble);
    const torch::Tensor log_z = logits.logsumexp(-1);
    fp64.push_back((logits.gather(-1, batch.targets.unsqueeze(-1)).squeeze(-1) - log_z)
                       .masked_select(predicted));
  }
  return {torch::cat(fp32), torch::cat(fp64)};
}

TEST(FsdpReferenceModel, ScoresAsThePlainModelAndStaysFrozen) {
  at::set_num_threads(1);
  const std::string dir = ooze::testing::make_temp_dir("fsdp-reference");
  const std::string hf = dir + "/other_model";
  auto other = make_model(false, kInitSeed + 21);
  ooze::models::save_hf_model(hf, other->config(), *other, "");

  launch_workers_expecting_success(2, {"name=reference,mode=reference,hf=" + hf}, dir);
  ASSERT_TRUE(fs::exists(dir + "/reference.safetensors"));
  const auto outcome = read_tensors(dir + "/reference.safetensors");

  // The copy of the initial policy, after the policy trained 2 steps.
  auto initial = make_model(false);
  const PlainScores want_copy = plain_scores(initial, 2);
  const double copy_diff = max_abs_difference(outcome.at("copy_log_probs"), want_copy.fp32);
  const double copy_fp64 = max_abs_difference(outcome.at("copy_log_probs"), want_copy.fp64);
  std::printf("copy of the policy: max |log p - plain| = %.3g, vs fp64: %.3g\n", copy_diff,
              copy_fp64);
  EXPECT_LE(copy_diff, 1e-6);
  EXPECT_LE(copy_fp64, 1e-5);
  // The policy itself moved on: the reference is a copy, not a view of the policy's weights.
  EXPECT_GT(max_abs_difference(outcome.at("policy_log_probs"), want_copy.fp32), 1e-4);

  // Another Hugging Face checkpoint.
  const PlainScores want_hf = plain_scores(other, 2);
  const double hf_diff = max_abs_difference(outcome.at("hf_log_probs"), want_hf.fp32);
  const double hf_fp64 = max_abs_difference(outcome.at("hf_log_probs"), want_hf.fp64);
  std::printf("from a HF checkpoint: max |log p - plain| = %.3g, vs fp64: %.3g\n", hf_diff,
              hf_fp64);
  EXPECT_LE(hf_diff, 1e-6);
  EXPECT_LE(hf_fp64, 1e-5);
  EXPECT_GT(max_abs_difference(want_hf.fp32, want_copy.fp32), 1e-3);  // different models
}

}  // namespace hf_export_test
