// bloomery-serve with llama-server's speculative-decoding flags (issue 20): a draft model (-md) and
// --draft-max through the openai client give, streamed, the text of a run without drafts, and the
// response's timings and /metrics count the drafts as llama-server does.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel } from "../src/index.js";
import { DEFAULT_MODEL, writeDraftModel } from "./draft-helpers.js";
import { getUrl, greedyChat, postJson, spawnServe, type ServeProcess } from "./server-helpers.js";

const dir = mkdtempSync(join(tmpdir(), "bloomery-server-draft-"));
const QUESTIONS = ["What is a river?", 'What does "whisper" mean?'];
let server: ServeProcess;
let url: string;
let expected: string[];

beforeAll(async () => {
  const model = await loadModel(DEFAULT_MODEL, { threads: 2 });
  expected = [];
  for (const question of QUESTIONS) expected.push(await greedyChat(model, question, 64));
  model.dispose();
  server = spawnServe([
    "-m",
    DEFAULT_MODEL,
    "-md",
    await writeDraftModel(dir),
    "--draft-max",
    "4",
    "-t",
    "2",
    "--port",
    "0",
    "--metrics",
  ]);
  url = await server.loaded();
}, 60_000);

afterAll(async () => {
  await server?.kill();
  rmSync(dir, { recursive: true, force: true });
});

describe("bloomery-serve -md --draft-max", () => {
  it("streams the text of a run without drafts, and counts the drafts", async () => {
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "unused", maxRetries: 0 });
    for (const [i, question] of QUESTIONS.entries()) {
      const stream = await client.chat.completions.create({
        model: "tiny",
        messages: [{ role: "user", content: question }],
        temperature: 0,
        max_tokens: 64,
        stream: true,
      });
      let text = "";
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
      expect(text).toBe(expected[i]);
    }
    // The native endpoint's timings: draft_n and draft_n_accepted, as llama-server reports them when it drafted.
    const completion = await (
      await postJson(`${url}/completion`, { prompt: "A river is", n_predict: 48, temperature: 0 })
    ).json();
    expect(completion.timings.draft_n).toBeGreaterThan(0);
    expect(completion.timings.draft_n_accepted).toBeLessThanOrEqual(completion.timings.draft_n);
    const metrics = await (await getUrl(`${url}/metrics`)).text();
    const counter = (name: string) => Number(new RegExp(`^llamacpp:${name} (\\S+)$`, "m").exec(metrics)?.[1]);
    expect(counter("spec_decode_num_draft_tokens_total")).toBeGreaterThanOrEqual(completion.timings.draft_n);
    expect(counter("spec_decode_num_drafts_total")).toBeGreaterThan(0);
    expect(counter("spec_decode_num_accepted_tokens_total")).toBeGreaterThan(0);
  });

  it("takes llama-server's per-request speculative.n_max, n_min and p_min over the flags", async () => {
    const run = async (fields: Record<string, unknown>) => {
      const response = await postJson(`${url}/completion`, {
        prompt: "A river is",
        n_predict: 32,
        temperature: 0,
        ...fields,
      });
      expect(response.status).toBe(200);
      return (await response.json()) as { content: string; timings: { draft_n?: number } };
    };
    const flags = await run({});
    expect(flags.timings.draft_n).toBeGreaterThan(0);
    // No drafts at all with n_max 0; the tokens stay those of a run without drafts.
    const none = await run({ "speculative.n_max": 0 });
    expect(none.timings.draft_n ?? 0).toBe(0);
    expect(none.content).toBe(flags.content);
    // A draft model's probability floor of 1 ends every draft before its first token.
    const floor = await run({ "speculative.p_min": 1, "speculative.n_min": 0 });
    expect(floor.timings.draft_n ?? 0).toBe(0);
    const refused = await postJson(`${url}/completion`, { prompt: "A", "speculative.n_min": 8 });
    expect(refused.status).toBe(400);
    expect(((await refused.json()) as { error: { message: string } }).error.message).toMatch(/min/);
  });
});
