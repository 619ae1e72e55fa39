/**
 * Helpers of the chat tests that run the engine: sampling that makes a tiny model write a given
 * text, and tiny models whose vocabulary and chat template are a model family's.
 */
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { expect } from "vitest";
import type { GgufMetadataType, GgufValue } from "../src/gguf/types.js";
import { writeGguf, type Model } from "../src/index.js";
import { tensorFiller } from "../tools/synth/blocks.js";
import { streamKey } from "../tools/synth/random.js";
import { planSyntheticModel } from "../tools/synth/synth.js";
import { byteSymbols, learnMerges, TokenType, TRAINING_TEXT } from "../tools/synth/vocab.js";

/**
 * Sampling that makes the engine write `text` greedily: a logit bias ranks its tokens (which must
 * all differ), and a presence penalty over a window as long as the text takes each used one out.
 */
export function forceText(model: Model, text: string) {
  const tokens = Array.from(model.tokenize(text, { special: true }));
  expect(new Set(tokens).size, "the forced text's tokens all differ").toBe(tokens.length);
  const logitBias: Record<number, number> = {};
  tokens.forEach((token, i) => (logitBias[token] = 100 * (tokens.length - i)));
  return { logitBias, presencePenalty: 1000, repeatLastN: tokens.length - 1, maxTokens: tokens.length };
}

const { control, userDefined } = TokenType;

/** A model family's tokenizer as its GGUF files carry it: pre-tokenizer, special tokens (with their types), template. */
interface FamilyTokens {
  pre: string;
  special: [string, number][];
  bos: string;
  eos: string;
  addBos: boolean;
  /** A file of test/chat-templates/. */
  template: string;
}

/** DeepSeek-V3.1's tokenizer and template; DeepSeek-R1 has the same tokens and its own template. */
const DEEPSEEK_V31: FamilyTokens = {
  pre: "deepseek-v3",
  special: [
    ["<｜begin▁of▁sentence｜>", control],
    ["<｜end▁of▁sentence｜>", control],
    ["<｜User｜>", control],
    ["<｜Assistant｜>", control],
    ["<think>", userDefined],
    ["</think>", userDefined],
    ["<｜tool▁calls▁begin｜>", control],
    ["<｜tool▁calls▁end｜>", control],
    ["<｜tool▁call▁begin｜>", control],
    ["<｜tool▁call▁end｜>", control],
    ["<｜tool▁sep｜>", control],
    ["<｜tool▁output▁begin｜>", control],
    ["<｜tool▁output▁end｜>", control],
  ],
  bos: "<｜begin▁of▁sentence｜>",
  eos: "<｜end▁of▁sentence｜>",
  addBos: false,
  template: "deepseek-ai-DeepSeek-V3.1.jinja",
};

/**
 * The families whose chats the tests run. Token types as llama.cpp's converter writes them: added
 * tokens that look special (`<|...|>`, `<｜...｜>`) or are special in the model's tokenizer are
 * control tokens (hidden from output unless shown), the rest user-defined.
 */
export const CHAT_FAMILIES = {
  "qwen3-coder": {
    pre: "qwen2",
    special: [
      ["<|endoftext|>", control],
      ["<|im_start|>", control],
      ["<|im_end|>", control],
      ["<tool_call>", userDefined],
      ["</tool_call>", userDefined],
      ["<think>", userDefined],
      ["</think>", userDefined],
    ],
    bos: "<|endoftext|>",
    eos: "<|im_end|>",
    addBos: false,
    template: "Qwen3-Coder.jinja",
  },
  "deepseek-v3.1": DEEPSEEK_V31,
  "deepseek-r1": { ...DEEPSEEK_V31, template: "llama-cpp-deepseek-r1.jinja" },
  // DeepSeek-V3.2 writes its calls in DSML around the token `｜DSML｜` (a control token here: the harder
  // case, whose text the chat must show and a grammar must name by id).
  "deepseek-v3.2": {
    ...DEEPSEEK_V31,
    special: [...DEEPSEEK_V31.special, ["｜DSML｜", control]],
    template: "deepseek-ai-DeepSeek-V3.2.jinja",
  },
  "glm-4.5": {
    pre: "glm4",
    special: [
      ["<|endoftext|>", control],
      ["[gMASK]", control],
      ["<sop>", control],
      ["<|system|>", control],
      ["<|user|>", control],
      ["<|assistant|>", control],
      ["<|observation|>", control],
      ["<think>", userDefined],
      ["</think>", userDefined],
      ["<tool_call>", userDefined],
      ["</tool_call>", userDefined],
      ["<tool_response>", userDefined],
      ["</tool_response>", userDefined],
      ["<arg_key>", userDefined],
      ["</arg_key>", userDefined],
      ["<arg_value>", userDefined],
      ["</arg_value>", userDefined],
    ],
    bos: "[gMASK]",
    eos: "<|endoftext|>",
    addBos: false,
    template: "GLM-4.6.jinja",
  },
  "kimi-k2": {
    pre: "kimi-k2",
    special: [
      ["[BOS]", control],
      ["<|im_end|>", control],
      ["<|im_user|>", control],
      ["<|im_assistant|>", control],
      ["<|im_system|>", control],
      ["<|im_middle|>", control],
      ["<think>", control],
      ["</think>", control],
      ["<|tool_calls_section_begin|>", control],
      ["<|tool_calls_section_end|>", control],
      ["<|tool_call_begin|>", control],
      ["<|tool_call_argument_begin|>", control],
      ["<|tool_call_end|>", control],
    ],
    bos: "[BOS]",
    eos: "<|im_end|>",
    addBos: false,
    template: "Kimi-K2-Thinking.jinja",
  },
  "minimax-m2": {
    pre: "minimax-m2",
    special: [
      ["]~!b[", control],
      ["]~b]", control],
      ["[e~[", control],
      ["<think>", userDefined],
      ["</think>", userDefined],
      ["<minimax:tool_call>", control],
      ["</minimax:tool_call>", control],
    ],
    bos: "]~!b[",
    eos: "[e~[",
    addBos: false,
    template: "MiniMax-M2.jinja",
  },
  "qwen3.5": {
    pre: "qwen35",
    special: [
      ["<|endoftext|>", control],
      ["<|im_start|>", control],
      ["<|im_end|>", control],
      ["<tool_call>", userDefined],
      ["</tool_call>", userDefined],
      ["<tool_response>", userDefined],
      ["</tool_response>", userDefined],
      ["<think>", userDefined],
      ["</think>", userDefined],
    ],
    bos: "<|endoftext|>",
    eos: "<|im_end|>",
    addBos: false,
    template: "Qwen3.5-4B.jinja",
  },
  harmony: {
    pre: "gpt-4o",
    special: [
      ["<|startoftext|>", control],
      ["<|endoftext|>", control],
      ["<|return|>", control],
      ["<|constrain|>", control],
      ["<|channel|>", control],
      ["<|start|>", control],
      ["<|end|>", control],
      ["<|message|>", control],
      ["<|call|>", control],
      // Single tokens of o200k's: here too, so that a forced text writes each token once.
      ["analysis", userDefined],
      ["final", userDefined],
      ["commentary", userDefined],
    ],
    bos: "<|startoftext|>",
    eos: "<|return|>",
    addBos: false,
    template: "openai-gpt-oss-120b.jinja",
  },
} satisfies Record<string, FamilyTokens>;

export type ChatFamily = keyof typeof CHAT_FAMILIES;

const templates = join(dirname(fileURLToPath(import.meta.url)), "chat-templates");

/**
 * Writes `preset` (a tiny synthetic model, random weights) with `family`'s tokenizer and chat
 * template in place of its own: byte symbols, merges learned as bloomery-synth learns them, the
 * family's special tokens, padded to the preset's vocabulary size (so that no tensor changes).
 */
export async function writeFamilyModel(path: string, family: ChatFamily, preset: string): Promise<void> {
  const spec: FamilyTokens = CHAT_FAMILIES[family];
  const plan = planSyntheticModel({ preset, weightType: "Q8_0" });
  const size = (plan.metadata["tokenizer.ggml.tokens"] as string[]).length;
  const merges = learnMerges(TRAINING_TEXT, size - 256 - spec.special.length);
  const tokens = [...new Set([...byteSymbols(), ...merges.map((m) => m.replace(" ", ""))])];
  const types: number[] = tokens.map(() => TokenType.normal);
  for (const [text, type] of spec.special) {
    tokens.push(text);
    types.push(type);
  }
  expect(tokens.length, `${family}'s vocabulary fits ${preset}'s`).toBeLessThanOrEqual(size);
  while (tokens.length < size) {
    tokens.push(`[PAD${tokens.length}]`);
    types.push(TokenType.unused);
  }
  const metadata: Record<string, GgufValue> = {};
  const metadataTypes: Record<string, GgufMetadataType> = {};
  for (const [key, value] of Object.entries(plan.metadata)) {
    if (key.startsWith("tokenizer.")) continue;
    metadata[key] = value;
    if (plan.metadataTypes[key]) metadataTypes[key] = plan.metadataTypes[key];
  }
  Object.assign(metadata, {
    "tokenizer.ggml.model": "gpt2",
    "tokenizer.ggml.pre": spec.pre,
    "tokenizer.ggml.tokens": tokens,
    "tokenizer.ggml.token_type": Int32Array.from(types),
    "tokenizer.ggml.merges": merges,
    "tokenizer.ggml.bos_token_id": tokens.indexOf(spec.bos),
    "tokenizer.ggml.eos_token_id": tokens.indexOf(spec.eos),
    "tokenizer.ggml.add_bos_token": spec.addBos,
    "tokenizer.chat_template": readFileSync(join(templates, spec.template), "utf8"),
  });
  Object.assign(metadataTypes, {
    "tokenizer.ggml.tokens": "array<string>",
    "tokenizer.ggml.token_type": "array<i32>",
    "tokenizer.ggml.merges": "array<string>",
    "tokenizer.ggml.bos_token_id": "u32",
    "tokenizer.ggml.eos_token_id": "u32",
  });
  await writeGguf(path, {
    metadata,
    metadataTypes,
    tensors: plan.tensors.map((t, index) => ({
      name: t.name,
      type: t.type,
      shape: t.shape,
      fill: tensorFiller(t.type, streamKey(plan.seed, index), t.init, {
        boundedScales: plan.preset.boundedScales ?? false,
      }),
    })),
  });
}
