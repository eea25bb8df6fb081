// Activation checkpointing for the C++ frontend, which has no torch.utils.checkpoint: run a
// block (a decoder layer) without keeping its intermediate activations, and run it again in
// backward to get its gradients. Trades one extra forward per block for the activation memory.
//
//   for (auto& layer : layers) {
//     hidden = checkpointed(
//         [&](const at::Tensor& x) { return layer->forward(x, position_ids, cu_seqlens); },
//         hidden, layer->parameters());
//   }
//
// Non-differentiable extras (position ids, cu_seqlens, ...) are captured by the lambda. They
// and the parameters must not change between forward and backward.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

namespace ooze {
namespace models {

using CheckpointedBlock = std::function<at::Tensor(const at::Tensor&)>;

// Returns block(input), keeping only `input` for backward. In backward, block is re-run with
// grad enabled on a detached copy of the input, and the gradients with respect to the input and
// to every tensor of `parameters` that requires grad are handed to the autograd engine as this
// node's input gradients. So parameter gradients accumulate into .grad (and parameter hooks
// fire) exactly as without checkpointing, and they flow even when `input` does not require
// grad. `parameters` must list every trainable tensor the block uses (layer->parameters()):
// one used but not listed gets no gradient.
//
// The block must be deterministic: RNG state is not saved and restored, because the models
// here have no dropout or other randomness in training. With grad disabled, or when neither
// the input nor any parameter requires grad, this is just block(input).
at::Tensor checkpointed(const CheckpointedBlock& block, const at::Tensor& input,
                        const std::vector<at::Tensor>& parameters);

}  // namespace models
}  // namespace ooze
