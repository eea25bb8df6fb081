// llama.cpp as an independent reference and speed baseline for ooze's engine, through npm's
// node-llama-cpp (its prebuilt CPU build, installed into .deps/npm-llama by scripts/install-deps.sh).
// Reads one JSON request from REQUEST.json (or stdin) and prints one JSON object on stdout.
//
//   node tests/engine/llama_cpp_engine.mjs logprobs|speed [REQUEST.json]
//
// logprobs: {"model": "m.gguf", "threads": 1, "prompts": [[ids...], ...], "max_new_tokens": 8}
//   -> {"results": [{"output_ids": [...], "output_logprobs": [...], "input_logprobs": [null, ...]}]}
//   Greedy (argmax of the raw logits, no penalties, no stop at EOS), token ids in and out (no
//   tokenizer). input_logprobs[i] is log p(prompt[i] | prompt[:i]); the first is null, as in
//   SGLang's input_token_logprobs. A log-prob below about -87 (float32 underflow) is null.
//   ~0.15 s a position on top of the forward: node-llama-cpp hands the distribution to JS whole.
// speed: {"model", "threads", "prompt_tokens": 512, "batch": 16, "new_tokens": 16, "vocab": V,
//         "prefill": true}
//   -> {"prefill_tokens_per_s", "decode_tokens_per_s", "batch", "threads", "prompt_tokens",
//       "new_tokens", "prefill_s", "decode_s"}
//   Prefill: one sequence of prompt_tokens random ids (fixed seed); with "prefill": false it is
//   not run and its two figures are null. Decode: `batch` sequences,
//   each after a short prompt of its own, generating new_tokens greedily at once; node-llama-cpp
//   puts the steps of sequences of one context that are pending together into one llama_decode.
//   llama.cpp's own defaults (F16 KV cache, flash attention where it sees fit), as its users run it.
//   On a machine with few cores, threads beyond the idle cores make ggml's spinning workers crawl.
//
// Bad request or file, unknown mode: a message on stderr, exit 2.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const npmDir = path.join(repo, ".deps/npm-llama");
// Tokens each decode sequence reads before the timed decode (not counted).
const DECODE_PROMPT_TOKENS = 8;

function fail(message) {
  process.stderr.write(`llama_cpp_engine: ${message}\n`);
  process.exit(2);
}

function readRequest(file) {
  let text;
  try {
    text = readFileSync(file ?? 0, "utf8");
  } catch (error) {
    fail(`cannot read ${file ?? "stdin"}: ${error.message}`);
  }
  try {
    return JSON.parse(text);
  } catch (error) {
    fail(`${file ?? "stdin"} is not JSON: ${error.message}`);
  }
}

function positiveInt(request, key, fallback) {
  const value = request[key] ?? fallback;
  if (!Number.isInteger(value) || value < 1) fail(`"${key}" must be a positive integer, got ${JSON.stringify(value)}`);
  return value;
}

async function loadModel(request) {
  if (typeof request.model !== "string") fail(`"model" must be the path of a .gguf file`);
  let nlc;
  try {
    nlc = await import(createRequire(path.join(npmDir, "package.json")).resolve("node-llama-cpp"));
  } catch (error) {
    fail(`node-llama-cpp is not in ${npmDir} (run scripts/install-deps.sh): ${error.message}`);
  }
  // CPU only, and the prebuilt binary or nothing: never download or compile llama.cpp here.
  // maxThreads 0: a context then uses exactly the threads it is given.
  let llama;
  try {
    llama = await nlc.getLlama({ gpu: false, build: "never", skipDownload: true, maxThreads: 0,
                                 logLevel: nlc.LlamaLogLevel.error, progressLogs: false });
  } catch (error) {
    fail(`no prebuilt CPU llama.cpp loads (@node-llama-cpp/linux-x64 in ${npmDir}): ${error.message}`);
  }
  try {
    return await llama.loadModel({ modelPath: path.resolve(request.model), gpuLayers: 0 });
  } catch (error) {
    fail(`cannot load ${request.model}: ${error.message}`);
  }
}

function vocabSize(model) {
  return model.fileInfo.metadata.tokenizer.ggml.tokens.length;
}

// log p(token) from node-llama-cpp's probabilities: it does not hand out logits, but with
// temperature 0 (greedy, nothing else in the chain) it returns softmax(raw logits) over the whole
// vocabulary, computed in float32. Renormalising in float64 cancels the float32 sum's error, which
// leaves each value's own rounding (~1e-7); a probability that underflowed float32 (a log-prob
// below about -87) comes back 0, so -Infinity (written null in JSON).
function logprob(probabilities, token) {
  let sum = 0;
  for (const p of probabilities.values()) sum += p;
  return Math.log(probabilities.get(token) ?? 0) - Math.log(sum);
}

const greedyNext = { generateNext: { token: true, probabilities: true, options: { temperature: 0 } } };
const greedyToken = { generateNext: { token: true, options: { temperature: 0 } } };
// Prompt positions scored per call: each result holds a Map over the vocabulary (~10 MB).
const SCORE_CHUNK = 16;

async function logprobs(request) {
  const prompts = request.prompts;
  if (!Array.isArray(prompts) || prompts.length === 0 ||
      !prompts.every((p) => Array.isArray(p) && p.length > 0 && p.every(Number.isInteger))) {
    fail(`"prompts" must be a non-empty list of non-empty lists of token ids`);
  }
  const maxNew = positiveInt(request, "max_new_tokens");
  const threads = positiveInt(request, "threads", 1);
  const model = await loadModel(request);
  // llama.cpp fails the whole decode on an id past the vocabulary, without saying which.
  const vocab = vocabSize(model);
  prompts.forEach((p, i) => p.forEach((id) => {
    if (id < 0 || id >= vocab) fail(`prompts[${i}] has token id ${id}, outside the model's vocabulary [0, ${vocab})`);
  }));
  const longest = Math.max(...prompts.map((p) => p.length)) + maxNew;
  // float32 all through: llama.cpp's F16 KV cache, and its CPU flash attention (F16 inside even
  // with an F32 cache), put log-probs ~5e-4 off a float64 forward; without them, ~1e-7.
  const context = await model.createContext({ contextSize: longest, sequences: 1, threads,
                                              batchSize: Math.min(longest, 512), flashAttention: false,
                                              experimentalKvCacheKeyType: "F32",
                                              experimentalKvCacheValueType: "F32" });
  const sequence = context.getSequence();
  const results = [];
  for (const prompt of prompts) {
    await sequence.clearHistory();
    // Every prompt position asks for the next-token distribution, which scores the token after it;
    // the last one's also gives the first generated token.
    const inputLogprobs = [null];
    let next;
    for (let start = 0; start < prompt.length; start += SCORE_CHUNK) {
      const chunk = prompt.slice(start, start + SCORE_CHUNK);
      const out = await sequence.controlledEvaluate(chunk.map((token) => [token, greedyNext]));
      out.forEach((result, i) => {
        const position = start + i + 1;
        if (position < prompt.length) inputLogprobs.push(logprob(result.next.probabilities, prompt[position]));
        else next = result.next;
      });
    }
    const outputIds = [];
    const outputLogprobs = [];
    for (;;) {
      outputIds.push(next.token);
      outputLogprobs.push(logprob(next.probabilities, next.token));
      if (outputIds.length === maxNew) break;
      [{ next }] = await sequence.controlledEvaluate([[next.token, greedyNext]]);
    }
    results.push({ output_ids: outputIds, output_logprobs: outputLogprobs, input_logprobs: inputLogprobs });
  }
  return { results };
}

// mulberry32: the same random prompt ids on every run.
function randomIds(count, vocab, seed) {
  let state = seed >>> 0;
  const ids = [];
  for (let i = 0; i < count; ++i) {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = Math.imul(state ^ (state >>> 15), state | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    ids.push((((t ^ (t >>> 14)) >>> 0) / 4294967296 * vocab) | 0);
  }
  return ids;
}

async function speed(request) {
  const threads = positiveInt(request, "threads", 1);
  const promptTokens = positiveInt(request, "prompt_tokens", 512);
  const batch = positiveInt(request, "batch", 1);
  const newTokens = positiveInt(request, "new_tokens", 16);
  const vocab = positiveInt(request, "vocab");
  const withPrefill = request.prefill ?? true;
  if (typeof withPrefill !== "boolean") fail(`"prefill" must be true or false, got ${JSON.stringify(withPrefill)}`);
  const model = await loadModel(request);
  if (vocab > vocabSize(model)) fail(`"vocab" ${vocab} is larger than the model's ${vocabSize(model)}`);

  // Prefill: the whole prompt in one llama_decode (batchSize = prompt length), logits of its last
  // token only, as a generation would need.
  let prefillSeconds = null;
  if (withPrefill) {
    const context = await model.createContext({ contextSize: promptTokens + 1, sequences: 1, threads,
                                                batchSize: promptTokens });
    const prompt = randomIds(promptTokens, vocab, 1234);
    const start = performance.now();
    await context.getSequence().controlledEvaluate(
        prompt.map((token, i) => (i === prompt.length - 1 ? [token, greedyToken] : token)));
    prefillSeconds = (performance.now() - start) / 1000;
    await context.dispose();
  }

  // Decode: a context of `batch` sequences, each only as long as it needs. The prompts are read
  // first (all but their last token, untimed); then each step of the timed part decodes one token
  // of every sequence, the first step a prompt's last token, as the generation loop would.
  const context = await model.createContext({ contextSize: DECODE_PROMPT_TOKENS + newTokens, sequences: batch,
                                              threads, batchSize: Math.max(batch, 512) });
  const sequences = Array.from({ length: batch }, () => context.getSequence());
  const prompts = sequences.map((_, i) => randomIds(DECODE_PROMPT_TOKENS, vocab, 5678 + i));
  await Promise.all(sequences.map((s, i) => s.evaluateWithoutGeneratingNewTokens(prompts[i].slice(0, -1))));
  const start = performance.now();
  // yieldEogToken: an EOS does not end a sequence (ooze's ignore_eos), so each makes new_tokens.
  await Promise.all(sequences.map(async (s, i) => {
    let count = 0;
    for await (const _token of s.evaluate(prompts[i].slice(-1), { temperature: 0, yieldEogToken: true })) {
      if (++count === newTokens) break;
    }
  }));
  const decodeSeconds = (performance.now() - start) / 1000;
  await context.dispose();
  return {
    prefill_tokens_per_s: withPrefill ? promptTokens / prefillSeconds : null,
    decode_tokens_per_s: batch * newTokens / decodeSeconds,
    batch, threads, prompt_tokens: promptTokens, new_tokens: newTokens,
    prefill_s: prefillSeconds, decode_s: decodeSeconds,
  };
}

const modes = { logprobs, speed };
const [mode, file] = process.argv.slice(2);
if (!Object.hasOwn(modes, mode ?? "")) fail(`unknown mode ${JSON.stringify(mode)}: logprobs or speed`);
const request = readRequest(file);
if (typeof request !== "object" || request === null || Array.isArray(request)) fail("the request must be a JSON object");
const result = await modes[mode](request);
process.stdout.write(JSON.stringify(result) + "\n");
// node-llama-cpp keeps native handles open; don't wait for them.
process.exit(0);
