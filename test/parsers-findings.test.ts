// Issue 17's findings on parsers, each reproduced where it crashed or hung: in a child process
// with a timeout, so that a crash or a hang fails the test rather than taking vitest down. The
// children run the built package (dist/), as a user or bloomery-serve does.
//  1. A GBNF grammar nested 20,000 deep, or a chain of 50,000 rules, was a SIGSEGV (SDK and
//     server); a JSON schema nested 1,000 deep was a 500 (stack overflow in JavaScript).
//  3. A 100,000-value enum took 41-56 s.
//  8. A chat template looping 10^8 times ran 80 s, then aborted the process on V8's heap limit.
// Finding 3's stalls (tokenize, a heavy request beside a short one) are measured in
// test/concurrency.test.ts.
import { spawn } from "node:child_process";
import { describe, expect, it } from "vitest";

interface ChildRun {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
}

/** Runs an ES module in a child node, killed (and reported) past `timeoutMs`. */
function runModule(source: string, timeoutMs: number): Promise<ChildRun> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ["--input-type=module", "-e", source], { stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    let timedOut = false;
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill("SIGKILL");
    }, timeoutMs);
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr, timedOut });
    });
  });
}

/** The child's JSON report (its last stdout line), once it is known to have exited cleanly. */
function report(run: ChildRun): Record<string, unknown> {
  expect(run.timedOut, `hung; stderr: ${run.stderr}`).toBe(false);
  expect(run.signal, `killed by a signal; stderr: ${run.stderr}`).toBeNull();
  expect(run.code, `exit code; stderr: ${run.stderr}`).toBe(0);
  return JSON.parse(run.stdout.trim().split("\n").pop()!) as Record<string, unknown>;
}

/** Grammars and schemas the findings used, as module source for the children. */
const INPUTS = `
export const nested = "root ::= " + "(".repeat(20000) + '"a"' + ")".repeat(20000);
export function chain(rules, tail) {
  let g = "root ::= r0\\n";
  for (let i = 0; i + 1 < rules; i++) g += "r" + i + " ::= r" + (i + 1) + tail + "\\n";
  return g + "r" + (rules - 1) + ' ::= "a"\\n';
}
export let deepSchema = { type: "integer" };
for (let i = 0; i < 1000; i++) deepSchema = { type: "object", properties: { a: deepSchema }, required: ["a"] };
export const hugeEnum = { enum: Array.from({ length: 100000 }, (_, i) => "value " + i) };
`;

const MODEL = "models/bloomery-tiny-moe-Q8_0.gguf";

describe("issue 17 findings, each in a child process", () => {
  it("grammars nested 20,000 deep or chained 50,000 rules long, and deep or huge schemas, are refused by name or followed (SDK)", async () => {
    const run = await runModule(
      `
import { loadModel } from "./dist/index.js";
${INPUTS}
const model = await loadModel(${JSON.stringify(MODEL)}, { gpu: false, threads: 2 });
const outcome = async (options) => {
  const started = performance.now();
  try {
    const result = await model.createSession().generate("x", { maxTokens: 4, ...options }).result;
    return { text: result.text, ms: performance.now() - started };
  } catch (error) {
    return { code: error.code, message: error.message, ms: performance.now() - started };
  }
};
const out = {
  nested: await outcome({ grammar: nested }),
  chain: await outcome({ grammar: chain(50000, "") }),
  deepChain: await outcome({ grammar: chain(40000, ' "x"') }),
  leftRecursive: await outcome({ grammar: chain(50000, "").replace('r49999 ::= "a"', 'r49999 ::= r0 "a" | "a"') }),
  deepSchema: await outcome({ jsonSchema: deepSchema }),
  hugeEnum: await outcome({ jsonSchema: hugeEnum }),
};
model.dispose();
console.log(JSON.stringify(out));
`,
      120_000,
    );
    const out = report(run);
    expect(out.nested).toMatchObject({ code: "GRAMMAR_TOO_COMPLEX", message: expect.stringContaining("nest deeper") });
    expect(out.chain).toMatchObject({ text: "a" });
    expect(out.deepChain).toMatchObject({ code: "GRAMMAR_TOO_COMPLEX" });
    expect(out.leftRecursive).toMatchObject({
      code: "GRAMMAR_INVALID",
      message: expect.stringContaining("left-recursive"),
    });
    expect(out.deepSchema).toMatchObject({
      code: "JSON_SCHEMA_TOO_COMPLEX",
      message: expect.stringContaining("depth"),
    });
    expect(out.hugeEnum).toMatchObject({
      code: "JSON_SCHEMA_TOO_COMPLEX",
      message: expect.stringContaining("enumValues"),
    });
    expect((out.hugeEnum as { ms: number }).ms).toBeLessThan(2000);
  }, 150_000);

  it("a schema that is not plain data is refused, and the worker that converts schemas lets the process exit (SDK)", async () => {
    const run = await runModule(
      `
import { loadModel } from "./dist/index.js";
const model = await loadModel(${JSON.stringify(MODEL)}, { gpu: false, threads: 1 });
const out = await model.createSession().generate("x", { maxTokens: 2, jsonSchema: { enum: ["a", () => "b"] } }).result.then(
  () => ({}),
  (error) => ({ code: error.code, message: error.message }),
);
model.dispose();
console.log(JSON.stringify(out));
`,
      60_000,
    );
    expect(report(run)).toMatchObject({ code: "INVALID_ARGUMENT", message: expect.stringContaining("plain data") });
  }, 90_000);

  it("a template looping 10^8 times (in constant memory) is stopped at its deadline: sync, async and in a chat (SDK)", async () => {
    const run = await runModule(
      `
import { loadModel, CHAT_TEMPLATE_LIMITS } from "./dist/index.js";
const template =
  "{% if loop_forever %}{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}{% endif %}" +
  "{% for m in messages %}<|im_start|>{{ m.role }}\\n{{ m.content }}<|im_end|>\\n{% endfor %}<|im_start|>assistant\\n";
const model = await loadModel(${JSON.stringify(MODEL)}, { gpu: false, threads: 2, chatTemplate: template });
const messages = [{ role: "user", content: "hi" }];
const loop = { templateKwargs: { loop_forever: true } };
const outcome = async (work) => {
  const started = performance.now();
  try {
    return { text: await work(), ms: performance.now() - started };
  } catch (error) {
    return { code: error.code, message: error.message, ms: performance.now() - started };
  }
};
const out = {
  limit: CHAT_TEMPLATE_LIMITS.timeMs,
  sync: await outcome(async () => model.applyChatTemplate(messages, loop)),
  concurrent: await Promise.all([
    outcome(() => model.applyChatTemplateAsync(messages, loop)),
    outcome(async () => (await model.createSession().chat(messages, { ...loop, maxTokens: 2 }).result).text),
    outcome(() => model.applyChatTemplateAsync(messages)),
  ]),
  after: await outcome(async () => model.applyChatTemplate(messages)),
};
model.dispose();
console.log(JSON.stringify(out));
`,
      120_000,
    );
    const out = report(run);
    const stopped = { code: "CHAT_TEMPLATE_TOO_COMPLEX", message: expect.stringContaining("deadline") };
    const limit = out.limit as number;
    expect(out.sync).toMatchObject(stopped);
    const [async, chat, plain] = out.concurrent as { ms: number }[];
    expect(async).toMatchObject(stopped);
    expect(chat).toMatchObject(stopped);
    for (const stoppedRun of [out.sync as { ms: number }, async!, chat!]) expect(stoppedRun.ms).toBeLessThan(limit * 2);
    // A slow template holds one worker: another render goes on meanwhile.
    expect(plain).toMatchObject({ text: "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant" });
    expect(plain!.ms).toBeLessThan(limit / 2);
    expect(out.after).toMatchObject({ text: "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant" });
  }, 150_000);

  it("bloomery-serve answers those grammars and schemas with 400s and lives on", async () => {
    const run = await runModule(
      `
import { spawn } from "node:child_process";
${INPUTS}
const server = spawn(process.execPath, ["dist/serve-cli.js", "--port", "0", "-t", "2", "-m", ${JSON.stringify(MODEL)}], {
  stdio: ["ignore", "ignore", "pipe"],
});
let log = "";
const address = await new Promise((resolve, reject) => {
  server.stderr.on("data", (d) => {
    log += d;
    const url = /listening on (http:\\/\\/\\S+),/.exec(log)?.[1];
    if (url && log.includes("model loaded")) resolve(url);
  });
  server.once("exit", (code, signal) => reject(new Error("the server exited: " + code + " " + signal + "\\n" + log)));
});
const post = async (path, body) => {
  const response = await fetch(address + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const json = await response.json();
  return { status: response.status, message: json.error?.message, content: json.content ?? json.choices?.[0]?.message?.content };
};
const chat = (extra) => post("/v1/chat/completions", { messages: [{ role: "user", content: "hi" }], max_tokens: 4, ...extra });
const out = {
  chatNested: await chat({ grammar: nested }),
  completionNested: await post("/completion", { prompt: "x", n_predict: 4, grammar: nested }),
  completionsNested: await post("/v1/completions", { prompt: "x", max_tokens: 4, grammar: nested }),
  chain: await post("/completion", { prompt: "x", n_predict: 4, grammar: chain(50000, "") }),
  deepSchema: await chat({ response_format: { type: "json_schema", json_schema: { schema: deepSchema } } }),
  hugeEnum: await chat({ json_schema: hugeEnum }),
  health: (await fetch(address + "/health")).status,
};
server.kill("SIGTERM");
console.log(JSON.stringify(out));
`,
      150_000,
    );
    const out = report(run);
    for (const key of ["chatNested", "completionNested", "completionsNested"]) {
      expect(out[key], key).toMatchObject({
        status: 400,
        message: expect.stringContaining("groups nest deeper than 256"),
      });
    }
    expect(out.chain).toMatchObject({ status: 200, content: "a" });
    expect(out.deepSchema).toMatchObject({ status: 400, message: expect.stringContaining("JSON_SCHEMA_LIMITS.depth") });
    expect(out.hugeEnum).toMatchObject({
      status: 400,
      message: expect.stringContaining("JSON_SCHEMA_LIMITS.enumValues"),
    });
    expect(out.health).toBe(200);
  }, 180_000);
});
