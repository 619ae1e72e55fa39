// bloomery-serve over contexts of 4 to 12 of gpt-oss's sliding windows (tiny-gpt-oss with the
// released files' types: windows of 32 on every other layer, sinks, MXFP4 experts with the clamped
// SwiGLU): the greedy tokens /completion answers to prompts of token ids are llama.cpp's own greedy
// tokens on the same file (node-llama-cpp's CPU build, one token at a time with the full-size window
// cache, as the CPU oracle runs it), for plain text, arbitrary ids and a longer context. A window
// that kept a position too many or too few, or a cache that moved its rows to the wrong place,
// parts them within a few tokens.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { getLlama, LlamaLogLevel, type Llama, type LlamaModel, type Token } from "node-llama-cpp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { writeSyntheticModel } from "../tools/synth/synth.js";
import { idTokens, proseTokens } from "./oracle-inputs.js";
import { postJson, startServer, type TestServer } from "./server-helpers.js";

const WINDOW = 32; // tiny-gpt-oss's sliding window
const ANSWER = 24; // tokens generated after each prompt
const CONTEXT = 512;

/** The index of the largest entry of llama.cpp's probabilities (the lower id on a tie, as greedy sampling takes it). */
function best(probabilities: Map<Token, number>): number {
  let top = -1;
  let topP = -1;
  for (const [token, p] of probabilities) {
    if (p > topP || (p === topP && token < top)) [top, topP] = [token, p];
  }
  return top;
}

describe("bloomery-serve's greedy answers past gpt-oss's sliding window", () => {
  const dir = mkdtempSync(join(tmpdir(), "bloomery-window-"));
  const path = join(dir, "tiny-gpt-oss-mxfp4.gguf");
  let server: TestServer;
  let llama: Llama;
  let reference: LlamaModel;
  let vocabSize = 0;
  let bos = 0;

  beforeAll(async () => {
    const plan = await writeSyntheticModel(path, { preset: "tiny-gpt-oss-mxfp4" });
    vocabSize = plan.vocab.tokens.length;
    bos = plan.vocab.bos;
    server = await startServer({ modelPath: path, contextSize: CONTEXT, parallel: 1 });
    llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
    reference = await llama.loadModel({ modelPath: path });
  }, 120_000);

  afterAll(async () => {
    await server?.close();
    await reference?.dispose();
    await llama?.dispose();
    rmSync(dir, { recursive: true, force: true });
  });

  /** llama.cpp's greedy continuation of `prompt`, up to ANSWER tokens or its end-of-generation token. */
  async function llamaCppGreedy(prompt: number[]): Promise<number[]> {
    const context = await reference.createContext({
      contextSize: CONTEXT,
      threads: 2,
      flashAttention: false,
      swaFullCache: true,
    });
    try {
      const sequence = context.getSequence();
      const next = async (token: number) => {
        const [result] = await sequence.controlledEvaluate([
          [token as Token, { generateNext: { probabilities: true } }],
        ]);
        return best(result!.next!.probabilities!);
      };
      let token = -1;
      for (const t of prompt) token = await next(t);
      const answer: number[] = [];
      while (answer.length < ANSWER && !reference.isEogToken(token as Token)) {
        answer.push(token);
        token = await next(token);
      }
      return answer;
    } finally {
      await context.dispose();
    }
  }

  /** The server's greedy answer's tokens, its end-of-generation token left out. */
  async function served(prompt: number[]): Promise<number[]> {
    const body = { prompt, n_predict: ANSWER, temperature: 0, return_tokens: true, cache_prompt: false };
    const done = await (await postJson(`${server.url}/completion`, body)).json();
    return (done.tokens as number[]).filter((t) => !reference.isEogToken(t as Token));
  }

  for (const [what, length] of [
    ["plain text", 4 * WINDOW + 17],
    ["arbitrary ids", 6 * WINDOW + 5],
    ["a long context of arbitrary ids", 12 * WINDOW + 9],
  ] as const) {
    it(`${what}: ${length} prompt tokens, ${(length / WINDOW).toFixed(1)} windows`, async () => {
      const prompt =
        what === "plain text"
          ? proseTokens((text) => server.model.tokenize(text), length)
          : idTokens(bos, vocabSize, length);
      const want = await llamaCppGreedy(prompt);
      expect(want.length).toBeGreaterThan(0);
      expect(await served(prompt)).toEqual(want);
    }, 120_000);
  }
});
