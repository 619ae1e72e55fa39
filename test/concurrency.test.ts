// Issue 17, finding 3: one client's request must not stall the others. While a client sends the
// heaviest request an endpoint allows (a body of spaces as large as the server takes to
// /tokenize, a grammar and a JSON schema at their limits, a chat template that runs to its
// deadline), /health answers within 100 ms and a short request on the other slot completes
// within twice its quiet time, scaled by cores / (cores - 1) for the core the heavy request's
// worker holds. (8 MB of spaces held the event loop for 13 s; a 100,000-value enum held the other
// slot for 41 s.)
//
// The model runs one thread, so that on two cores (CI's) the heavy request's worker thread has the
// other: the timings then measure isolation, not a machine short of cores. Where the machine is
// busier than its cores (other work sharing them, as the rest of npm test does), the timings
// measure the load: see `required` below.
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { availableParallelism, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JSON_SCHEMA_LIMITS } from "../src/index.js";
import { getUrl, postJson, spawnServe, type ServeProcess } from "./server-helpers.js";

/** The server's default body limit (examples/server/app.ts). */
const BODY_LIMIT = 8 * 1024 * 1024;

// The model's template, with a switch that makes it loop until its render's deadline.
const TEMPLATE =
  "{% if loop_forever %}{% for i in range(100000000) %}{% endfor %}{% endif %}" +
  "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}" +
  "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

// The timings need the cores to themselves: inside npm test other test files run beside this one
// (a /health took 176 ms there while the heavy request ran), so it runs only when asked,
// BLOOMERY_CONCURRENCY=required, alone: `BLOOMERY_CONCURRENCY=required npx vitest run
// test/concurrency.test.ts`. It waits up to two minutes for the load to fall below the cores, then
// runs, and fails rather than skips if it does not. (8 MB to /tokenize used to reach the event loop
// as three fresh 8 MB copies, ~30 ms each on a VM whose page faults cost 15 us: examples/server/body.ts
// now keeps them off it.) The heavy request is sent by a child process: fetch writing 8 MB from
// this one held its event loop long enough to fail the timings on the client's side. The short
// request's time beside the heavy one is the median of three, as its quiet time is: one request of
// ~12 ms failed the bar 1 run in 3 on scheduler jitter alone (27 against 24 ms).
const required = process.env.BLOOMERY_CONCURRENCY === "required";
const cores = availableParallelism();
const currentLoad = () => (loadavg() as [number])[0];
for (const until = performance.now() + 120_000; required && currentLoad() >= cores && performance.now() < until; ) {
  await new Promise((resolve) => setTimeout(resolve, 5_000));
}
const load = currentLoad();
const headroom = required && cores >= 2 && load < cores;
if (required && !headroom) {
  throw new Error(
    `concurrency: ${cores} cores, load ${load.toFixed(1)}: busier than its cores: the timings would measure the load`,
  );
}
if (!required) {
  process.stderr.write("concurrency: skipped: it runs alone, with BLOOMERY_CONCURRENCY=required (CI's own step)\n");
}

// bloomery-serve in its own process, as users run it: the clients' own work here (writing an 8 MB
// body, reading the answers) then takes nothing from the server's event loop.
let server: { url: string };
let serve: ServeProcess | undefined;

beforeAll(async () => {
  if (!headroom) return;
  const dir = mkdtempSync(join(tmpdir(), "bloomery-concurrency-"));
  const templateFile = join(dir, "template.jinja");
  writeFileSync(templateFile, TEMPLATE);
  serve = spawnServe(["--port", "0", "-np", "2", "--temp", "0", "-t", "1", "--chat-template-file", templateFile]);
  server = { url: await serve.loaded() };
}, 60_000);
afterAll(() => serve?.kill());

/** Child process code: POSTs the file argv[2] to the URL argv[1], saying "sending" first and its answer's status last. */
const SENDER = `
const { request } = require("node:http");
const body = require("node:fs").readFileSync(process.argv[2]);
const headers = { "content-type": "application/json", "content-length": body.length };
const req = request(process.argv[1], { method: "POST", headers }, (res) => {
  res.resume();
  res.on("end", () => process.stdout.write(" " + res.statusCode));
});
process.stdout.write("sending");
req.end(body);
`;

/** POSTs the file `bodyFile` to `url` from a child process: when it starts sending, and the answer's status once read whole. */
function sendFromChild(url: string, bodyFile: string): { sending: Promise<void>; status: Promise<number> } {
  const child = spawn(process.execPath, ["-e", SENDER, url, bodyFile], { stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  let started: () => void;
  const sending = new Promise<void>((resolve) => (started = resolve));
  child.stdout!.on("data", (d: Buffer) => {
    out += d.toString();
    if (out.startsWith("sending")) started();
  });
  const status = new Promise<number>((resolve, reject) =>
    child.once("exit", (code) =>
      code === 0 ? resolve(Number(out.slice("sending".length))) : reject(new Error(`the sender exited with ${code}`)),
    ),
  );
  return { sending, status };
}

/** The short request: a few greedy tokens of a plain completion. */
async function shortRequest(): Promise<number> {
  const started = performance.now();
  const response = await postJson(`${server.url}/completion`, { prompt: "The river", n_predict: 8 });
  expect(response.status).toBe(200);
  await response.json();
  return performance.now() - started;
}

/**
 * A grammar of about `bytes` bytes that the server accepts and must work at: an alternation of
 * `alternatives` words (each step follows every one of them) and then a sequence of words to the
 * size. (An alternation of 1 MB alone is refused at its first step, past the grammar's work limit:
 * it would measure a refusal, not the heaviest grammar allowed.)
 */
function bigGrammar(bytes: number, alternatives: number): string {
  const words: string[] = [];
  for (let i = 0, length = 0; length < bytes; i++) {
    const word = `"w${i.toString(36)}"`;
    words.push(word);
    length += word.length + (i < alternatives ? 3 : 1);
  }
  return `root ::= (${words.slice(0, alternatives).join(" | ")}) ${words.slice(alternatives).join(" ")}`;
}

/**
 * An enum at JSON_SCHEMA_LIMITS.enumValues, of values long enough to near its grammar's size limit
 * (`room`: the characters the rest of the grammar takes).
 */
function bigEnum(room = 0): Record<string, unknown> {
  const count = JSON_SCHEMA_LIMITS.enumValues;
  const length = Math.floor((JSON_SCHEMA_LIMITS.grammarChars - room) / count) - 8;
  return { enum: Array.from({ length: count }, (_, i) => `${i.toString(36)}`.padEnd(length, "v")) };
}

/**
 * Each heavy request (its path and its body), and a light one of the same kind that goes first, unmeasured:
 * the server's one-time costs on that path (a worker thread's start, V8's first compile of the code) are the
 * process's, not the heavy request's.
 */
const HEAVY: Record<string, { heavy: () => [string, unknown]; light: [string, unknown]; status: number }> = {
  "the largest body of spaces to /tokenize": {
    heavy: () => ["/tokenize", { content: " ".repeat(BODY_LIMIT - 32) }],
    light: ["/tokenize", { content: " ".repeat(100_000) }],
    status: 200,
  },
  "a grammar at its size limit": {
    heavy: () => ["/completion", { prompt: "x", n_predict: 4, grammar: bigGrammar(1_000_000, 10_000) }],
    light: ["/completion", { prompt: "x", n_predict: 4, grammar: bigGrammar(1_000, 10) }],
    status: 200,
  },
  "a JSON schema at its limits": {
    heavy: () => ["/v1/chat/completions", schemaChat(bigEnum())],
    light: ["/v1/chat/completions", schemaChat({ enum: ["yes", "no"] })],
    status: 200,
  },
  "a forced call of a tool whose schema is at its limits": {
    heavy: () => ["/v1/chat/completions", toolChat(bigEnum(2_000))],
    light: ["/v1/chat/completions", toolChat({ enum: ["yes", "no"] })],
    status: 200,
  },
  "a chat template that runs to its deadline": {
    heavy: () => [
      "/v1/chat/completions",
      { messages: [{ role: "user", content: "hi" }], max_tokens: 4, chat_template_kwargs: { loop_forever: true } },
    ],
    light: ["/v1/chat/completions", { messages: [{ role: "user", content: "hi" }], max_tokens: 4 }],
    // Refused when the render's deadline passes: the heaviest a template can be is the deadline.
    status: 400,
  },
};

/** A chat that must call a tool whose one argument follows `schema`. */
function toolChat(schema: Record<string, unknown>): Record<string, unknown> {
  const parameters = { type: "object", properties: { choice: schema }, required: ["choice"] };
  return {
    messages: [{ role: "user", content: "Pick one." }],
    max_tokens: 4,
    tools: [{ type: "function", function: { name: "pick", parameters } }],
    tool_choice: "required",
  };
}

/** A chat whose answer follows `schema`. */
function schemaChat(schema: Record<string, unknown>): Record<string, unknown> {
  return {
    messages: [{ role: "user", content: "Pick one." }],
    max_tokens: 4,
    response_format: { type: "json_schema", json_schema: { schema } },
  };
}

describe.skipIf(!headroom)("while one client sends the heaviest request", () => {
  let quiet = 0;

  beforeAll(async () => {
    await shortRequest();
    const times = [await shortRequest(), await shortRequest(), await shortRequest()];
    quiet = times.sort((a, b) => a - b)[1]!;
    process.stderr.write(`concurrency: a short request takes ${quiet.toFixed(0)} ms alone\n`);
  });

  for (const [what, { heavy: make, light, status: expected }] of Object.entries(HEAVY)) {
    it(`${what}: /health answers within 100 ms and a short request within twice its quiet time`, async () => {
      const warm = await postJson(`${server.url}${light[0]}`, light[1]);
      expect(warm.status).toBe(200);
      await warm.text();
      // Sent by a process of its own, once it has read the body: writing 8 MB takes this process's
      // event loop tens of milliseconds, which the timings below would count as the server's.
      const [path, json] = make();
      const bodyFile = join(mkdtempSync(join(tmpdir(), "bloomery-heavy-")), "body.json");
      writeFileSync(bodyFile, JSON.stringify(json));
      const heavy = sendFromChild(`${server.url}${path}`, bodyFile);
      await heavy.sending;
      let done = false;
      const finished = heavy.status.then((status) => {
        done = true;
        return status;
      });
      // /health, every 20 ms while the heavy request runs.
      const healthLatencies: number[] = [];
      const polling = (async () => {
        while (!done) {
          const started = performance.now();
          const response = await getUrl(`${server.url}/health`);
          await response.text();
          healthLatencies.push(performance.now() - started);
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
      })();
      // Up to three short requests while the heavy one runs, their median: one request of ~15 ms
      // is within the jitter of a shared VM's scheduler, three are not.
      const shorts: number[] = [];
      do shorts.push(await shortRequest());
      while (!done && shorts.length < 3);
      const short = shorts.sort((a, b) => a - b)[shorts.length >> 1]!;
      const status = await finished;
      await polling;
      const worstHealth = Math.max(...healthLatencies);
      process.stderr.write(
        `concurrency: ${what}: ${status}, short request ${short.toFixed(0)} ms (of ${shorts.length}), ` +
          `/health worst ${worstHealth.toFixed(0)} ms of ${healthLatencies.length}\n`,
      );
      expect(status).toBe(expected);
      expect(healthLatencies.length).toBeGreaterThan(0);
      expect(worstHealth).toBeLessThan(100);
      // The heavy request's worker holds a core meanwhile, so the short request, the event loop, this
      // client and its /health polls share the others: 8 MB to /tokenize made the short one 2.1x
      // slower on CI's 2 cores in two runs (25 against 12 ms) with /health at 15 ms, nothing
      // blocked. A blocked event loop or slot holds it for the heavy request's seconds.
      expect(short).toBeLessThan(2 * (cores / (cores - 1)) * quiet);
    }, 120_000);
  }
});
