// bloomery-serve under load: 8 streaming clients for a minute, over loopback, each checking that
// every streamed answer is exactly its own prompt's greedy answer, so a request lost, cut short or
// mixed with another client's shows as an error or a mismatch.
import { afterEach, describe, expect, it } from "vitest";
import { getUrl, greedyChat, postJson, startServer, type TestServer } from "./server-helpers.js";

/** How long each run holds its clients busy. */
const LOAD_MS = 60_000;
const CLIENTS = 8;
const MAX_TOKENS = 24;
/** Every this many requests a client streams llama.cpp's /completion instead of a chat. */
const COMPLETION_EVERY = 4;
/** Each client has its own question, hence its own answer. */
const QUESTIONS = [
  "What is a dog?",
  "Why is the sky blue?",
  "Name three colours.",
  "How do birds fly?",
  "What is rain made of?",
  "Count from one to five.",
  "Where do fish live?",
  "What does a baker make?",
];

interface ClientReport {
  requests: number;
  completions: number;
  errors: string[];
  mismatches: string[];
  latenciesMs: number[];
}

/** The `data:` payloads of an event stream, in order ("[DONE]" kept as text). */
function events(text: string): string[] {
  return text
    .split("\n\n")
    .filter((block) => block.startsWith("data: "))
    .map((block) => block.slice(6));
}

/** The text of a streamed chat completion; throws when the stream is not whole. */
function chatText(body: string): string {
  const data = events(body);
  if (data.at(-1) !== "[DONE]") throw new Error("the chat stream does not end with [DONE]");
  const chunks = data.slice(0, -1).map((d) => JSON.parse(d));
  const finishes = chunks.filter((c) => c.choices[0]?.finish_reason);
  if (finishes.length !== 1) throw new Error(`the chat stream has ${finishes.length} finish_reason chunks`);
  return chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("");
}

/** The text of a streamed /completion; throws when the stream is not whole. */
function completionText(body: string): string {
  const chunks = events(body).map((d) => JSON.parse(d));
  if (chunks.at(-1)?.stop !== true) throw new Error("the /completion stream does not end with stop: true");
  return chunks.map((c) => c.content).join("");
}

async function runClient(server: TestServer, question: string, expected: string, until: number): Promise<ClientReport> {
  const report: ClientReport = { requests: 0, completions: 0, errors: [], mismatches: [], latenciesMs: [] };
  const prompt = server.model.applyChatTemplate([{ role: "user", content: question }]);
  while (Date.now() < until) {
    const asCompletion = report.requests % COMPLETION_EVERY === COMPLETION_EVERY - 1;
    const started = performance.now();
    try {
      const response = asCompletion
        ? await postJson(`${server.url}/completion`, { prompt, n_predict: MAX_TOKENS, temperature: 0, stream: true })
        : await postJson(`${server.url}/v1/chat/completions`, {
            model: "tiny",
            messages: [{ role: "user", content: question }],
            temperature: 0,
            max_tokens: MAX_TOKENS,
            stream: true,
          });
      const body = await response.text();
      if (response.status !== 200) throw new Error(`status ${response.status}: ${body.slice(0, 200)}`);
      const text = asCompletion ? completionText(body) : chatText(body);
      if (text !== expected) report.mismatches.push(`${JSON.stringify(text)} instead of ${JSON.stringify(expected)}`);
    } catch (error) {
      report.errors.push((error as Error).message);
    }
    report.latenciesMs.push(performance.now() - started);
    report.requests++;
    if (asCompletion) report.completions++;
  }
  return report;
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

let server: TestServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

describe.each([
  { slots: CLIENTS, clients: CLIENTS },
  { slots: 4, clients: CLIENTS },
])("bloomery-serve with $slots slots under $clients streaming clients", ({ slots, clients }) => {
  it(
    `serves every request whole and unmixed for ${LOAD_MS / 1000} s`,
    async () => {
      server = await startServer({ parallel: slots });
      const questions = QUESTIONS.slice(0, clients);
      const expected: string[] = [];
      for (const question of questions) expected.push(await greedyChat(server.model, question, MAX_TOKENS));
      // Distinct answers, so that a client handed another's tokens sees a mismatch.
      expect(new Set(expected).size).toBe(clients);

      const until = Date.now() + LOAD_MS;
      const reports = await Promise.all(questions.map((q, i) => runClient(server!, q, expected[i]!, until)));

      const latencies = reports.flatMap((r) => r.latenciesMs).sort((a, b) => a - b);
      const total = reports.reduce((sum, r) => sum + r.requests, 0);
      console.log(
        `load (${slots} slots, ${clients} clients, ${LOAD_MS / 1000} s): ${total} requests ` +
          `(${reports.map((r) => r.requests).join(", ")} per client; ` +
          `${reports.reduce((sum, r) => sum + r.completions, 0)} of them /completion), ` +
          `latency p50 ${percentile(latencies, 50).toFixed(0)} ms, p95 ${percentile(latencies, 95).toFixed(0)} ms`,
      );
      expect(reports.flatMap((r) => r.errors)).toEqual([]);
      expect(reports.flatMap((r) => r.mismatches)).toEqual([]);
      for (const report of reports) {
        expect(report.requests).toBeGreaterThanOrEqual(COMPLETION_EVERY);
        expect(report.completions).toBeGreaterThanOrEqual(1);
      }
      expect(await (await getUrl(`${server.url}/health`)).json()).toEqual({ status: "ok" });
    },
    LOAD_MS + 240_000,
  );
});
