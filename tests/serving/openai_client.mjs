// Drives an ooze engine server with the official OpenAI client (the npm package "openai") and
// prints one JSON object with what came back, for tests/serving/openai_client_test.cpp to check.
//
//   node tests/serving/openai_client.mjs BASE_URL NPM_DIR API_KEY
//
// BASE_URL is the server's URL (http://127.0.0.1:PORT); NPM_DIR the directory whose
// node_modules holds "openai" (.deps/npm, installed by scripts/install-deps.sh).
import { createRequire } from "node:module";
import path from "node:path";

const [baseUrl, npmDir, apiKey] = process.argv.slice(2);
const require = createRequire(path.join(path.resolve(npmDir), "package.json"));
const { OpenAI } = require("openai");

const client = new OpenAI({ baseURL: `${baseUrl}/v1`, apiKey, maxRetries: 0, timeout: 60000 });

// Greedy and long enough to compare: the server's extra fields (ignore_eos) go in the body as is.
const common = { model: "tiny", temperature: 0, ignore_eos: true };

async function streamedCompletion(params) {
  const stream = await client.completions.create({ ...params, stream: true,
                                                    stream_options: { include_usage: true } });
  let text = "";
  let finishReason = null;
  let usage = null;
  let chunks = 0;
  let logprobTokens = 0;
  for await (const chunk of stream) {
    chunks += 1;
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      text += choice.text;
      if (choice.finish_reason) finishReason = choice.finish_reason;
      if (choice.logprobs) logprobTokens += choice.logprobs.tokens.length;
    }
  }
  return { text, finish_reason: finishReason, usage, chunks, logprob_tokens: logprobTokens };
}

async function streamedChat(params) {
  const stream = await client.chat.completions.create({ ...params, stream: true,
                                                         stream_options: { include_usage: true } });
  let content = "";
  let firstRole = null;
  let finishReason = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks += 1;
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      if (chunks === 1) firstRole = choice.delta.role ?? null;
      content += choice.delta.content ?? "";
      if (choice.finish_reason) finishReason = choice.finish_reason;
    }
  }
  return { content, first_role: firstRole, finish_reason: finishReason, usage, chunks };
}

async function main() {
  const out = {};
  const models = await client.models.list();
  out.models = models.data.map((m) => m.id);

  const completionParams = { ...common, prompt: "Once upon a time", max_tokens: 16, logprobs: 2 };
  const completion = await client.completions.create(completionParams);
  out.completion = {
    text: completion.choices[0].text,
    finish_reason: completion.choices[0].finish_reason,
    token_logprobs: completion.choices[0].logprobs.token_logprobs,
    usage: completion.usage,
    object: completion.object,
  };
  out.completion_stream = await streamedCompletion(completionParams);

  const samples = await client.completions.create({ ...common, prompt: ["a", "b"], n: 2,
                                                    max_tokens: 4 });
  out.samples = samples.choices.map((c) => ({ index: c.index, text: c.text }));

  const chatParams = {
    ...common,
    messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Hello there" }],
    max_tokens: 16,
    logprobs: true,
    top_logprobs: 2,
  };
  const chat = await client.chat.completions.create(chatParams);
  out.chat = {
    role: chat.choices[0].message.role,
    content: chat.choices[0].message.content,
    finish_reason: chat.choices[0].finish_reason,
    logprobs: chat.choices[0].logprobs.content.map((entry) => entry.logprob),
    top_logprobs: chat.choices[0].logprobs.content.map((entry) => entry.top_logprobs.length),
    usage: chat.usage,
    object: chat.object,
  };
  out.chat_stream = await streamedChat(chatParams);

  try {
    await client.completions.create({ ...common, prompt: "x", temperature: -1 });
    out.bad_request = { status: 200 };
  } catch (error) {
    out.bad_request = { status: error.status ?? null, param: error.param ?? null,
                        type: error.type ?? null, message: error.message };
  }

  const unauthorized = new OpenAI({ baseURL: `${baseUrl}/v1`, apiKey: "wrong-key", maxRetries: 0 });
  try {
    await unauthorized.models.list();
    out.wrong_key_status = 200;
  } catch (error) {
    out.wrong_key_status = error.status ?? null;
  }
  process.stdout.write(JSON.stringify(out) + "\n");
}

main().catch((error) => {
  process.stdout.write(JSON.stringify({ error: String(error && error.stack || error) }) + "\n");
  process.exit(1);
});
