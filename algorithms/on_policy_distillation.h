// On-policy distillation (OPD), Slime's --use-opd: the student learns on its own rollouts from
// a teacher's log-probs of the very tokens it sampled. Whatever the advantage estimator gave
// (GRPO, PPO, REINFORCE++, or zeros without a reward), each response token's advantage is
// lowered by the sampled-token estimate of the reverse KL between student and teacher:
//
//   A'_t = A_t - opd_kl_coef * (log p_student(y_t) - log p_teacher(y_t))
//
// so tokens the teacher finds likelier than the student does are pushed up, and the others down.
// The student's log-probs are the old policy's (those the ratio of the policy loss starts from).
//
// Where the teacher's log-probs come from (--opd-type):
//   trainer  a frozen copy of --opd-teacher-hf-checkpoint sharded beside the policy in the
//            trainer ranks (like the reference model), scoring the batch before the step;
//   engine   engines answering SGLang's /generate score each sample's tokens as a prompt
//            (logprob_start_len, nothing generated) as the sample finishes generating, into
//            Sample::teacher_log_probs (rollout/teacher_server.h): --opd-teacher-num-engines
//            engines `ooze train` launches on --opd-teacher-hf-checkpoint, in bundles of their
//            own, or a server elsewhere at --opd-teacher-url (`ooze serve`, or SGLang);
//   self     OPSD, on-policy self-distillation: the frozen initial policy is the teacher, shown
//            privileged information (--opsd-privileged-info-key: a reference solution, the
//            answer) after the prompt. It does not shape the advantage: the trainer adds the
//            full-vocabulary generalized JSD between student and teacher at every response token
//            to the loss, weighted by --opd-kl-coef (algorithms/vocabulary_distillation.h).
//
// --opd-full-vocab takes that loss to the trainer's teacher (GKD): instead of the sampled tokens'
// log-probs in the advantage, the JSD between the teacher's and the student's whole distributions
// at every response token. Where the answer is a token or two, a sampled token tells the student
// only that it was wrong, as a binary reward would; the distribution says what is right.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/option_fields.h"

namespace ooze::algorithms {

enum class OpdType { kTrainer, kEngine, kSelf };
const char* opd_type_name(OpdType type);

struct OpdOptions {
  bool use_opd = false;
  OpdType type = OpdType::kTrainer;
  double kl_coef = 1.0;
  std::string teacher_hf_checkpoint;  // trainer, engine: the teacher's Hugging Face directory
  std::string teacher_url;            // engine: http://HOST:PORT of a teacher served elsewhere
  bool full_vocab = false;            // trainer: the JSD loss on whole distributions (as self)
  int64_t teacher_num_engines = 1;    // engine without a URL: teacher engines ooze train starts
  // self and full_vocab: the JSD's mixing weight (0: KL(teacher || student), 1: KL(student ||
  // teacher)), the per-token cap on it (0: none), and the sample field the teacher is shown.
  double opsd_beta = 0.5;
  double opsd_jsd_clip = 0.0;
  std::string opsd_privileged_info_key;

  // Whether the advantage is shaped by the sampled tokens' teacher log-probs (trainer and
  // engine); whether the loss has the JSD term over the vocabulary (self, or trainer with
  // full_vocab); and whether that teacher is the initial policy shown privileged information.
  bool shapes_advantages() const { return use_opd && !distills_vocabulary(); }
  bool distills_vocabulary() const { return use_opd && (type == OpdType::kSelf || full_vocab); }
  bool self_distills() const { return use_opd && type == OpdType::kSelf; }

  // --opd-type engine with --opd-teacher-hf-checkpoint: the job launches the teacher's engines.
  bool launches_teacher_engines() const {
    return use_opd && type == OpdType::kEngine && teacher_url.empty();
  }

  // --use-opd, --opd-type, --opd-kl-coef, --opd-teacher-hf-checkpoint, --opd-teacher-url,
  // --opd-teacher-num-engines, --opd-full-vocab, --opsd-beta, --opsd-jsd-clip,
  // --opsd-privileged-info-key
  // ("algorithm" section).
  static const OptionFields<OpdOptions>& fields();

  template <class A>
  void save(A& ar) const {
    save_options(ar, *this);
  }
  template <class A>
  void load(A& ar) {
    load_options(ar, *this);
  }
};

// advantages[i] - coef * (student[i] - teacher[i]) on the response tokens (mask 1), the others
// unchanged. Every list holds one [R_i] tensor per sample. Throws ooze::Error naming the sample
// when lengths differ.
std::vector<at::Tensor> distilled_advantages(const std::vector<at::Tensor>& advantages,
                                             const std::vector<at::Tensor>& student,
                                             const std::vector<at::Tensor>& teacher,
                                             const std::vector<at::Tensor>& masks, double coef);

// The mean over every response token of the batch of log p_student - log p_teacher: the
// sampled-token estimate of KL(student || teacher) that train/opd_kl reports.
double mean_opd_kl(const std::vector<at::Tensor>& student, const std::vector<at::Tensor>& teacher,
                   const std::vector<at::Tensor>& masks);

}  // namespace ooze::algorithms
