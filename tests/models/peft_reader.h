// An independent reader of a PEFT adapter: python3 parses the safetensors headers by hand and
// merges the adapter into the base in torch (fp64), then checks a merged model directory against
// it: W + (lora_alpha / r) B A for every adapted weight, every other weight untouched. Prints
// "<adapted modules> modules <scaling>".
//
//   /usr/bin/python3 peft_reader.py ADAPTER_DIR BASE_DIR MERGED_DIR
// (fp32 models in one model.safetensors each.)
#pragma once

namespace ooze::testing {

inline constexpr const char* kPeftReader = R"PY(
import json, struct, sys, torch

def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        begin, end = info["data_offsets"]
        raw = bytearray(data[8 + n + begin:8 + n + end])
        tensors[name] = torch.frombuffer(raw, dtype=torch.float32).reshape(info["shape"])
    return tensors, header.get("__metadata__", {})

adapter_dir, base_dir, merged_dir = sys.argv[1:4]
config = json.load(open(adapter_dir + "/adapter_config.json"))
assert config["peft_type"] == "LORA" and config["task_type"] == "CAUSAL_LM", config
assert config["bias"] == "none" and config["use_dora"] is False and config["use_rslora"] is False
scaling = config["lora_alpha"] / config["r"]
adapter, metadata = read_safetensors(adapter_dir + "/adapter_model.safetensors")
assert metadata.get("format") == "pt", metadata
base, _ = read_safetensors(base_dir + "/model.safetensors")
merged, _ = read_safetensors(merged_dir + "/model.safetensors")
prefix = "base_model.model."
modules = sorted(k[len(prefix):-len(".lora_A.weight")] for k in adapter if k.endswith(".lora_A.weight"))
assert all(k.startswith(prefix) for k in adapter), list(adapter)
assert len(adapter) == 2 * len(modules)
for module in modules:
    a = adapter[prefix + module + ".lora_A.weight"].double()
    b = adapter[prefix + module + ".lora_B.weight"].double()
    assert a.shape[0] == config["r"] and b.shape[1] == config["r"]
    assert module.rsplit(".", 1)[1] in config["target_modules"], module
    expected = base[module + ".weight"].double() + scaling * (b @ a)
    error = (merged[module + ".weight"].double() - expected).abs().max().item()
    assert error < 1e-6, (module, error)
untouched = [k for k in base if k[:-len(".weight")] not in modules]
assert untouched and all(torch.equal(base[k], merged[k]) for k in untouched)
print(len(modules), "modules", scaling)
)PY";

}  // namespace ooze::testing
