/**
 * Small byte-level BPE vocabularies (GPT-2 style) with the special tokens and chat template
 * of a model family, as GGUF tokenizer metadata that llama.cpp accepts.
 *
 * Layout: ids 0-255 are the 256 byte symbols (GPT-2's byte-to-unicode mapping, in byte
 * order), then the tokens of the merges learned from {@link TRAINING_TEXT}, then the family's
 * special tokens, then (when a size is asked for) `[PAD<id>]` tokens of type "unused", as
 * llama.cpp's converter pads real vocabularies (or, asked, `tok<id>` tokens that write text).
 * @module
 */
import { BloomeryError } from "../../src/errors.js";
import type { GgufMetadataType, GgufValue } from "../../src/gguf/types.js";

/** GGUF token types (`tokenizer.ggml.token_type`). */
export const TokenType = { normal: 1, unknown: 2, control: 3, userDefined: 4, unused: 5, byte: 6 } as const;

/** A tokenizer family: its pre-tokenizer, special tokens and chat template. */
export type VocabFamily = "qwen" | "qwen-coder" | "llama" | "deepseek" | "glm";

/** A built vocabulary. */
export interface SyntheticVocab {
  family: VocabFamily;
  tokens: string[];
  tokenTypes: Int32Array;
  /** Merges in rank order, each "left right" in byte-level symbols. */
  merges: string[];
  /** Id of each special token by its text. */
  special: Record<string, number>;
  bos: number;
  eos: number;
  addBos: boolean;
  chatTemplate: string;
}

/** Options of buildVocab(). */
export interface VocabOptions {
  /** At most this many merges are learned (fewer if the training text runs out of repeated pairs). Default 256. */
  merges?: number;
  /** Pad the vocabulary with unused tokens to exactly this size. */
  size?: number;
  /** Pad with normal tokens spelled `tok<id>` instead, so that every token a model draws writes text. */
  padWithText?: boolean;
}

/** The text the merges are learned from: English prose and a little code, written for this tool. */
export const TRAINING_TEXT = `The quick brown fox jumps over the lazy dog. A mixture of experts model sends each token
to a few of its experts, and the router learns which ones. When the model is larger than the
memory of the graphics card, the experts that are called most often stay on the card, and the
others wait in host memory or on the disk until they are needed. This is the reason the engine
counts how often every expert is chosen, and moves the hottest ones closer to the compute.
There are many ways to store the weights: in blocks of thirty two or two hundred and fifty six
values, each with its own scale, so that the numbers take four or five or six bits instead of
sixteen. Reading fewer bytes per token is what makes the generation faster on the same machine.
function generate(prompt, options) { const tokens = tokenize(prompt); return decode(tokens); }
for (let index = 0; index < length; index++) { total += weights[index] * inputs[index]; }
def forward(self, hidden_states): return self.output(self.norm(hidden_states))
Hello, world! How are you today? I am fine, thank you, and the weather is nice here.`;

const QWEN_TEMPLATE = `{%- for message in messages -%}
{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\\n' -}}
{%- endif -%}`;

const LLAMA_TEMPLATE = `{{- bos_token -}}
{%- for message in messages -%}
{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
{%- endif -%}`;

// DeepSeek-V3's turns (its BOS first, no system turn markers beyond the text).
const DEEPSEEK_TEMPLATE = `{{- bos_token -}}
{%- for message in messages -%}
{%- if message['role'] == 'user' -%}{{- '<｜User｜>' + message['content'] -}}
{%- elif message['role'] == 'assistant' -%}{{- '<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>' -}}
{%- else -%}{{- message['content'] -}}{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<｜Assistant｜>' -}}{%- endif -%}`;

// GLM-4.5's and GLM-5's turns after [gMASK]<sop>.
const GLM_TEMPLATE = `[gMASK]<sop>
{%- for message in messages -%}
{{- '<|' + message['role'] + '|>\n' + message['content'] -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|assistant|>' -}}{%- endif -%}`;

interface FamilySpec {
  pre: string;
  /** Special tokens in id order, with their GGUF token type. */
  special: [string, number][];
  bos: string;
  eos: string;
  pad?: string;
  addBos: boolean;
  chatTemplate: string;
  /** Fill-in-the-middle tokens, written as `tokenizer.ggml.fim_<role>_token_id`. */
  fim?: Record<"pre" | "suf" | "mid" | "pad" | "rep" | "sep", string>;
}

const QWEN_SPECIAL: [string, number][] = [
  ["<|endoftext|>", TokenType.control],
  ["<|im_start|>", TokenType.control],
  ["<|im_end|>", TokenType.control],
  // Qwen3 keeps these as ordinary added tokens, not control ones: they appear in the output text.
  ["<tool_call>", TokenType.userDefined],
  ["</tool_call>", TokenType.userDefined],
  ["<think>", TokenType.userDefined],
  ["</think>", TokenType.userDefined],
];

const FAMILIES: Record<VocabFamily, FamilySpec> = {
  qwen: {
    pre: "qwen2",
    special: QWEN_SPECIAL,
    bos: "<|endoftext|>",
    eos: "<|im_end|>",
    pad: "<|endoftext|>",
    addBos: false,
    chatTemplate: QWEN_TEMPLATE,
  },
  // Qwen2.5-Coder's: Qwen's tokens and its fill-in-the-middle ones, for llama-server's /infill.
  "qwen-coder": {
    pre: "qwen2",
    special: [
      ...QWEN_SPECIAL,
      ["<|fim_prefix|>", TokenType.control],
      ["<|fim_middle|>", TokenType.control],
      ["<|fim_suffix|>", TokenType.control],
      ["<|fim_pad|>", TokenType.control],
      ["<|repo_name|>", TokenType.control],
      ["<|file_sep|>", TokenType.control],
    ],
    bos: "<|endoftext|>",
    eos: "<|im_end|>",
    pad: "<|endoftext|>",
    addBos: false,
    chatTemplate: QWEN_TEMPLATE,
    fim: {
      pre: "<|fim_prefix|>",
      suf: "<|fim_suffix|>",
      mid: "<|fim_middle|>",
      pad: "<|fim_pad|>",
      rep: "<|repo_name|>",
      sep: "<|file_sep|>",
    },
  },
  llama: {
    pre: "llama-bpe",
    special: [
      ["<|begin_of_text|>", TokenType.control],
      ["<|end_of_text|>", TokenType.control],
      ["<|start_header_id|>", TokenType.control],
      ["<|end_header_id|>", TokenType.control],
      ["<|eot_id|>", TokenType.control],
      ["<|eom_id|>", TokenType.control],
      ["<|python_tag|>", TokenType.control],
    ],
    bos: "<|begin_of_text|>",
    eos: "<|eot_id|>",
    addBos: true,
    chatTemplate: LLAMA_TEMPLATE,
  },
  // DeepSeek-V3's and V3.2's (pre-tokenizer deepseek-v3).
  deepseek: {
    pre: "deepseek-v3",
    special: [
      ["<｜begin▁of▁sentence｜>", TokenType.control],
      ["<｜end▁of▁sentence｜>", TokenType.control],
      ["<｜User｜>", TokenType.userDefined],
      ["<｜Assistant｜>", TokenType.userDefined],
      ["<think>", TokenType.userDefined],
      ["</think>", TokenType.userDefined],
    ],
    bos: "<｜begin▁of▁sentence｜>",
    eos: "<｜end▁of▁sentence｜>",
    addBos: true,
    chatTemplate: DEEPSEEK_TEMPLATE,
  },
  // GLM-4.5's and GLM-5's (pre-tokenizer glm4, which llama.cpp gives no BOS).
  glm: {
    pre: "glm4",
    special: [
      ["<|endoftext|>", TokenType.control],
      ["[gMASK]", TokenType.control],
      ["<sop>", TokenType.control],
      ["<|system|>", TokenType.control],
      ["<|user|>", TokenType.control],
      ["<|assistant|>", TokenType.control],
      ["<think>", TokenType.userDefined],
      ["</think>", TokenType.userDefined],
    ],
    bos: "[gMASK]",
    eos: "<|endoftext|>",
    addBos: false,
    chatTemplate: GLM_TEMPLATE,
  },
};

let byteSymbolTable: string[] | undefined;

/**
 * GPT-2's byte-to-unicode mapping: symbol `i` stands for byte `i`. Printable Latin-1 bytes map
 * to themselves; the others (controls, space, 0x7f-0xa0, 0xad) take code points from 256 up, in
 * byte order, so every byte is one visible character (space is "Ġ", newline "Ċ").
 */
export function byteSymbols(): readonly string[] {
  if (byteSymbolTable) return byteSymbolTable;
  const printable = (b: number) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  const table: string[] = [];
  let next = 256;
  for (let b = 0; b < 256; b++) table.push(String.fromCodePoint(printable(b) ? b : next++));
  byteSymbolTable = table;
  return table;
}

/** The byte-level symbols of a piece of text (its UTF-8 bytes, each as its symbol). */
export function toByteSymbols(text: string): string[] {
  const symbols = byteSymbols();
  return Array.from(new TextEncoder().encode(text), (b) => symbols[b]!);
}

/**
 * Learns up to `count` merges from `text`: words are letter runs with an optional leading
 * space; the most frequent adjacent pair is merged each round (ties: the smaller "left right"
 * string), until no pair occurs twice.
 */
export function learnMerges(text: string, count: number): string[] {
  const wordCounts = new Map<string, number>();
  for (const word of text.match(/ ?[A-Za-z]+/g) ?? []) wordCounts.set(word, (wordCounts.get(word) ?? 0) + 1);
  const words = [...wordCounts].map(([word, n]) => ({ parts: toByteSymbols(word), n }));
  const merges: string[] = [];
  while (merges.length < count) {
    const pairs = new Map<string, number>();
    for (const { parts, n } of words) {
      for (let i = 0; i + 1 < parts.length; i++) {
        const pair = `${parts[i]} ${parts[i + 1]}`;
        pairs.set(pair, (pairs.get(pair) ?? 0) + n);
      }
    }
    let best: string | undefined;
    let bestCount = 1;
    for (const [pair, n] of pairs) {
      if (n > bestCount || (n === bestCount && best !== undefined && pair < best)) [best, bestCount] = [pair, n];
    }
    if (best === undefined) break;
    merges.push(best);
    const [left, right] = best.split(" ") as [string, string];
    for (const word of words) {
      const merged: string[] = [];
      for (let i = 0; i < word.parts.length; i++) {
        if (i + 1 < word.parts.length && word.parts[i] === left && word.parts[i + 1] === right) {
          merged.push(left + right);
          i++;
        } else {
          merged.push(word.parts[i]!);
        }
      }
      word.parts = merged;
    }
  }
  return merges;
}

/** Builds the vocabulary of a family: byte symbols, learned merges, special tokens, padding. */
export function buildVocab(family: VocabFamily, options: VocabOptions = {}): SyntheticVocab {
  const spec = FAMILIES[family];
  const merges = learnMerges(TRAINING_TEXT, options.merges ?? 256);
  // Two merges can spell the same token ("a bc", "ab c"); llama.cpp requires each token text once.
  const tokens = [...new Set([...byteSymbols(), ...merges.map((m) => m.replace(" ", ""))])];
  const types = tokens.map(() => TokenType.normal as number);
  const special: Record<string, number> = {};
  for (const [text, type] of spec.special) {
    special[text] = tokens.length;
    tokens.push(text);
    types.push(type);
  }
  if (options.size !== undefined) {
    if (options.size < tokens.length) {
      throw new BloomeryError("INVALID_ARGUMENT", `vocabulary size ${options.size} < ${tokens.length} tokens`, {
        size: options.size,
        tokens: tokens.length,
      });
    }
    while (tokens.length < options.size) {
      tokens.push(options.padWithText ? `tok${tokens.length}` : `[PAD${tokens.length}]`);
      types.push(options.padWithText ? TokenType.normal : TokenType.unused);
    }
  }
  return {
    family,
    tokens,
    tokenTypes: Int32Array.from(types),
    merges,
    special,
    bos: special[spec.bos]!,
    eos: special[spec.eos]!,
    addBos: spec.addBos,
    chatTemplate: spec.chatTemplate,
  };
}

/** The `tokenizer.*` GGUF metadata of a vocabulary, with each value's type. */
export function vocabMetadata(vocab: SyntheticVocab): {
  metadata: Record<string, GgufValue>;
  types: Record<string, GgufMetadataType>;
} {
  const spec = FAMILIES[vocab.family];
  const metadata: Record<string, GgufValue> = {
    "tokenizer.ggml.model": "gpt2",
    "tokenizer.ggml.pre": spec.pre,
    "tokenizer.ggml.tokens": vocab.tokens,
    "tokenizer.ggml.token_type": vocab.tokenTypes,
    "tokenizer.ggml.merges": vocab.merges,
    "tokenizer.ggml.bos_token_id": vocab.bos,
    "tokenizer.ggml.eos_token_id": vocab.eos,
  };
  const types: Record<string, GgufMetadataType> = {
    "tokenizer.ggml.model": "string",
    "tokenizer.ggml.pre": "string",
    "tokenizer.ggml.tokens": "array<string>",
    "tokenizer.ggml.token_type": "array<i32>",
    "tokenizer.ggml.merges": "array<string>",
    "tokenizer.ggml.bos_token_id": "u32",
    "tokenizer.ggml.eos_token_id": "u32",
  };
  if (spec.pad !== undefined) {
    metadata["tokenizer.ggml.padding_token_id"] = vocab.special[spec.pad]!;
    types["tokenizer.ggml.padding_token_id"] = "u32";
  }
  for (const [role, text] of Object.entries(spec.fim ?? {})) {
    metadata[`tokenizer.ggml.fim_${role}_token_id`] = vocab.special[text]!;
    types[`tokenizer.ggml.fim_${role}_token_id`] = "u32";
  }
  metadata["tokenizer.ggml.add_bos_token"] = vocab.addBos;
  types["tokenizer.ggml.add_bos_token"] = "bool";
  metadata["tokenizer.chat_template"] = vocab.chatTemplate;
  types["tokenizer.chat_template"] = "string";
  return { metadata, types };
}
