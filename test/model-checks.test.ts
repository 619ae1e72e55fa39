// A model file is not trusted: every metadata value the engine indexes with is checked against the others when it
// loads, and a tensor table whose layout does not match its types is caught by the tensor's name. Each case is
// the valid fixture with one change; the two that crashed or hung the process before run in a child process.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readGgufInfo } from "../src/gguf.js";
import { loadModel } from "../src/model.js";
import { writeSyntheticModel } from "../tools/synth/synth.js";
import { expectCode, kv, rawGguf, u32, u64 } from "./gguf-helpers.js";
import {
  cloneGguf,
  cutArray,
  I32,
  parseGguf,
  serializeGguf,
  setArrayInt,
  setF32,
  setF32Array,
  setInt,
  U32,
  U64,
  type RawGguf,
} from "./gguf-mutate.js";
import { runScenario } from "./sdk-child-run.js";

const dir = mkdtempSync(join(tmpdir(), "bloomery-model-checks-"));
let moe: RawGguf; // tiny-qwen3moe, Q8_0
let qwen2: RawGguf; // tiny-qwen2, Q8_0: no key_length
let mimo: RawGguf; // tiny-mimo2, Q8_0: per-layer KV heads and windows
let glmDsa: RawGguf; // tiny-glm-dsa, Q8_0: indexers on layers 0 and 3 only
let deepseek4: RawGguf; // tiny-deepseek4, Q8_0: compress ratios 0/4/128/4, layer 0 hash-routed
let n = 0;

beforeAll(async () => {
  await writeSyntheticModel(join(dir, "moe.gguf"), { preset: "tiny-qwen3moe", weightType: "Q8_0" });
  await writeSyntheticModel(join(dir, "qwen2.gguf"), { preset: "tiny-qwen2", weightType: "Q8_0" });
  await writeSyntheticModel(join(dir, "mimo.gguf"), { preset: "tiny-mimo2", weightType: "Q8_0" });
  moe = parseGguf(readFileSync(join(dir, "moe.gguf")));
  qwen2 = parseGguf(readFileSync(join(dir, "qwen2.gguf")));
  mimo = parseGguf(readFileSync(join(dir, "mimo.gguf")));
  await writeSyntheticModel(join(dir, "glm-dsa.gguf"), { preset: "tiny-glm-dsa", weightType: "Q8_0" });
  glmDsa = parseGguf(readFileSync(join(dir, "glm-dsa.gguf")));
  await writeSyntheticModel(join(dir, "deepseek4.gguf"), { preset: "tiny-deepseek4", weightType: "Q8_0" });
  deepseek4 = parseGguf(readFileSync(join(dir, "deepseek4.gguf")));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A copy of `base` with `edit` applied, written to a file of its own. */
function variant(base: RawGguf, edit: (g: RawGguf) => void): string {
  const g = cloneGguf(base);
  edit(g);
  const path = join(dir, `variant-${n++}.gguf`);
  writeFileSync(path, serializeGguf(g));
  return path;
}

const load = (path: string) => loadModel(path, { threads: 1, contextSize: 64, cacheRam: 0 });
const tensor = (g: RawGguf, name: string) => g.tensors.find((t) => t.name === name)!;
const Q8_0 = 8;
const Q4_0 = 2;
const F16 = 1;

it("the fixtures themselves load and generate", async () => {
  // glm-dsa with layer 3 marked shared though it carries its indexer: llama.cpp loads such tensors
  // and leaves them unused, and so do we.
  const sharedWithTensors = variant(glmDsa, (g) => setArrayInt(g, "glm-dsa.attention.indexer.types", 3, 0n));
  for (const base of [moe, qwen2, mimo, glmDsa, deepseek4, parseGguf(readFileSync(sharedWithTensors))]) {
    const model = await load(variant(base, () => {}));
    expect(model.info.warnings).toEqual([]);
    expect((await model.createSession().generate("The river", { maxTokens: 3 }).result).tokens).toHaveLength(3);
    model.dispose();
  }
});

describe("DeepSeek-V4's own metadata and tables", () => {
  it("a compression ratio llama.cpp does not serve", async () => {
    await expectCode(
      load(variant(deepseek4, (g) => setArrayInt(g, "deepseek4.attention.compress_ratios", 1, 3n))),
      "UNSUPPORTED_FEATURE",
      /deepseek4\.attention\.compress_ratios holds 3/,
    );
  });

  it("hyper-connections of other than four streams", async () => {
    await expectCode(
      load(variant(deepseek4, (g) => setInt(g, "deepseek4.hyper_connection.count", U32, 2n))),
      "UNSUPPORTED_FEATURE",
      /deepseek4\.hyper_connection\.count = 2/,
    );
  });

  it("a hash-routing table naming an expert the layer does not have", async () => {
    const table = variant(deepseek4, (g) => {
      const t = tensor(g, "blk.0.ffn_gate_tid2eid.weight");
      g.data.writeInt32LE(16, Number(t.offset) + 4 * 77);
    });
    await expectCode(load(table), "MODEL_BAD_METADATA", /blk\.0\.ffn_gate_tid2eid\.weight holds 16 at 77/);
  });

  it("swiglu limits that differ between layers", async () => {
    await expectCode(
      load(variant(deepseek4, (g) => setF32Array(g, "deepseek4.swiglu_clamp_exp", [0.75, 0.5, 0.75, 0.75]))),
      "UNSUPPORTED_FEATURE",
      /deepseek4\.swiglu_clamp_exp differs between layers/,
    );
  });
});

describe("metadata checked against the rest of the file", () => {
  it("expert_used_count above expert_count (it crashed the first request)", async () => {
    await expectCode(
      load(variant(moe, (g) => setInt(g, "qwen3moe.expert_used_count", U32, 9n))),
      "MODEL_BAD_METADATA",
      /qwen3moe\.expert_used_count = 9 exceeds qwen3moe\.expert_count = 8/,
    );
    const end = await runScenario("load", [
      variant(moe, (g) => setInt(g, "qwen3moe.expert_used_count", U32, 10n ** 8n)),
    ]);
    expect(end.signal, end.stderr).toBeNull();
    expect(end.result?.outcome).toBe("MODEL_BAD_METADATA");
  });

  it("a block_count larger than the file's tensors can hold (it hung at 3 GB)", async () => {
    const end = await runScenario("load", [variant(moe, (g) => setInt(g, "qwen3moe.block_count", U32, 30_000_000n))]);
    expect(end.timedOut).toBe(false);
    expect(end.result?.outcome).toBe("MODEL_BAD_METADATA");
  });

  it("a block_count smaller than the file's layers, or a tensor the architecture does not use", async () => {
    await expectCode(
      load(variant(moe, (g) => setInt(g, "qwen3moe.block_count", U32, 2n))),
      "MODEL_UNEXPECTED_TENSOR",
      /blk\.2\..*block_count = 2/,
    );
    const extra = variant(moe, (g) => {
      const norm = tensor(g, "output_norm.weight");
      const bytes = g.data.subarray(Number(norm.offset), Number(norm.offset) + 1024);
      const at = Math.ceil(g.data.length / g.alignment) * g.alignment;
      g.data = Buffer.concat([g.data, Buffer.alloc(at - g.data.length), bytes]);
      g.tensors.push({ ...norm, dims: [...norm.dims], name: "extra.weight", offset: BigInt(at) });
    });
    await expectCode(load(extra), "MODEL_UNEXPECTED_TENSOR", /extra\.weight/);
  });

  it("counts that are negative or beyond 32 bits", async () => {
    await expectCode(
      load(variant(moe, (g) => setInt(g, "qwen3moe.context_length", U64, 2n ** 40n))),
      "MODEL_BAD_METADATA",
      /qwen3moe\.context_length = 1099511627776 is out of range/,
    );
    await expectCode(
      load(variant(moe, (g) => setInt(g, "qwen3moe.attention.head_count", I32, -8n))),
      "MODEL_BAD_METADATA",
      /qwen3moe\.attention\.head_count = -8/,
    );
  });

  it("heads that do not divide the embedding when no key_length says their width", async () => {
    const odd = variant(qwen2, (g) => {
      setInt(g, "qwen2.attention.head_count", U32, 5n);
      setInt(g, "qwen2.attention.head_count_kv", U32, 5n);
    });
    await expectCode(load(odd), "MODEL_BAD_METADATA", /qwen2\.embedding_length = 256 .*qwen2\.attention\.key_length/);
  });

  it("per-layer arrays (mimo2's KV heads and windows) of the wrong length, or a count out of range", async () => {
    // head_count_kv covers every layer of the file (the MTP one too); the window pattern the layers a pass runs.
    await expectCode(
      load(variant(mimo, (g) => cutArray(g, "mimo2.attention.head_count_kv", 4))),
      "MODEL_BAD_METADATA",
      /mimo2\.attention\.head_count_kv has 4 entries, expected 5/,
    );
    await expectCode(
      load(variant(mimo, (g) => cutArray(g, "mimo2.attention.sliding_window_pattern", 3))),
      "MODEL_BAD_METADATA",
      /mimo2\.attention\.sliding_window_pattern has 3 entries, expected 4/,
    );
    await expectCode(
      load(variant(mimo, (g) => setArrayInt(g, "mimo2.attention.head_count_kv", 1, 0n))),
      "MODEL_BAD_METADATA",
      /mimo2\.attention\.head_count_kv holds 0/,
    );
    await expectCode(
      load(variant(mimo, (g) => setArrayInt(g, "mimo2.attention.head_count_kv", 1, 3n))),
      "MODEL_BAD_METADATA",
      /head_count = 4 is not a multiple of mimo2\.attention\.head_count_kv = 3/,
    );
  });

  it("glm-dsa's indexer types (one 0 or 1 per layer, the first 1, each 1 with its tensors) and the indexer's width", async () => {
    const types = "glm-dsa.attention.indexer.types";
    await expectCode(
      load(variant(glmDsa, (g) => cutArray(g, types, 4))),
      "MODEL_BAD_METADATA",
      /indexer\.types must hold one 0 or 1 per layer \(5\)/,
    );
    await expectCode(
      load(variant(glmDsa, (g) => setArrayInt(g, types, 1, 2n))),
      "MODEL_BAD_METADATA",
      /indexer\.types holds 2, not 0 or 1/,
    );
    await expectCode(
      load(variant(glmDsa, (g) => setArrayInt(g, types, 0, 0n))),
      "MODEL_BAD_METADATA",
      /the first layer has no indexer of its own/,
    );
    await expectCode(
      load(variant(glmDsa, (g) => setArrayInt(g, types, 1, 1n))),
      "MODEL_MISSING_TENSOR",
      /blk\.1\.indexer\./,
    );
    await expectCode(
      load(variant(glmDsa, (g) => setInt(g, "glm-dsa.attention.indexer.key_length", U32, 48n))),
      "UNSUPPORTED_FEATURE",
      /indexer\.key_length = 48: the indexer's Hadamard rotation needs a power of two/,
    );
  });

  it("an epsilon, RoPE base or RoPE scale that is not a positive number", async () => {
    for (const [key, value] of [
      ["qwen3moe.attention.layer_norm_rms_epsilon", 0],
      ["qwen3moe.attention.layer_norm_rms_epsilon", NaN],
      ["qwen3moe.rope.freq_base", -1],
      ["qwen3moe.rope.scale_linear", 0],
    ] as const) {
      await expectCode(load(variant(moe, (g) => setF32(g, key, value))), "MODEL_BAD_METADATA", new RegExp(key));
    }
  });

  it("a vocabulary whose size differs from the embedding's rows", async () => {
    const short = variant(moe, (g) => {
      cutArray(g, "tokenizer.ggml.tokens", 392);
      cutArray(g, "tokenizer.ggml.token_type", 392);
    });
    await expectCode(load(short), "MODEL_BAD_METADATA", /tokenizer\.ggml\.tokens has 392 entries.*393 rows/);
  });

  it("special token ids outside the vocabulary", async () => {
    await expectCode(
      load(variant(moe, (g) => setInt(g, "tokenizer.ggml.bos_token_id", U32, 393n))),
      "MODEL_BAD_METADATA",
      /tokenizer\.ggml\.bos_token_id = 393/,
    );
    await expectCode(
      load(variant(moe, (g) => setInt(g, "tokenizer.ggml.eos_token_id", I32, -1n))),
      "MODEL_BAD_METADATA",
      /tokenizer\.ggml\.eos_token_id = -1/,
    );
    await expectCode(
      load(variant(moe, (g) => setInt(g, "tokenizer.ggml.eot_token_id", U32, 2n ** 31n - 1n))),
      "TOKENIZER_BAD_VOCAB",
      /tokenizer\.ggml\.eot_token_id = 2147483647/,
    );
  });

  it("token types outside 0-6 and scores that are not finite", async () => {
    await expectCode(
      load(variant(moe, (g) => setArrayInt(g, "tokenizer.ggml.token_type", 5, 7n))),
      "TOKENIZER_BAD_VOCAB",
      /tokenizer\.ggml\.token_type\[5\] = 7/,
    );
    const scores = Array.from({ length: 393 }, (_, i) => (i === 9 ? NaN : -i));
    await expectCode(
      load(variant(moe, (g) => setF32Array(g, "tokenizer.ggml.scores", scores))),
      "TOKENIZER_BAD_VOCAB",
      /tokenizer\.ggml\.scores\[9\]/,
    );
  });
});

describe("tensor tables", () => {
  it("a type changed to a smaller one leaves unused bytes: refused by the tensor's name", async () => {
    const path = variant(moe, (g) => (tensor(g, "blk.0.attn_q.weight").type = Q4_0));
    await expectCode(readGgufInfo(path), "GGUF_TENSOR_LAYOUT", /blk\.0\.attn_q\.weight.*unused bytes/);
    await expectCode(load(path), "GGUF_TENSOR_LAYOUT", /blk\.0\.attn_q\.weight/);
  });

  it("a type changed to a larger one, or an offset moved onto another tensor: overlapping data", async () => {
    const larger = variant(moe, (g) => (tensor(g, "blk.0.attn_k.weight").type = F16));
    await expectCode(
      load(larger),
      "GGUF_TENSOR_OVERLAP",
      /blk\.0\.attn_k\.weight.*overlaps tensor "blk\.0\.attn_v\.weight"/,
    );
    const moved = variant(
      moe,
      (g) => (tensor(g, "blk.1.attn_v.weight").offset = tensor(g, "blk.1.attn_k.weight").offset),
    );
    await expectCode(readGgufInfo(moved), "GGUF_TENSOR_OVERLAP", /blk\.1\.attn_[kv]\.weight/);
  });

  it("unused bytes after the last tensor load, with a warning naming it", async () => {
    const path = variant(moe, (g) => {
      const last = g.tensors.at(-1)!;
      expect(last.type).toBe(Q8_0);
      last.type = Q4_0;
    });
    const info = await readGgufInfo(path);
    expect(info.warnings).toEqual([expect.objectContaining({ code: "GGUF_TENSOR_LAYOUT", tensor: "output.weight" })]);
    const model = await load(path);
    expect(model.info.warnings).toEqual([
      { code: "GGUF_TENSOR_LAYOUT", message: expect.stringMatching(/"output\.weight".*unused bytes at the end/) },
    ]);
    model.dispose();
  });
});

describe("a header made of entries alone", () => {
  // Each parsed entry costs several times its bytes in the file (and a JavaScript value in readGgufInfo): their
  // number is bounded, far above any model's, so a small file cannot grow the process without bound.
  const read = (parts: Parameters<typeof rawGguf>[0]) => {
    const path = join(dir, `header-${n++}.gguf`);
    writeFileSync(path, rawGguf(parts));
    return readGgufInfo(path);
  };
  const array = (element: number, count: number, items: Buffer) => Buffer.concat([u32(element), u64(count), items]);

  it("refuses more than 2^22 strings in its arrays, 2^20 nested arrays, 2^16 keys or 2^20 tensors", async () => {
    const strings = kv("many", 9, array(8, 2 ** 22 + 1, Buffer.alloc(8 * (2 ** 22 + 1))));
    await expectCode(read({ kvs: [strings] }), "GGUF_TOO_LARGE", /"many".*strings/);
    const nested = kv("nested", 9, array(9, 2 ** 20 + 1, Buffer.alloc(12 * (2 ** 20 + 1))));
    await expectCode(read({ kvs: [nested] }), "GGUF_TOO_LARGE", /"nested".*nested arrays/);
    const keys = Array.from({ length: 2 ** 16 + 1 }, (_, i) => kv(`k${i}`, 0, Buffer.from([0])));
    await expectCode(read({ kvs: keys }), "GGUF_TOO_LARGE", /65537 metadata keys/);
    await expectCode(read({ tensorCount: 2 ** 20 + 1, data: Buffer.alloc(36 * (2 ** 20 + 1)) }), "GGUF_TOO_LARGE");
  });
});
