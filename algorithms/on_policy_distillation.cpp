#include "algorithms/on_policy_distillation.h"

#include "core/error.h"

namespace ooze::algorithms {
namespace {

void check_lengths(const std::vector<at::Tensor>& student, const std::vector<at::Tensor>& teacher,
                   const std::vector<at::Tensor>& masks) {
  if (student.size() != masks.size() || teacher.size() != masks.size()) {
    throw Error("on-policy distillation: " + std::to_string(masks.size()) + " samples but " +
                std::to_string(student.size()) + " student and " + std::to_string(teacher.size()) +
                " teacher log-prob lists");
  }
  for (size_t i = 0; i < masks.size(); ++i) {
    if (student[i].numel() != masks[i].numel() || teacher[i].numel() != masks[i].numel()) {
      throw Error("on-policy distillation: sample " + std::to_string(i) + " has " +
                  std::to_string(masks[i].numel()) + " response tokens but " +
                  std::to_string(student[i].numel()) + " student and " +
                  std::to_string(teacher[i].numel()) +
                  " teacher log-probs (did the teacher score other tokens?)");
    }
  }
}

}  // namespace

const char* opd_type_name(OpdType type) {
  switch (type) {
    case OpdType::kTrainer:
      return "trainer";
    case OpdType::kEngine:
      return "engine";
    case OpdType::kSelf:
      return "self";
  }
  return "?";
}

const OptionFields<OpdOptions>& OpdOptions::fields() {
  using O = OpdOptions;
  static const OptionFields<O> fields = [] {
    OptionFields<O> f;
    f.section("algorithm");
    f.add("use_opd", &O::use_opd,
          "On-policy distillation: lower each sampled token's advantage by opd_kl_coef * "
          "(log p_student - log p_teacher), on top of any advantage estimator.");
    f.add_enum("opd_type", &O::type, {OpdType::kTrainer, OpdType::kEngine, OpdType::kSelf},
               opd_type_name,
               "Where the teacher scores the samples: trainer (a frozen sharded copy in the "
               "trainer ranks), engine (engines of its own, during the rollout) or self (OPSD: "
               "the initial policy shown --opsd-privileged-info-key, a JSD term in the loss).");
    f.add("opd_kl_coef", &O::kl_coef,
          "Weight of the distillation term in the advantage (in the loss with --opd-type self).")
        .min(0);
    f.add("opd_teacher_hf_checkpoint", &O::teacher_hf_checkpoint,
          "The teacher's Hugging Face model directory: sharded in the trainer (--opd-type "
          "trainer), or loaded by the teacher engines ooze train launches (--opd-type engine); "
          "it must share the student's tokenizer.");
    f.add("opd_teacher_url", &O::teacher_url,
          "--opd-type engine, instead of --opd-teacher-hf-checkpoint: http://HOST:PORT of a "
          "server answering /generate with the teacher, served elsewhere (ooze serve --model "
          "TEACHER, or SGLang); the same tokenizer as the student.");
    f.add("opd_teacher_num_engines", &O::teacher_num_engines,
          "--opd-type engine --opd-teacher-hf-checkpoint: teacher engines to launch, each in a "
          "bundle (GPU) of its own after the rollout engines'.")
        .min(1);
    f.add("opd_full_vocab", &O::full_vocab,
          "--opd-type trainer: distil the teacher's whole distribution at each response token "
          "(the generalized JSD of --opsd-beta, capped by --opsd-jsd-clip, added to the loss "
          "with weight --opd-kl-coef, as GKD does) instead of shaping the advantage with the "
          "sampled tokens' log-probs. --opd-type self always does.");
    f.add("opsd_beta", &O::opsd_beta,
          "--opd-type self or --opd-full-vocab: the generalized JSD's weight of the teacher in "
          "the mixture; 0 is KL(teacher || student), 1 is KL(student || teacher), 0.5 the "
          "symmetric JSD.")
        .min(0)
        .max(1);
    f.add("opsd_jsd_clip", &O::opsd_jsd_clip,
          "--opd-type self or --opd-full-vocab: cap on each token's JSD (tokens above it pull no "
          "further); 0: no cap.")
        .min(0);
    f.add("opsd_privileged_info_key", &O::opsd_privileged_info_key,
          "--opd-type self: the sample field the teacher sees after the prompt: label (the "
          "--label-key value) or a key of the --metadata-key object, as text.");
    f.add_rule([](const O& o) {
      if (!o.launches_teacher_engines() && o.teacher_num_engines != 1) {
        throw ConfigError(
            "--opd-teacher-num-engines has no effect without --use-opd --opd-type engine "
            "--opd-teacher-hf-checkpoint");
      }
      if (o.full_vocab && !(o.use_opd && o.type == OpdType::kTrainer)) {
        throw ConfigError(
            "--opd-full-vocab needs --use-opd --opd-type trainer: only a teacher in the trainer "
            "gives whole distributions (an engine returns the sampled tokens' log-probs; "
            "--opd-type self always uses them)");
      }
      if (o.self_distills() && o.opsd_privileged_info_key.empty()) {
        throw ConfigError(
            "--use-opd --opd-type self needs --opsd-privileged-info-key: the sample field (label, "
            "or a --metadata-key field) the teacher is shown, without which it is the student");
      }
      if (!o.self_distills() && !o.opsd_privileged_info_key.empty()) {
        throw ConfigError(
            "--opsd-privileged-info-key has no effect without --use-opd --opd-type self");
      }
      if (o.type == OpdType::kSelf) {
        if (!o.teacher_hf_checkpoint.empty() || !o.teacher_url.empty()) {
          throw ConfigError(
              "--opd-type self distils from the initial policy itself (the reference model): "
              "drop --opd-teacher-hf-checkpoint and --opd-teacher-url");
        }
        return;
      }
      const bool trainer = o.type == OpdType::kTrainer;
      if (o.use_opd && trainer && o.teacher_hf_checkpoint.empty()) {
        throw ConfigError(
            "--use-opd --opd-type trainer needs --opd-teacher-hf-checkpoint: the "
            "teacher's model");
      }
      if (o.use_opd && !trainer && o.teacher_url.empty() == o.teacher_hf_checkpoint.empty()) {
        throw ConfigError(
            "--use-opd --opd-type engine needs exactly one of --opd-teacher-hf-checkpoint (ooze "
            "train launches the teacher's engines) and --opd-teacher-url (a teacher served "
            "elsewhere), " +
            std::string(o.teacher_url.empty() ? "got neither" : "got both"));
      }
      if (!o.use_opd && !o.teacher_hf_checkpoint.empty()) {
        throw ConfigError("--opd-teacher-hf-checkpoint has no effect without --use-opd");
      }
      if ((!o.use_opd || trainer) && !o.teacher_url.empty()) {
        throw ConfigError("--opd-teacher-url has no effect without --use-opd --opd-type engine");
      }
    });
    return f;
  }();
  return fields;
}

std::vector<at::Tensor> distilled_advantages(const std::vector<at::Tensor>& advantages,
                                             const std::vector<at::Tensor>& student,
                                             const std::vector<at::Tensor>& teacher,
                                             const std::vector<at::Tensor>& masks, double coef) {
  check_lengths(student, teacher, masks);
  if (advantages.size() != masks.size()) {
    throw Error("on-policy distillation: " + std::to_string(advantages.size()) +
                " advantage lists for " + std::to_string(masks.size()) + " samples");
  }
  std::vector<at::Tensor> distilled;
  for (size_t i = 0; i < masks.size(); ++i) {
    const at::Tensor gap =
        (student[i].to(at::kFloat) - teacher[i].to(at::kFloat)) * masks[i].to(at::kFloat);
    distilled.push_back(advantages[i] - coef * gap.to(advantages[i].scalar_type()));
  }
  return distilled;
}

double mean_opd_kl(const std::vector<at::Tensor>& student, const std::vector<at::Tensor>& teacher,
                   const std::vector<at::Tensor>& masks) {
  check_lengths(student, teacher, masks);
  double sum = 0, tokens = 0;
  for (size_t i = 0; i < masks.size(); ++i) {
    const at::Tensor mask = masks[i].to(at::kDouble);
    sum += ((student[i].to(at::kDouble) - teacher[i].to(at::kDouble)) * mask).sum().item<double>();
    tokens += mask.sum().item<double>();
  }
  return tokens > 0 ? sum / tokens : 0.0;
}

}  // namespace ooze::algorithms
