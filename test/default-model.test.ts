import { statSync } from "node:fs";
import {
  getLlama,
  JinjaTemplateChatWrapper,
  LlamaLogLevel,
  type Llama,
  type LlamaModel,
  type Token,
} from "node-llama-cpp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel, readGgufInfo, type Model } from "../src/index.js";
import { f16ToF32 } from "../tools/synth/blocks.js";
import { quantizeQ8_0 } from "../tools/train/export.js";
import { idTokens, proseTokens } from "./oracle-inputs.js";
import { contextFor, expectAgreement, llamaCppDistributions, ourDistributions, sameArithmetic } from "./oracle.js";

// The trained default model that ships in models/ (models/README.md): it must stay a small glm4moe
// (the trained qwen3moe trunk under glm4moe's names, and a trained next-token-prediction layer) that
// llama.cpp loads, tokenizes with and chats with through the template stored in the file.
const MODEL = "models/bloomery-tiny-moe-Q8_0.gguf";

describe("the default model's file", () => {
  it("is a glm4moe of 6 layers x 16 experts (4 used) and a next-n layer, Q8_0 matrices and F32 norms and routers", async () => {
    const info = await readGgufInfo(MODEL);
    expect(info.summary).toMatchObject({ architecture: "glm4moe", layers: 7, experts: 16, expertsUsed: 4 });
    expect(info.metadata["glm4moe.nextn_predict_layers"]).toBe(1);
    expect(info.summary.contextLength).toBe(1024);
    expect(Object.keys(info.summary.bytesByType).sort()).toEqual(["F32", "Q8_0"]);
    expect(info.tensors.find((t) => t.name === "blk.0.ffn_down_exps.weight")?.shape).toEqual([128, 384, 16]);
    expect(info.tensors.find((t) => t.name === "blk.6.nextn.eh_proj.weight")?.shape).toEqual([768, 384]);
    expect(info.metadata["tokenizer.ggml.pre"]).toBe("qwen2");
    expect(statSync(MODEL).size).toBeLessThan(30e6);
  });

  it("drafts with its next-token-prediction layer what greedy decoding then keeps, most of the time", async () => {
    const model = await loadModel(MODEL, { gpu: false, threads: 1, contextSize: 1024 });
    try {
      let drafted = 0,
        kept = 0;
      for (const question of [
        "What is a river?",
        'What does "whisper" mean?',
        "Tell me a fortune.",
        "Define computer.",
        "What is music?",
      ]) {
        const prompt = model.tokenize(model.applyChatTemplate([{ role: "user", content: question }]), {
          special: true,
        });
        const draft = { source: "mtp", adaptive: false, max: 1 } as const;
        const without = await model.createSession().generate(prompt, { maxTokens: 64, draft: false }).result;
        const withDrafts = await model.createSession().generate(prompt, { maxTokens: 64, draft }).result;
        expect(withDrafts.tokens).toEqual(without.tokens);
        drafted += withDrafts.timings.draftTokens;
        kept += withDrafts.timings.draftAccepted;
      }
      // An untrained layer (or one fed the wrong position's hidden state) keeps a few percent.
      expect(drafted).toBeGreaterThan(80);
      expect(kept / drafted).toBeGreaterThan(0.35);
    } finally {
      model.dispose();
    }
  });
});

describe("the export's Q8_0 blocks", () => {
  it("scale each block by max|x| / 127 and round half away from zero", () => {
    const values = new Float32Array(32);
    values[0] = -127 / 64; // max|x|: d = 1/64, exact in f16
    values[1] = 1 / 128; // half a step each way: away from zero
    values[2] = -1 / 128;
    values[3] = 0.3;
    const block = quantizeQ8_0(values);
    expect(block).toHaveLength(34);
    const view = new DataView(block.buffer);
    expect(f16ToF32(view.getUint16(0, true))).toBe(1 / 64);
    expect([0, 1, 2, 3, 4].map((i) => view.getInt8(2 + i))).toEqual([-127, 1, -1, 19, 0]);
  });
});

describe("llama.cpp runs the default model", () => {
  let llama: Llama;
  let model: LlamaModel;

  beforeAll(async () => {
    llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
    model = await llama.loadModel({ modelPath: MODEL });
  });

  afterAll(async () => {
    await model?.dispose();
    await llama?.dispose();
  });

  it("round-trips text through its tokenizer", () => {
    for (const text of [
      "A dog is a domesticated animal.",
      "  indented\n\ttabs, 12345 digits, ünïcode — and émoji 🙂",
      "",
    ]) {
      expect(model.detokenize(model.tokenize(text))).toBe(text);
    }
    expect(model.tokenize("<|im_start|>", true)).toHaveLength(1);
    expect(model.tokens.eos).toBe(model.tokenize("<|im_end|>", true)[0]);
  });

  it("answers a chat prompt in English, greedily, through its own template", async () => {
    const wrapper = new JinjaTemplateChatWrapper({ template: String(model.fileInfo.metadata.tokenizer.chat_template) });
    const { contextText } = wrapper.generateContextState({
      chatHistory: [
        { type: "user", text: "What is a dog?" },
        { type: "model", response: [] },
      ],
    });
    const context = await model.createContext({ contextSize: 256, threads: 1 }); // a tiny model: more threads only spin
    try {
      const answer: Token[] = [];
      for await (const token of context
        .getSequence()
        .evaluate(contextText.tokenize(model.tokenizer), { temperature: 0 })) {
        if (token === model.tokens.eos || answer.length === 24) break;
        answer.push(token);
      }
      const text = model.detokenize(answer);
      expect(text).toMatch(/^A dog is /);
      expect(text.split(" ").length).toBeGreaterThan(4);
    } finally {
      await context.dispose();
    }
  });
});

describe("bloomery runs the default model as llama.cpp does", () => {
  // Next-token distributions against llama.cpp's on four inputs (test/oracle.ts: agreementBar
  // against llama.cpp's own batched-vs-one-by-one floor, and the same distributions where
  // llama.cpp's CPU variant is of our SIMD tier: this model grows one ulp of difference into a
  // KL as large as that floor within a few positions). A tiny model: more threads only spin.
  const THREADS = 1;
  let llama: Llama;
  let exact: boolean;

  beforeAll(async () => {
    llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
    exact = sameArithmetic(llama);
  });

  afterAll(async () => {
    await llama?.dispose();
  });

  async function check(label: string, tokens: number[]) {
    const options = { threads: THREADS, contextSize: contextFor(tokens.length) };
    const ours = await ourDistributions(MODEL, tokens, options);
    const reference = await llamaCppDistributions(llama, MODEL, tokens, ours.vocab, options);
    expectAgreement(`default model, ${label}`, reference, ours, exact);
  }

  async function withModel<T>(use: (model: Model) => Promise<T> | T): Promise<T> {
    const model = await loadModel(MODEL, { gpu: false, threads: THREADS, contextSize: 1024 });
    try {
      return await use(model);
    } finally {
      model.dispose();
    }
  }

  it("agrees with llama.cpp over a chat and its greedy answer", async () => {
    const tokens = await withModel(async (model) => {
      const prompt = model.applyChatTemplate([{ role: "user", content: "What is a river? Tell me a fortune too." }]);
      const promptTokens = Array.from(model.tokenize(prompt, { special: true }));
      const answer = await model.createSession().generate(promptTokens, { maxTokens: 64 }).result;
      return [...promptTokens, ...answer.tokens];
    });
    expect(tokens.length).toBeGreaterThanOrEqual(64);
    await check("chat", tokens);
  });

  it("agrees with llama.cpp on plain English it was not trained on", async () => {
    await check("plain text", await withModel((model) => proseTokens((text) => model.tokenize(text), 256)));
  });

  it("agrees with llama.cpp on arbitrary token ids", async () => {
    await check("arbitrary ids", await withModel((model) => idTokens(model.info.bosToken, model.info.vocabSize, 256)));
  });

  it("agrees with llama.cpp over a long context (1,000 tokens of its 1,024)", async () => {
    await check("long context", await withModel((model) => proseTokens((text) => model.tokenize(text), 1_000)));
  });

  it("answers a question in English through the file's template", async () => {
    const model = await loadModel(MODEL, { gpu: false, threads: 1 });
    try {
      const prompt = model.applyChatTemplate([{ role: "user", content: "What is a dog?" }]);
      const { text, stopReason } = await model
        .createSession()
        .generate(model.tokenize(prompt, { special: true }), { maxTokens: 48 }).result;
      expect(text).toMatch(/^A dog is /);
      expect(stopReason).toBe("eos"); // it ends its turn with <|im_end|>
    } finally {
      model.dispose();
    }
  });
});
