"""ooze's engine against Hugging Face transformers on the same safetensors (scripts/gpu/check.sh).

Asks a running `ooze serve` for the log-probs of every prompt token (SGLang's /generate with
logprob_start_len 0), computes the same from transformers' logits in float64, and prints one
JSON line: the largest and mean absolute difference, the tolerance for the dtype, and ok.

    python3 hf_reference.py --url http://127.0.0.1:PORT --model DIR --dtype float32 --device cuda

Without transformers (Debian's python3 here) the line says skipped, after the ooze side ran.
"""

import argparse
import json
import sys
import urllib.request

# fp32: both sides run the same math in float32 (TF32 is off by default in both), differing
# in reduction order only. bf16: 8 bits of mantissa, and each side rounds at other places.
TOLERANCE = {"float32": 1e-3, "bfloat16": 0.15}


def prompts(vocab_size):
    """Four prompts of 16 to 97 tokens, deterministic, spread over the vocabulary."""
    return [[(i * 7919 + t * 104729 + 3) % vocab_size for t in range(16 + 27 * i)] for i in range(4)]


def ooze_logprobs(url, ids):
    body = json.dumps({
        "input_ids": ids,
        "sampling_params": {"max_new_tokens": 1, "temperature": 0.0},
        "return_logprob": True,
        "logprob_start_len": 0,
    }).encode()
    request = urllib.request.Request(url + "/generate", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        meta = json.load(response)["meta_info"]
    # One [logprob, id, text] per prompt token; the first is null (nothing predicts it).
    return [entry[0] for entry in meta["input_token_logprobs"][1:]]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--dtype", choices=sorted(TOLERANCE), required=True)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()

    with open(args.model + "/config.json") as f:
        vocab_size = json.load(f)["vocab_size"]
    batch = prompts(vocab_size)
    ours = [ooze_logprobs(args.url, ids) for ids in batch]
    line = {"check": "hf_logprobs", "dtype": args.dtype, "device": args.device,
            "tokens": sum(len(x) for x in ours), "tolerance": TOLERANCE[args.dtype]}
    try:
        import torch
        import transformers
    except ImportError as error:
        line.update(skipped=f"no transformers here ({error})", ok=True)
        print(json.dumps(line))
        return 0

    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    try:  # transformers 5 names it dtype; 4.x torch_dtype
        model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype)
    except TypeError:
        model = transformers.AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=dtype)
    model = model.to(args.device).eval()
    worst, total, count = 0.0, 0.0, 0
    with torch.no_grad():
        for ids, mine in zip(batch, ours):
            tokens = torch.tensor([ids], device=args.device)
            logits = model(tokens).logits[0, :-1].double()
            theirs = torch.log_softmax(logits, -1).gather(1, tokens[0, 1:, None])[:, 0].cpu()
            difference = (torch.tensor(mine, dtype=torch.float64) - theirs).abs()
            worst = max(worst, difference.max().item())
            total += difference.sum().item()
            count += difference.numel()
    line.update(transformers=transformers.__version__, max_abs=worst, mean_abs=total / count,
                ok=worst <= TOLERANCE[args.dtype])
    print(json.dumps(line))
    return 0 if line["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
