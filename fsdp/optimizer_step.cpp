#include "fsdp/optimizer_step.h"

#include "core/logging.h"
#include "fsdp/grad_clip.h"

namespace ooze::fsdp {

OptimizerStepResult clip_and_step(FullyShardedModule& model, ShardedAdamW& optimizer, double lr,
                         double clip_grad) {
  const GradNormResult norm = clip_grad_norm(model, clip_grad);
  OptimizerStepResult result;
  result.grad_norm = norm.norm;
  result.clip_coef = norm.clip_coef;
  if (norm.finite) {
    optimizer.step(lr);
  } else {
    // Every rank saw the same all-reduced norm, so every rank skips together.
    result.skipped = true;
    OOZE_LOG(WARN) << "gradient norm is " << norm.norm
                   << ": skipping this optimizer step (weights and AdamW state unchanged)";
  }
  model.zero_grad();
  return result;
}

}  // namespace ooze::fsdp
