#include "fsdp/sharded_loading.h"

#include <vector>

#include "core/error.h"
#include "core/safetensors.h"

namespace ooze::fsdp {

void load_sharded_safetensors(FullyShardedModule& model, const std::string& dir,
                              const std::set<std::string>& may_be_missing) {
  const ShardedSafetensors checkpoint = ShardedSafetensors::open(dir);

  std::vector<std::string> problems;
  for (size_t u = 0; u < model.num_units(); ++u) {
    for (const FlatParamEntry& entry : model.unit(u).entries()) {
      if (!checkpoint.contains(entry.name)) {
        if (may_be_missing.count(entry.name) == 0) {
          problems.push_back("missing '" + entry.name + "'");
        }
        continue;
      }
      const SafetensorsTensorInfo& info = checkpoint.info(entry.name);
      if (info.shape != entry.shape) {
        problems.push_back("'" + entry.name + "' in " + checkpoint.file_of(entry.name) +
                           " has shape " + c10::str(c10::IntArrayRef(info.shape)) +
                           ", the model expects " + c10::str(c10::IntArrayRef(entry.shape)));
        continue;
      }
      const char* dtype_name = safetensors_dtype_name(info.dtype);
      bool floating = false;
      try {
        floating = c10::isFloatingType(to_scalar_type(info.dtype));
      } catch (const FormatError&) {  // a dtype LibTorch cannot represent
      }
      if (!floating) {
        problems.push_back("'" + entry.name + "' in " + checkpoint.file_of(entry.name) +
                           " has dtype " + dtype_name + ", not a floating type LibTorch reads");
      }
    }
  }
  if (!problems.empty()) {
    std::string message = "load_sharded_safetensors: the checkpoint in " + dir +
                          " does not match the model (" + std::to_string(problems.size()) +
                          " problem" + (problems.size() == 1 ? "" : "s") + "):";
    for (const std::string& problem : problems) message += "\n  " + problem;
    throw FormatError(message);
  }

  torch::NoGradGuard no_grad;
  for (size_t u = 0; u < model.num_units(); ++u) {
    FlatParam& flat = model.unit(u);
    flat.reshard();
    torch::Tensor& master = flat.master_shard();
    for (const ShardSlice& slice : flat.shard_slices()) {
      const FlatParamEntry& entry = flat.entries()[slice.entry];
      if (!checkpoint.contains(entry.name)) continue;  // one that may be missing
      // A view of the mapped file: only the pages of this range are read.
      const torch::Tensor source =
          checkpoint.tensor(entry.name).reshape({-1}).narrow(0, slice.param_offset, slice.numel);
      master.narrow(0, slice.shard_offset, slice.numel).copy_(source);
    }
  }
}

}  // namespace ooze::fsdp
