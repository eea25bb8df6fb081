// A test agent written with the official OpenAI client (the npm package "openai"), run by ooze
// against an agent session: three chat turns with a calculator tool offered, the second one
// streamed, each answer followed by the calculator's result as a tool message.
//
//   OPENAI_BASE_URL=... OPENAI_API_KEY=... node openai_agent.mjs NPM_DIR TRANSCRIPT_PATH < sample
//
// Writes every request and the answer it got (streamed answers assembled from their chunks) to
// TRANSCRIPT_PATH as JSON, and prints {"reward": 0.5}.
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const [npmDir, transcriptPath] = process.argv.slice(2);
const require = createRequire(path.join(path.resolve(npmDir), "package.json"));
const { OpenAI } = require("openai");

// The client reads OPENAI_BASE_URL and OPENAI_API_KEY from the environment, as agents do.
const client = new OpenAI({ maxRetries: 0, timeout: 60000 });
const sample = JSON.parse(fs.readFileSync(0, "utf8").split("\n")[0]);

const calculator = {
  type: "function",
  function: {
    name: "calculator",
    description: "Evaluates an arithmetic expression.",
    parameters: { type: "object", properties: { expression: { type: "string" } },
                  required: ["expression"] },
  },
};

// A streamed answer put together as the non-streamed one reads: content, tool calls, log-probs.
async function streamed(body) {
  const stream = await client.chat.completions.create({ ...body, stream: true });
  const message = { role: "assistant", content: "" };
  const logprobs = [];
  let finishReason = null;
  const toolCalls = [];
  for await (const chunk of stream) {
    for (const choice of chunk.choices) {
      if (choice.delta.content) message.content += choice.delta.content;
      for (const call of choice.delta.tool_calls ?? []) toolCalls[call.index] = call;
      if (choice.logprobs?.content) logprobs.push(...choice.logprobs.content);
      if (choice.finish_reason) finishReason = choice.finish_reason;
    }
  }
  if (toolCalls.length > 0) message.tool_calls = toolCalls;
  return { choices: [{ message, logprobs: { content: logprobs }, finish_reason: finishReason }] };
}

const calls = [];
let messages = [{ role: "system", content: "You can use a calculator." },
                { role: "user", content: sample.prompt }];
for (let turn = 0; turn < 3; ++turn) {
  const body = { model: "policy", messages, tools: [calculator], max_tokens: 6, logprobs: true,
                 temperature: 0 };
  const answer = turn === 1 ? await streamed(body) : await client.chat.completions.create(body);
  calls.push({ status: 200, request: body, response: answer });
  const message = answer.choices[0].message;
  const reply = { role: "assistant", content: message.content };
  if (message.tool_calls) reply.tool_calls = message.tool_calls;
  const callId = message.tool_calls ? message.tool_calls[0].id : "call_none";
  messages = [...messages, reply, { role: "tool", tool_call_id: callId, content: String(turn + 40) }];
}
fs.writeFileSync(transcriptPath, JSON.stringify(calls));
console.log(JSON.stringify({ reward: 0.5 }));
