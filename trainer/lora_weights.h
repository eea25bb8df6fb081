// What the rollout engines of a LoRA run receive (--lora-rank, models/lora.h): the engines run
// the plain model, so the trainer sends its frozen base with each adapter merged into the
// weight it adapts, W + (alpha / r) B A, computed in fp32 from the adapter's gathered master
// weights and cast to the engine's dtype as it is packed.
//
// The first sync of an engine sends every weight; after it, only the adapted ones change, so a
// sync sends just those (WeightSyncer's partial syncs). With --lora-sync adapter the engines hold
// adapters themselves and receive A and B instead of merged weights:
//
//   WeightSyncer syncer(fsdp.sharded(),
//                       SyncedWeights{merged_lora_weights(fsdp, false),
//                                     merged_lora_weights(fsdp, /*adapted_only=*/true)}, ...);
#pragma once

#include <vector>

#include "fsdp/fsdp_transformer.h"
#include "trainer/trainer_buckets.h"

namespace ooze::trainer {

// Every parameter of the base model in Hugging Face order, adapted ones merged; with
// adapted_only, just the adapted ones. Throws Error when `model` has no adapters.
std::vector<SyncedTensor> merged_lora_weights(fsdp::FsdpTransformer& model, bool adapted_only);

// --lora-sync adapter, for engines that hold adapters of the same shape: every parameter, the
// frozen base and the adapters' A and B; with adapters_only, A and B alone.
std::vector<SyncedTensor> lora_adapter_weights(fsdp::FsdpTransformer& model, bool adapters_only);

}  // namespace ooze::trainer
