import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { getLlama, LlamaLogLevel, type Llama } from "node-llama-cpp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FILLABLE_TYPES } from "../tools/synth/blocks.js";
import { writeSyntheticModel } from "../tools/synth/synth.js";

// llama.cpp (node-llama-cpp's prebuilt CPU binary) is the oracle: it must load every synthetic
// fixture, tokenize with its vocabulary and produce finite next-token distributions.
const dir = mkdtempSync(join(tmpdir(), "bloomery-llama-cpp-"));
let llama: Llama;

beforeAll(async () => {
  // build: "never" makes a missing or unusable prebuilt binary fail here, instead of compiling llama.cpp for minutes.
  llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
});

afterAll(async () => {
  await llama?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

const CASES: [preset: string, type: string][] = [
  ["tiny-qwen3", "Q8_0"],
  ["tiny-qwen2", "Q8_0"],
  ["tiny-llama", "Q8_0"],
  ["tiny-llama", "Q4_K"],
  ...FILLABLE_TYPES.map((type): [string, string] => ["tiny-qwen3moe", type]),
];

describe("llama.cpp loads synthetic models", () => {
  for (const [preset, type] of CASES) {
    it(`${preset} ${type}`, async () => {
      const path = join(dir, `${preset}-${type}.gguf`);
      const plan = await writeSyntheticModel(path, { preset, weightType: type });
      const nVocab = plan.vocab.tokens.length;
      const model = await llama.loadModel({ modelPath: path });
      try {
        expect(model.tokens.bos).toBe(plan.vocab.bos);
        expect(model.tokens.eos).toBe(plan.vocab.eos);
        expect(model.fileInfo.metadata.general.architecture).toBe(plan.preset.architecture);

        const text = "Hello world, the experts";
        const tokens = model.tokenize(text);
        expect(tokens.length).toBeGreaterThan(1);
        expect(tokens.length).toBeLessThan(Buffer.byteLength(text));
        expect(model.detokenize(tokens)).toBe(text);

        const context = await model.createContext({ contextSize: 256, threads: 1 }); // tiny models: more threads only spin
        try {
          const sequence = context.getSequence();
          const results = await sequence.controlledEvaluate([
            ...tokens.slice(0, -1),
            [tokens.at(-1)!, { generateNext: { probabilities: true, token: true } }],
          ]);
          const next = results.at(-1)!.next;
          const probabilities = [...next.probabilities!.values()];
          expect(probabilities.every(Number.isFinite)).toBe(true);
          expect(probabilities.reduce((a, b) => a + b, 0)).toBeCloseTo(1, 3);

          // Greedy decoding from the first sampled token, as a generation loop runs it.
          const generated = [next.token!];
          for await (const token of sequence.evaluate([next.token!], { temperature: 0 })) {
            generated.push(token);
            if (generated.length === 4) break;
          }
          expect(generated).toHaveLength(4);
          for (const token of generated) {
            expect(token).toBeGreaterThanOrEqual(0);
            expect(token).toBeLessThan(nVocab);
          }
        } finally {
          await context.dispose();
        }
      } finally {
        await model.dispose();
      }
    });
  }
});
