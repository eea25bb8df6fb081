// Loading weights into a sharded model without any rank materialising the whole checkpoint:
// each rank reads, from the memory-mapped safetensors files, only the element ranges that fall
// into its own shards, so only those pages are ever read from disk.
//
//   FsdpTransformer fsdp(TransformerModel(config), comm, options);  // uninitialised is fine
//   load_sharded_safetensors(fsdp.sharded(), "/models/Qwen3-0.6B");
#pragma once

#include <set>
#include <string>

#include "fsdp/fully_shard.h"

namespace ooze::fsdp {

// Copies the checkpoint in `dir` (model.safetensors, or the sharded layout with
// model.safetensors.index.json) into the fp32 master shards of `model`, by parameter name,
// converting floating dtypes. Checks every parameter before copying anything and reports all
// problems in one ooze::FormatError: a parameter the checkpoint lacks, a shape that differs, a
// dtype that is not floating. Tensors of the checkpoint that name no parameter (lm_head.weight
// of a tied model, rotary buffers) are ignored. Gathered units are resharded first, so the next
// forward gathers the new weights. Not a collective: every rank reads its own part.
// Parameters named in `may_be_missing` keep their values when the checkpoint lacks them (a
// critic's value head, loaded from a policy).
void load_sharded_safetensors(FullyShardedModule& model, const std::string& dir,
                              const std::set<std::string>& may_be_missing = {});

}  // namespace ooze::fsdp
