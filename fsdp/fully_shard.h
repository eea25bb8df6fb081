// Fully sharded data parallelism for a torch::nn::Module, in the manner of PyTorch's
// fully_shard (FSDP2), made explicit for the C++ frontend.
//
// Units. The module's parameters are split into units: one per given name prefix (a unit holds
// the parameters named `prefix` or `prefix.*`), plus the root unit holding every parameter no
// prefix claimed. Each unit is one FlatParam (fsdp/flat_param.h): flattened, padded to a
// multiple of W and sharded; the module's parameters become views of the unit's unsharded
// buffer, which exists only while the unit is gathered.
//
// Why this is driven explicitly. LibTorch's C++ API has no module forward hooks, so FSDP's
// pre/post-forward and pre/post-backward hooks cannot be attached to modules. Instead the
// caller (for a transformer: fsdp/fsdp_transformer.h) runs each unit through run_unit(), which
// does what the hooks would:
//
//   forward of unit u (run_unit):
//     1. gather u (all_gather_async into its flat buffer, then wait); with prefetch, start the
//        gather of the next unit the caller names, so it overlaps u's compute;
//     2. run the block inside an autograd Function (UnitFunction) whose forward records the
//        block's own graph on a detached copy of the input (grad enabled inside), and returns
//        the output to the outer graph as a single node;
//     3. reshard u when reshard_after_forward (the recorded graph keeps its saved tensors as
//        views of u's storage, which is now released: they have shapes but no memory).
//   backward of unit u (UnitFunction::backward, called by the autograd engine in reverse order):
//     1. gather u again if it was resharded (waits for a prefetched gather); with prefetch, start
//        the gather of the unit that ran before u in forward;
//     2. run u's recorded graph backward with torch::autograd::grad, for the gradient of the
//        input and of every parameter of u: the saved views see the re-gathered storage;
//     3. start the reduce-scatter (fp32, average over ranks) of u's parameter gradients into
//        u's gradient shard, and reshard u; the reduce finishes when the next unit's starts
//        (one in flight) or in finish_backward().
//   the root unit: its parameters are used by the caller's own code around the units (final
//     norm, LM head, loss), so it is gathered once with hold_unsharded() and stays gathered
//     until finish_backward(); its gradients arrive in the parameters' .grad through ordinary
//     autograd and are reduce-scattered in finish_backward().
//
// Activation checkpointing of a unit is the caller's block wrapped in models::checkpointed:
// then the recorded graph keeps only the unit's input and recomputes the rest inside step 2.
//
// A unit's input may be undefined or not require grad (the embeddings take token ids): the
// Function also takes a private scalar that requires grad (the anchor), so the engine calls its
// backward for the parameters' sake whatever the input.
//
// Gradient accumulation: every micro-batch's backward reduce-scatters its gradients and they
// are ADDED to the fp32 gradient shards (memory stays sharded between micro-batches); the
// optimizer steps once after the last one. Because the reduce averages over ranks, a loss that
// is the mean over this rank's tokens gives the gradient of the mean over all ranks' tokens
// when every rank holds the same number of tokens; scale the loss otherwise.
//
// Every rank must issue the same sequence of collectives: run the same units in the same order
// on every rank (the same code over the same model does), whatever the data.
//
//   FullyShardedModule fsdp(*model, {"model.layers.0", "model.layers.1"}, comm, options);
//   fsdp.hold_unsharded(*fsdp.root_unit());
//   h = fsdp.run_unit(0, [&](const torch::Tensor& x) { return layer0->forward(x, ...); }, h, 1);
//   ...
//   loss.backward();
//   fsdp.finish_backward();  // gradients are in fsdp.unit(i).grad_shard()
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/option_fields.h"
#include "fsdp/flat_param.h"
#include "fsdp/mixed_precision.h"

namespace ooze::fsdp {

struct FullyShardOptions {
  MixedPrecisionPolicy mixed_precision;
  // Free each unit's gathered parameters after its forward and gather them again for its
  // backward (FSDP's default, ZeRO-3); off keeps them from forward to backward (ZeRO-2 memory).
  bool reshard_after_forward = true;
  // Start the next unit's all-gather before running the current one (forward: the unit the
  // caller names; backward: the unit that ran before in forward).
  bool prefetch = true;
  // Broadcast rank 0's parameter values before sharding, so ranks that built or loaded
  // different values still end identical (FSDP's sync_module_states).
  bool sync_module_states = false;
  // Leave the parameters that do not require grad out of the units: they stay the module's own
  // tensors, replicated on every rank in their dtype, never gathered, reduced or stepped (the
  // frozen base of a LoRA model, whose units then hold only the adapters). Off, frozen
  // parameters are sharded like the rest (a reference model: 1/W of it per rank).
  bool replicate_frozen = false;

  // --bf16, --reshard-after-forward, --prefetch ("fsdp" section).
  static const OptionFields<FullyShardOptions>& fields();
};

// The name of the root unit in errors and listings.
constexpr const char* kRootUnitName = "<root>";

class FullyShardedModule {
 public:
  using UnitBlock = std::function<torch::Tensor(const torch::Tensor&)>;

  // Shards `module` (whose parameters must hold their initial values, identical on every rank
  // unless sync_module_states) into one unit per prefix plus the root. `comm` is the sharding
  // group; null means a single rank. The module must outlive this object, and from now on its
  // parameters are views of the units' unsharded buffers (in param_dtype): use it only through
  // this object. Throws ooze::Error when a prefix matches no parameter, a parameter matches two
  // prefixes, or the module has no parameters (no trainable ones, with replicate_frozen). With
  // replicate_frozen a prefix whose parameters are all frozen gets no unit.
  FullyShardedModule(torch::nn::Module& module, const std::vector<std::string>& unit_prefixes,
                     std::shared_ptr<comm::Communicator> comm, FullyShardOptions options);
  ~FullyShardedModule();
  FullyShardedModule(const FullyShardedModule&) = delete;
  FullyShardedModule& operator=(const FullyShardedModule&) = delete;

  const FullyShardOptions& options() const { return options_; }
  int rank() const { return comm_ ? comm_->rank() : 0; }
  int world_size() const { return comm_ ? comm_->size() : 1; }
  const std::shared_ptr<comm::Communicator>& communicator() const { return comm_; }

  // Units in prefix order, the root (when it has parameters) last.
  size_t num_units() const { return units_.size(); }
  FlatParam& unit(size_t index) { return *units_.at(index); }
  const FlatParam& unit(size_t index) const { return *units_.at(index); }
  // Index of the unit named `name` (a prefix, or kRootUnitName); throws ooze::Error if none.
  size_t unit_index(const std::string& name) const;
  // The same, or nothing when no unit has that name.
  std::optional<size_t> find_unit(const std::string& name) const;
  std::optional<size_t> root_unit() const { return root_; }

  // Runs `block(input)` as unit `unit` (see the header comment). `input` may be undefined.
  // `prefetch_next`: the unit the caller will run next, gathered in the background while this
  // one computes (when options().prefetch). Without grad, or when neither the input nor the
  // unit's parameters require grad, this is gather, block, reshard.
  torch::Tensor run_unit(size_t unit, const UnitBlock& block, const torch::Tensor& input,
                         std::optional<size_t> prefetch_next = std::nullopt);

  // Gathers `unit` and keeps it gathered until finish_backward() or reshard_all(); its
  // parameters may then be used anywhere, and their gradients are taken from .grad.
  void hold_unsharded(size_t unit);
  // Starts gathering `unit` (a prefetch).
  void unshard_async(size_t unit);

  // After loss.backward(): reduce-scatters the held units' .grad, waits for every
  // reduce-scatter in flight (gradient shards are then complete and their padding zero) and
  // reshards every unit. release_held = false keeps the held units gathered, for when the graph
  // of another forward (a later micro-batch) still needs them in its backward.
  void finish_backward(bool release_held = true);
  // Frees every gathered unit (after a forward that had no backward, e.g. scoring).
  void reshard_all();
  // The unit's full flat master vector (padding included) in `dtype`, all-gathered from every
  // rank's master shard, for readers of whole weights (HF export, weight sync). A collective
  // when W > 1: every rank asks for the same units in the same order. W = 1 in the master's
  // dtype: the shard itself. `buffer`, when given, holds the result: it is grown when too small
  // and reused by the next call, since a fresh allocation for each unit page-faults every
  // gathered byte again (a later sync of the 0.6B model at W = 2: 2.64 against 1.56 s). On the
  // CPU at W > 1 it is allocated in a shared memory segment, which the peers on this host map
  // once and read at memory speed.
  torch::Tensor gather_full_master(size_t unit, at::ScalarType dtype = at::kFloat,
                                   torch::Tensor* buffer = nullptr);
  // Forgets the accumulated gradients of every unit.
  void zero_grad();

  // Bytes of every distinct storage this object holds now: master and gradient shards, gathered
  // buffers and communication buffers in flight. The optimizer's state is not included.
  size_t allocated_bytes() const;

  // Move the shards to host memory and back (CUDA: frees device memory for colocated engines);
  // no-ops on the CPU. Call between steps, with every unit resharded.
  void sleep();
  void wake_up();

  // Used by the unit Function's backward.
  void before_unit_backward(size_t unit, size_t forward_position);
  void after_unit_backward(size_t unit, const std::vector<torch::Tensor>& parameter_grads);

 private:
  void broadcast_from_rank0(const std::vector<std::pair<std::string, torch::Tensor>>& params);
  void check_unit_index(size_t unit, const char* what) const;
  void wait_pending_reduces();

  std::shared_ptr<comm::Communicator> comm_;
  FullyShardOptions options_;
  std::vector<std::unique_ptr<FlatParam>> units_;
  std::optional<size_t> root_;
  std::vector<bool> held_;  // per unit: gathered until finish_backward, grads in .grad
  // Units in the order their forward ran with grad since the last finish_backward; backward
  // prefetches walk it in reverse.
  std::vector<size_t> forward_order_;
  std::vector<size_t> pending_reduces_;  // units whose reduce-scatter is in flight, in order
  torch::Tensor anchor_;                 // requires grad; an input of every recorded unit run
  torch::Tensor no_input_;               // empty; stands in for an undefined unit input
};

}  // namespace ooze::fsdp
