import { mkdtempSync, openSync, readSync, closeSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { BloomeryError, ggmlType, modelFootprint, readGgufInfo, type GgufInfo } from "../src/index.js";
import {
  BLOCK_D,
  BLOCK_DMIN,
  FILLABLE_TYPES,
  MXFP4_E,
  blockScale,
  syntheticBlockD,
  f16ToF32,
  f32ToF16,
  tensorFiller,
} from "../tools/synth/blocks.js";
import { PRESETS } from "../tools/synth/presets.js";
import { planSyntheticModel, routerScales, writeSyntheticModel } from "../tools/synth/synth.js";
import { buildVocab, byteSymbols, TokenType } from "../tools/synth/vocab.js";

const dir = mkdtempSync(join(tmpdir(), "bloomery-synth-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const TINY = ["tiny-qwen3moe", "tiny-qwen3", "tiny-qwen2", "tiny-llama"];
const ALIGNMENT = 32;
const alignUp = (n: number) => Math.ceil(n / ALIGNMENT) * ALIGNMENT;

/** Bytes [offset, offset + length) of a file. */
function readBytes(path: string, offset: number, length: number): Uint8Array {
  const fd = openSync(path, "r");
  try {
    const out = new Uint8Array(length);
    readSync(fd, out, 0, length, offset);
    return out;
  } finally {
    closeSync(fd);
  }
}

/** A deterministic spread of block indices over a tensor: first, last and some in between. */
function sampleBlocks(blocks: number): number[] {
  return [...new Set([0, 1, blocks >> 2, blocks >> 1, blocks - 2, blocks - 1].filter((b) => b >= 0 && b < blocks))];
}

/** The file holds exactly the header and every tensor, each at the next aligned offset. */
function expectTightLayout(info: GgufInfo): void {
  const file = info.files[0]!;
  let offset = file.dataOffset;
  for (const t of info.tensors) {
    expect(t.offset, t.name).toBe(offset);
    offset += alignUp(t.bytes);
  }
  expect(file.bytes).toBe(offset);
  expect(statSync(info.path).size).toBe(offset);
}

describe("tiny presets", () => {
  for (const preset of TINY) {
    for (const type of FILLABLE_TYPES) {
      it(`${preset} ${type} writes and reads back`, async () => {
        const path = join(dir, `${preset}-${type}.gguf`);
        const plan = await writeSyntheticModel(path, { preset, weightType: type, seed: 3 });
        const info = await readGgufInfo(path);
        const p = PRESETS[preset]!;

        expect(info.tensors.map((t) => [t.name, t.type, t.shape])).toEqual(
          plan.tensors.map((t) => [t.name, t.type, t.shape]),
        );
        expect(info.summary.architecture).toBe(p.architecture);
        expect(info.summary.layers).toBe(p.layers);
        expect(info.summary.experts).toBe(p.experts);
        expect(info.summary.expertsUsed).toBe(p.expertsUsed);
        expect(info.summary.embeddingLength).toBe(256);
        expect(info.summary.tensorBytes).toBe(plan.tensorBytes);
        expect(info.metadata["tokenizer.ggml.tokens"]).toEqual(plan.vocab.tokens);
        expect(info.metadataTypes["tokenizer.ggml.token_type"]).toBe("array<i32>");
        expect(info.metadataTypes[`${p.architecture}.rope.freq_base`]).toBe("f32");
        expect(info.metadata["tokenizer.ggml.eos_token_id"]).toBe(plan.vocab.eos);
        expectTightLayout(info);

        // Weights take the type; norms, biases and the router stay F32.
        const isWeight = (name: string) =>
          !name.includes("norm") && !name.includes("ffn_gate_inp") && !name.endsWith(".bias");
        for (const t of info.tensors) expect(t.type, t.name).toBe(isWeight(t.name) ? type : "F32");
        expect(info.tensors.find((t) => t.name === "token_embd.weight")!.shape).toEqual([
          256,
          plan.vocab.tokens.length,
        ]);

        // Every sampled block of every weight carries the fixed scales; float weights stay within ±0.05.
        const t = ggmlType(type);
        for (const tensor of info.tensors.filter((x) => isWeight(x.name))) {
          for (const block of sampleBlocks(tensor.bytes / t.blockBytes)) {
            const bytes = readBytes(path, tensor.offset + block * t.blockBytes, t.blockBytes);
            const view = new DataView(bytes.buffer);
            if (type === "MXFP4") {
              expect(bytes[0]).toBe(MXFP4_E);
            } else if (type === "F32") {
              expect(Math.abs(view.getFloat32(0, true))).toBeLessThanOrEqual(0.05);
            } else if (type === "F16") {
              expect(Math.abs(f16ToF32(view.getUint16(0, true)))).toBeLessThanOrEqual(0.0501);
            } else if (type === "BF16") {
              expect(
                Math.abs(new Float32Array(new Uint32Array([view.getUint16(0, true) << 16]).buffer)[0]!),
              ).toBeLessThan(0.0502);
            } else {
              expect(blockScale(type, bytes), `${tensor.name} block ${block}`).toBe(
                f16ToF32(f32ToF16(syntheticBlockD(type))),
              );
            }
          }
        }
      });
    }
  }

  it("K-quant mins are the fixed dmin", async () => {
    const path = join(dir, "dmin.gguf");
    await writeSyntheticModel(path, { preset: "tiny-qwen3moe", weightType: "Q4_K" });
    const info = await readGgufInfo(path);
    const tensor = info.tensors.find((t) => t.name === "blk.2.ffn_down_exps.weight")!;
    const block = readBytes(path, tensor.offset + 144 * 17, 144);
    expect(f16ToF32(new DataView(block.buffer).getUint16(2, true))).toBe(f16ToF32(f32ToF16(BLOCK_DMIN)));
  });

  it("the same seed writes the same bytes, another seed others", async () => {
    const a = join(dir, "seed-a.gguf");
    const b = join(dir, "seed-b.gguf");
    const c = join(dir, "seed-c.gguf");
    await writeSyntheticModel(a, { preset: "tiny-llama", weightType: "Q4_0", seed: 9 });
    await writeSyntheticModel(b, { preset: "tiny-llama", weightType: "Q4_0", seed: 9 });
    await writeSyntheticModel(c, { preset: "tiny-llama", weightType: "Q4_0", seed: 10 });
    const size = statSync(a).size;
    expect(Buffer.compare(readBytes(a, 0, size), readBytes(b, 0, size))).toBe(0);
    expect(Buffer.compare(readBytes(a, 0, size), readBytes(c, 0, size))).not.toBe(0);
  });

  it("the header of a tiny preset describes the model llama.cpp expects", () => {
    const moe = planSyntheticModel({ preset: "tiny-qwen3moe" });
    expect(moe.weightType).toBe("Q8_0");
    expect(moe.metadata["qwen3moe.expert_feed_forward_length"]).toBe(256);
    expect(moe.metadata["qwen3moe.attention.key_length"]).toBe(64);
    expect(moe.tensors.find((t) => t.name === "blk.0.attn_q.weight")!.shape).toEqual([256, 512]);
    expect(moe.tensors.find((t) => t.name === "blk.0.attn_output.weight")!.shape).toEqual([512, 256]);
    expect(moe.tensors.find((t) => t.name === "blk.0.ffn_down_exps.weight")!.shape).toEqual([256, 256, 8]);
    const llama = planSyntheticModel({ preset: "tiny-llama" });
    expect(llama.metadata["llama.rope.dimension_count"]).toBe(64);
    expect(llama.metadata["tokenizer.ggml.pre"]).toBe("llama-bpe");
    expect(llama.metadata["tokenizer.ggml.add_bos_token"]).toBe(true);
    expect(llama.tensors.some((t) => t.name.includes("q_norm"))).toBe(false);
    const qwen3 = planSyntheticModel({ preset: "tiny-qwen3" });
    expect(qwen3.tensors.find((t) => t.name === "blk.1.attn_k_norm.weight")!.shape).toEqual([128]);
    expect(qwen3.tensors.find((t) => t.name === "blk.1.ffn_down.weight")!.shape).toEqual([768, 256]);
    const qwen2 = planSyntheticModel({ preset: "tiny-qwen2" });
    expect(qwen2.metadata["tokenizer.ggml.pre"]).toBe("qwen2");
    expect(qwen2.metadata["qwen2.attention.key_length"]).toBeUndefined();
    expect(qwen2.tensors.some((t) => t.name === "output.weight")).toBe(false);
    expect(qwen2.tensors.some((t) => t.name.includes("q_norm"))).toBe(false);
    expect(qwen2.tensors.find((t) => t.name === "blk.1.attn_q.bias")).toMatchObject({ type: "F32", shape: [256] });
    expect(qwen2.tensors.find((t) => t.name === "blk.1.attn_k.bias")).toMatchObject({ type: "F32", shape: [128] });
    expect(qwen2.tensors.find((t) => t.name === "blk.1.attn_v.bias")).toMatchObject({ type: "F32", shape: [128] });
  });
});

describe("qwen3-30b-a3b", () => {
  const plan = planSyntheticModel({ preset: "qwen3-30b-a3b" });
  const tensor = (name: string) => plan.tensors.find((t) => t.name === name)!;

  it("has the shapes and types of docs BASELINES.md", () => {
    expect(plan.tensors).toHaveLength(3 + 48 * 12);
    const expected: [string, string, number[]][] = [
      ["token_embd.weight", "Q4_K", [2048, 151_936]],
      ["output.weight", "Q6_K", [2048, 151_936]],
      ["output_norm.weight", "F32", [2048]],
      ["blk.47.attn_q.weight", "Q4_K", [2048, 4096]],
      ["blk.47.attn_k.weight", "Q4_K", [2048, 512]],
      ["blk.47.attn_v.weight", "Q6_K", [2048, 512]],
      ["blk.47.attn_output.weight", "Q4_K", [4096, 2048]],
      ["blk.47.attn_q_norm.weight", "F32", [128]],
      ["blk.47.attn_k_norm.weight", "F32", [128]],
      ["blk.47.attn_norm.weight", "F32", [2048]],
      ["blk.47.ffn_norm.weight", "F32", [2048]],
      ["blk.47.ffn_gate_inp.weight", "F32", [2048, 128]],
      ["blk.47.ffn_gate_exps.weight", "Q4_K", [2048, 768, 128]],
      ["blk.47.ffn_up_exps.weight", "Q4_K", [2048, 768, 128]],
      ["blk.47.ffn_down_exps.weight", "Q6_K", [768, 2048, 128]],
    ];
    for (const [name, type, shape] of expected)
      expect([tensor(name).type, tensor(name).shape], name).toEqual([type, shape]);
    expect(plan.vocab.tokens).toHaveLength(151_936);
    expect(plan.metadata).toMatchObject({
      "general.architecture": "qwen3moe",
      "qwen3moe.block_count": 48,
      "qwen3moe.embedding_length": 2048,
      "qwen3moe.attention.head_count": 32,
      "qwen3moe.attention.head_count_kv": 4,
      "qwen3moe.attention.key_length": 128,
      "qwen3moe.attention.value_length": 128,
      "qwen3moe.expert_count": 128,
      "qwen3moe.expert_used_count": 8,
      "qwen3moe.expert_feed_forward_length": 768,
      "qwen3moe.rope.freq_base": 1e6,
      "qwen3moe.attention.layer_norm_rms_epsilon": 1e-6,
      "qwen3moe.context_length": 40_960,
      "tokenizer.ggml.pre": "qwen2",
    });
  });

  it("moves the bytes per token that BASELINES.md states", () => {
    const perLayer = (suffix: string) => tensor(`blk.0.${suffix}.weight`).bytes;
    const experts = ((perLayer("ffn_gate_exps") + perLayer("ffn_up_exps") + perLayer("ffn_down_exps")) / 128) * 8 * 48;
    const attention = (perLayer("attn_q") + perLayer("attn_k") + perLayer("attn_v") + perLayer("attn_output")) * 48;
    // BASELINES.md rounds to 10 MB.
    const near = (bytes: number, gb: number) => expect(Math.abs(bytes / 1e9 - gb)).toBeLessThan(0.01);
    near(experts, 1.18);
    near(attention, 0.52);
    near(perLayer("ffn_gate_inp") * 48, 0.05);
    near(tensor("output.weight").bytes, 0.26);
  });

  it("writes a header-only file of the full size that reads back", async () => {
    const path = join(dir, "qwen3-30b-a3b-header.gguf");
    await writeSyntheticModel(path, { preset: "qwen3-30b-a3b", headerOnly: true });
    const info = await readGgufInfo(path);
    expect(info.summary).toMatchObject({ architecture: "qwen3moe", layers: 48, experts: 128, expertsUsed: 8 });
    expect(info.metadata["tokenizer.ggml.tokens"]).toHaveLength(151_936);
    // token_embd 175,030,272 + output 255,252,480 + output_norm 8,192 + 48 layers of 403,596,288 bytes.
    expect(info.summary.tensorBytes).toBe(19_802_912_768);
    expect(info.summary.tensorBytes).toBe(plan.tensorBytes);
    expectTightLayout(info);
    expect(info.files[0]!.bytes).toBeGreaterThan(19.8e9);
    expect(info.files[0]!.bytes).toBeLessThan(19.81e9);
  });

  it("refuses a weight type, as its mix is fixed", () => {
    expect(() => planSyntheticModel({ preset: "qwen3-30b-a3b", weightType: "Q8_0" })).toThrow(BloomeryError);
  });
});

// GLM-5's config (zai-org/GLM-5 and 5.1: glm_moe_dsa), layer for layer: the slice's shapes are the real
// file's, so its per-layer figures scale to the 78 layers (tools/synth/README.md).
describe("glm-5-slice", () => {
  const plan = planSyntheticModel({ preset: "glm-5-slice" });
  const tensor = (name: string) => plan.tensors.find((t) => t.name === name)!;
  const layerBytes = (l: number) =>
    plan.tensors.filter((t) => t.name.startsWith(`blk.${l}.`)).reduce((sum, t) => sum + t.bytes, 0);

  it("has GLM-5's hyperparameters and tensor shapes", () => {
    expect(plan.metadata).toMatchObject({
      "general.architecture": "glm-dsa",
      "glm-dsa.block_count": 10,
      "glm-dsa.embedding_length": 6144,
      "glm-dsa.feed_forward_length": 12_288,
      "glm-dsa.attention.head_count": 64,
      "glm-dsa.attention.q_lora_rank": 2048,
      "glm-dsa.attention.kv_lora_rank": 512,
      "glm-dsa.attention.indexer.head_count": 32,
      "glm-dsa.attention.indexer.key_length": 128,
      "glm-dsa.attention.indexer.top_k": 2048,
      "glm-dsa.expert_count": 256,
      "glm-dsa.expert_used_count": 8,
      "glm-dsa.expert_feed_forward_length": 2048,
      "glm-dsa.leading_dense_block_count": 3,
      "glm-dsa.expert_weights_scale": 2.5,
      "glm-dsa.rope.dimension_count": 64,
      "glm-dsa.rope.freq_base": 1e6,
      "glm-dsa.context_length": 202_752,
    });
    // Every layer has its indexer, as llama.cpp reads GLM-5's files (no indexer.types).
    expect(plan.metadata["glm-dsa.attention.indexer.types"]).toBeUndefined();
    expect(plan.vocab.tokens).toHaveLength(154_880);
    const shapes: [string, number[]][] = [
      ["blk.0.ffn_gate.weight", [6144, 12_288]],
      ["blk.3.attn_q_a.weight", [6144, 2048]],
      ["blk.3.attn_q_b.weight", [2048, 64 * 256]],
      ["blk.3.attn_kv_a_mqa.weight", [6144, 512 + 64]],
      ["blk.3.attn_k_b.weight", [192, 512, 64]],
      ["blk.3.attn_v_b.weight", [512, 256, 64]],
      ["blk.3.attn_output.weight", [64 * 256, 6144]],
      ["blk.9.indexer.attn_q_b.weight", [2048, 32 * 128]],
      ["blk.9.indexer.attn_k.weight", [6144, 128]],
      ["blk.9.indexer.proj.weight", [6144, 32]],
      ["blk.3.ffn_gate_exps.weight", [6144, 2048, 256]],
      ["blk.3.ffn_down_exps.weight", [2048, 6144, 256]],
      ["blk.3.ffn_gate_shexp.weight", [6144, 2048]],
    ];
    for (const [name, shape] of shapes) expect(tensor(name)?.shape, name).toEqual(shape);
    expect(plan.tensors.some((t) => t.name.startsWith("blk.10."))).toBe(false);
  });

  it("has the per-layer bytes the README scales to the whole file", () => {
    const gb = (bytes: number) => Math.round(bytes / 1e7) / 100;
    expect([0, 1, 2].map((l) => gb(layerBytes(l)))).toEqual([0.25, 0.25, 0.25]);
    for (let l = 3; l < 10; ++l) expect(gb(layerBytes(l)), `layer ${l}`).toBe(4.72);
    expect(gb(tensor("token_embd.weight").bytes + tensor("output.weight").bytes)).toBe(1.32);
    expect(gb(plan.tensorBytes)).toBe(35.1);
    // GLM-5's 3 dense and 75 MoE layers with the embedding and output: the README's 356 GB.
    let layers = 0;
    for (let l = 0; l < 10; ++l) layers += layerBytes(l);
    const whole = 3 * layerBytes(0) + 75 * layerBytes(3) + plan.tensorBytes - layers;
    expect(Math.round(whole / 1e9)).toBe(356);
  });

  it("binds as a header-only file, each position's cache row holding the indexer's key", async () => {
    const path = join(dir, "glm-5-slice-header.gguf");
    await writeSyntheticModel(path, { preset: "glm-5-slice", headerOnly: true });
    const footprint = await modelFootprint(path, { contextSize: 4096 });
    expect(footprint.kernelGaps).toEqual([]);
    // 10 layers of [latent 512, rotary key 64, indexer key 128] f16 per position.
    expect(footprint.kvBytes).toBe(4096 * 10 * (512 + 64 + 128) * 2);
  });
});

describe("options", () => {
  it("refuses unknown presets and types by name", () => {
    expect(() => planSyntheticModel({ preset: "nope" })).toThrow(/unknown preset "nope"/);
    expect(() => planSyntheticModel({ preset: "tiny-llama", weightType: "I8" })).toThrow(
      expect.objectContaining({ code: "UNSUPPORTED_QUANT" }),
    );
    expect(() => planSyntheticModel({ preset: "tiny-llama", weightType: "Q9_9" })).toThrow(BloomeryError);
  });
});

describe("tensor data", () => {
  it("does not depend on how the writer cuts a tensor into chunks", () => {
    for (const type of ["Q6_K", "MXFP4", "IQ1_M", "TQ1_0", "F16", "F32"]) {
      const whole = new Uint8Array(ggmlType(type).blockBytes * 64);
      tensorFiller(type, 42, { center: 0, amplitude: 0.05 })(whole, 0);
      const pieces = new Uint8Array(whole.length);
      const fill = tensorFiller(type, 42, { center: 0, amplitude: 0.05 });
      for (const [start, end] of [
        [0, 7],
        [7, 333],
        [333, 334],
        [334, whole.length],
      ] as const) {
        fill(pieces.subarray(start, end), start);
      }
      expect(Buffer.compare(whole, pieces), type).toBe(0);
    }
  });

  it("scales router rows so that each layer has its own hot experts", () => {
    const a = routerScales(128, 1, 0);
    const b = routerScales(128, 1, 1);
    const expected = Array.from({ length: 128 }, (_, r) => Math.fround(1 / Math.sqrt(1 + r)));
    expect([...a].sort((x, y) => y - x)).toEqual(expected);
    expect([...b].sort((x, y) => y - x)).toEqual(expected);
    expect([...a]).not.toEqual([...b]);
  });

  it("converts f16 exactly where it can", () => {
    expect(f32ToF16(BLOCK_D)).toBe(0x1019);
    expect(f32ToF16(BLOCK_DMIN)).toBe(0x0a8e);
    for (const bits of [0x0001, 0x03ff, 0x0400, 0x3c00, 0x7bff, 0xc000, 0x8000])
      expect(f32ToF16(f16ToF32(bits))).toBe(bits);
    expect(f32ToF16(65520)).toBe(0x7c00);
  });
});

describe("vocabulary", () => {
  it("maps bytes to GPT-2's visible symbols", () => {
    const symbols = byteSymbols();
    expect(new Set(symbols).size).toBe(256);
    expect(symbols[0x20]).toBe("Ġ");
    expect(symbols[0x0a]).toBe("Ċ");
    expect(symbols[0x41]).toBe("A");
    expect(symbols[0xad]).toBe("Ń");
  });

  it("has unique tokens, merges whose results are tokens, and typed special tokens", () => {
    for (const family of ["qwen", "llama"] as const) {
      const vocab = buildVocab(family, { size: 1000 });
      expect(vocab.tokens).toHaveLength(1000);
      expect(new Set(vocab.tokens).size).toBe(1000);
      const ids = new Map(vocab.tokens.map((t, i) => [t, i]));
      expect(vocab.merges.length).toBeGreaterThan(64);
      for (const merge of vocab.merges) {
        const [left, right] = merge.split(" ");
        expect(ids.has(left!) && ids.has(right!) && ids.has(left! + right!), merge).toBe(true);
      }
      for (const [text, id] of Object.entries(vocab.special)) {
        expect(vocab.tokens[id]).toBe(text);
        expect([TokenType.control, TokenType.userDefined]).toContain(vocab.tokenTypes[id]);
      }
      expect(vocab.tokenTypes[999]).toBe(TokenType.unused);
    }
    expect(buildVocab("qwen").tokens[buildVocab("qwen").eos]).toBe("<|im_end|>");
    expect(buildVocab("llama").tokens[buildVocab("llama").bos]).toBe("<|begin_of_text|>");
  });
});
