// The calculator agent of calculator_agent.py, in JavaScript with the official OpenAI client
// (the npm package "openai"): ooze trains it through an agent session with
//
//   ooze train ... --agent-command "node examples/agent/calculator_agent.mjs"
//
// The client reads OPENAI_BASE_URL and OPENAI_API_KEY from the environment ooze gives it; the
// sample comes as one JSON line on stdin. NODE_PATH (or a node_modules beside this file) must
// find "openai" (ooze's own copy: .deps/npm/node_modules).
import fs from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { OpenAI } = require("openai");

const CALL_OPEN = "<calc>";
const CALL_CLOSE = "</calc>";
const MAX_TURNS = 8;

// <result>VALUE</result> for integers, + - * / and parentheses, exact (a fraction when it must
// be), as examples/multi_turn/calculator.py answers.
function gcd(a, b) { return b === 0n ? (a < 0n ? -a : a) : gcd(b, a % b); }
function fraction(n, d) {
  if (d === 0n) throw new Error("division by zero");
  if (d < 0n) { n = -n; d = -d; }
  const g = gcd(n, d) || 1n;
  return [n / g, d / g];
}
function evaluate(expression) {
  if (!/^[0-9+\-*/() \t\r\n]+$/.test(expression)) throw new Error("only integers, + - * /, and parentheses");
  const tokens = expression.match(/\d+|[+\-*/()]/g);
  let at = 0;
  const peek = () => tokens[at];
  function primary() {
    const token = tokens[at++];
    if (token === "(") { const value = sum(); if (tokens[at++] !== ")") throw new Error("not an expression"); return value; }
    if (token === "-") { const [n, d] = primary(); return [-n, d]; }
    if (token === "+") return primary();
    if (token !== undefined && /^\d+$/.test(token)) return [BigInt(token), 1n];
    throw new Error("not an expression");
  }
  function product() {
    let [n, d] = primary();
    while (peek() === "*" || peek() === "/") {
      const op = tokens[at++];
      const [m, e] = primary();
      [n, d] = op === "*" ? fraction(n * m, d * e) : fraction(n * e, d * m);
    }
    return [n, d];
  }
  function sum() {
    let [n, d] = product();
    while (peek() === "+" || peek() === "-") {
      const op = tokens[at++];
      const [m, e] = product();
      [n, d] = fraction(op === "+" ? n * e + m * d : n * e - m * d, d * e);
    }
    return [n, d];
  }
  if (!tokens) throw new Error("empty expression");
  const [n, d] = sum();
  if (at !== tokens.length) throw new Error("not an expression");
  return d === 1n ? `${n}` : `${n}/${d}`;
}
function toolAnswer(expression) {
  try { return `<result>${evaluate(expression)}</result>`; }
  catch (error) { return `<result>error: ${error.message}</result>`; }
}

const client = new OpenAI({ maxRetries: 0, timeout: 600000 });
const sample = JSON.parse(fs.readFileSync(0, "utf8").split("\n")[0]);
let conversation = sample.prompt;
let calls = 0;
for (let turn = 0; turn < MAX_TURNS; ++turn) {
  const answer = await client.completions.create({
    model: "policy", prompt: conversation, max_tokens: 64, stop: [CALL_CLOSE] });
  const choice = answer.choices[0];
  conversation += choice.text;
  if (choice.finish_reason !== "stop" || choice.matched_stop !== CALL_CLOSE) break;
  conversation += CALL_CLOSE;
  const start = conversation.lastIndexOf(CALL_OPEN);
  if (start < 0) break;
  conversation += toolAnswer(conversation.slice(start + CALL_OPEN.length, -CALL_CLOSE.length));
  calls += 1;
}
console.log(JSON.stringify({ metrics: { calculator_calls: calls } }));
