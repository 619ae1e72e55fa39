import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel, type DraftOption, type GenerateOptions, type Model } from "../src/index.js";
import { callNative, callNativeAsync, type NativeModelHandle, type NativeSessionHandle } from "../src/native.js";
import { writeSyntheticModel } from "../tools/synth/synth.js";

// MTP drafts (issue 20): the model's own next-token-prediction layer drafts the next tokens,
// chained, and a pass of the model verifies them. On the tiny GLM-4.5, DeepSeek-V3, MiMo-V2,
// Qwen3.5 and DeepSeek-V4 fixtures (one nextn layer each, random weights, so few drafts are kept and
// most roll back; Qwen3.5's recurrent states and DeepSeek-V4's compressors roll back from the pass's
// draft checkpoint; DeepSeek-V4's layer takes and passes on the four hyper-connection streams):
// - greedy output with drafts is the output without, alone and with parallel sessions;
// - the layer's logits from a session's rows, built pass by pass while drafts come and roll back
//   (and across a second generation that continues the first), equal a straightforward evaluation
//   afresh (engine::mtp_reference_logits: the model over every token in one pass, then the layer over
//   every position in one pass). node-llama-cpp has no MTP context, so llama.cpp cannot be asked for
//   the layer's logits: the reference is this computation, and the layer's graph follows llama.cpp's
//   (src/models/glm4-moe.cpp, deepseek2.cpp, mimo2.cpp, qwen35moe.cpp, deepseek4.cpp graph_mtp); two
//   sessions' generations share passes there, so each part's hidden rows must reach its own session.

const dir = mkdtempSync(join(tmpdir(), "bloomery-mtp-"));
const PRESETS = ["tiny-glm4moe", "tiny-deepseek2", "tiny-mimo2", "tiny-qwen35moe-mtp", "tiny-deepseek4"] as const;
const PROMPTS = [
  "A river is",
  "1, 2, 3, 4, 5, 6, 7, 8,",
  "To run means to move fast. To walk means to move slowly. To run means",
  "<|im_start|>user\nWhat is a whisper?<|im_end|>\n<|im_start|>assistant\n",
];
const paths: Record<string, string> = {};

beforeAll(async () => {
  for (const preset of PRESETS) {
    paths[preset] = join(dir, `${preset}.gguf`);
    await writeSyntheticModel(paths[preset]!, { preset, weightType: "Q8_0" });
  }
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function run(model: Model, prompt: string, options: GenerateOptions) {
  const session = model.createSession();
  try {
    return await session.generate(prompt, options).result;
  } finally {
    session.dispose();
  }
}

describe.each(PRESETS)("MTP drafts on %s", (preset) => {
  let model: Model;
  beforeAll(async () => {
    model = await loadModel(paths[preset]!, { threads: 2, contextSize: 512, parallel: 2, gpu: false });
  });
  afterAll(() => model?.dispose());

  const fixed: DraftOption = { source: "mtp", adaptive: false, max: 4 };

  it("gives the tokens of a run without drafts, alone and with parallel sessions", async () => {
    const expected = [];
    for (const prompt of PROMPTS) expected.push((await run(model, prompt, { maxTokens: 40, draft: false })).tokens);
    let drafted = 0;
    for (const [i, prompt] of PROMPTS.entries()) {
      const r = await run(model, prompt, { maxTokens: 40, draft: fixed });
      expect(r.tokens, `prompt ${i}`).toEqual(expected[i]);
      drafted += r.timings.draftTokens;
    }
    expect(drafted).toBeGreaterThan(0);
    const together = await Promise.all(PROMPTS.map((prompt) => run(model, prompt, { maxTokens: 40, draft: fixed })));
    expect(together.map((r) => r.tokens)).toEqual(expected);
    // The adaptive width, and "mtp" as the model's default.
    const adaptive = await Promise.all(PROMPTS.map((prompt) => run(model, prompt, { maxTokens: 40, draft: "mtp" })));
    expect(adaptive.map((r) => r.tokens)).toEqual(expected);
  });
});

/** A greedy generation through the addon, with MTP drafts of a fixed width; resolves to its tokens. */
function generate(session: NativeSessionHandle, prompt: number[], maxTokens: number): Promise<number[]> {
  const sampler = callNative((a) => a.createSampler({ temperature: 0 }));
  const tokens: number[] = [];
  return new Promise<number[]>((resolve, reject) => {
    callNative((a) =>
      a.sessionGenerate(
        session,
        Int32Array.from(prompt),
        sampler,
        maxTokens,
        (event) => {
          if ("token" in event) {
            tokens.push(event.token);
            return;
          }
          callNative((a) => a.disposeSampler(sampler));
          if (event.error) reject(event.error);
          else if (event.timings.draftTokens === 0) reject(new Error("no drafts were verified"));
          else resolve(tokens);
        },
        -1,
        { source: "mtp", adaptive: false, max: 3 },
      ),
    );
  });
}

describe.each(PRESETS)("the MTP layer's logits on %s", (preset) => {
  let handle: NativeModelHandle;
  beforeAll(async () => {
    handle = await callNativeAsync((a) => a.loadModel(paths[preset]!, { threads: 2, contextSize: 512, parallel: 2 }));
  });
  afterAll(() => callNative((a) => a.disposeModel(handle)));

  it("from a session's rows, built as drafts come and roll back, equal an evaluation afresh", async () => {
    const model = await loadModel(paths[preset]!, { threads: 1, contextSize: 64, gpu: false });
    const prompts = PROMPTS.map((p) => Array.from(model.tokenize(p)));
    model.dispose();
    // The session holds the prompt and the tokens drawn but the last, which an MTP draft would follow;
    // a generation that ended on an end-of-generation token evaluated every token it drew (the check
    // then follows them with the last again).
    const check = (session: NativeSessionHandle, drawn: number[], what: string) => {
      const held = callNative((a) => a.sessionPosition(session));
      const tokens = held === drawn.length ? [...drawn, drawn.at(-1)!] : drawn;
      expect(held, what).toBe(tokens.length - 1);
      const rows = callNative((a) => a.sessionMtpLogits(session, tokens.at(-1)!));
      const fresh = callNative((a) => a.modelMtpReferenceLogits(handle, Int32Array.from(tokens)));
      expect(rows.length, what).toBe(fresh.length);
      let worst = 0;
      for (let t = 0; t < fresh.length; t++) worst = Math.max(worst, Math.abs(rows[t]! - fresh[t]!));
      expect(worst, `${what}: the largest logit difference`).toBeLessThanOrEqual(1e-4);
    };
    for (const [i, prompt] of prompts.entries()) {
      const other = prompts[(i + 1) % prompts.length]!;
      const session = callNative((a) => a.createSession(handle));
      const beside = callNative((a) => a.createSession(handle));
      try {
        // Two generations sharing passes: each part's hidden rows reach its own session.
        const [first, alongside] = await Promise.all([generate(session, prompt, 24), generate(beside, other, 24)]);
        const context = [...prompt, ...first];
        check(session, context, `prompt ${i}`);
        check(beside, [...other, ...alongside], `prompt ${(i + 1) % prompts.length} beside it`);
        // A second generation continuing the first (its prompt begins with the context) reuses the rows.
        const more = [...context, ...other];
        const second = await generate(session, more, 16);
        check(session, [...more, ...second], `prompt ${i}, continued`);
      } finally {
        callNative((a) => a.disposeSession(session));
        callNative((a) => a.disposeSession(beside));
      }
    }
  });
});
