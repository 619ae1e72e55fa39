import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel, readGgufInfo } from "../src/index.js";
import { fillWords, streamKey } from "../tools/synth/random.js";
import { writeSyntheticModel } from "../tools/synth/synth.js";
import { exportWithNextn } from "../tools/train/nextn-export.js";

// tools/train/nextn-export.ts (issue 20, item 5), on a synthetic qwen3moe trunk and a next-n layer
// of random weights in mtp.py's safetensors layout: the glm4moe it writes computes the trunk's
// logits exactly (its zero selection bias and zero shared experts change nothing) and drafts with
// the layer; a layer lacking a tensor is refused before anything is written.

const dir = mkdtempSync(join(tmpdir(), "bloomery-nextn-export-"));
const trunk = join(dir, "trunk.gguf");
let layers = 0;
let embedding = 0;
let expertWidth = 0;
/** The next-n layer as mtp.py writes it: llama.cpp's names under blk.<layers>., torch's shapes (GGUF's reversed). */
let nextn: Map<string, { shape: number[]; values: Float32Array }>;

// The trunk tensors mtp.py starts the layer from (its LAYER list).
const FROM_TRUNK = [
  "attn_norm",
  "attn_q",
  "attn_k",
  "attn_v",
  "attn_output",
  "attn_q_norm",
  "attn_k_norm",
  "ffn_norm",
  "ffn_gate_inp",
  "ffn_gate_exps",
  "ffn_up_exps",
  "ffn_down_exps",
];

/** Small values from the synthetic writer's seeded stream, so the layer's drafts are not all one token. */
function values(count: number, seed: number): Float32Array {
  const words = new Uint32Array(count);
  fillWords(words, streamKey(seed), 0);
  return Float32Array.from(words, (word) => (word / 2 ** 32 - 0.5) * 0.1);
}

function writeSafetensors(path: string, tensors: Map<string, { shape: number[]; values: Float32Array }>): void {
  const header: Record<string, { dtype: string; shape: number[]; data_offsets: [number, number] }> = {};
  let offset = 0;
  for (const [name, t] of tensors) {
    header[name] = { dtype: "F32", shape: t.shape, data_offsets: [offset, offset + 4 * t.values.length] };
    offset += 4 * t.values.length;
  }
  const json = Buffer.from(JSON.stringify(header));
  const length = Buffer.alloc(8);
  length.writeBigUInt64LE(BigInt(json.length));
  const data = Buffer.concat([...tensors.values()].map((t) => Buffer.from(t.values.buffer)));
  writeFileSync(path, Buffer.concat([length, json, data]));
}

beforeAll(async () => {
  await writeSyntheticModel(trunk, { preset: "tiny-qwen3moe", weightType: "Q8_0" });
  const info = await readGgufInfo(trunk);
  layers = info.summary.layers;
  embedding = Number(info.metadata["qwen3moe.embedding_length"]);
  expertWidth = Number(info.metadata["qwen3moe.expert_feed_forward_length"]);
  const prefix = `blk.${layers}.`;
  nextn = new Map();
  const add = (role: string, shape: number[]) =>
    nextn.set(`${prefix}${role}.weight`, {
      shape,
      values: values(
        shape.reduce((a, b) => a * b, 1),
        nextn.size + 1,
      ),
    });
  for (const role of FROM_TRUNK) {
    const t = info.tensors.find((x) => x.name === `blk.${layers - 1}.${role}.weight`);
    if (!t) throw new Error(`the trunk lacks ${role}`);
    add(role, [...t.shape].reverse());
  }
  add("nextn.enorm", [embedding]);
  add("nextn.hnorm", [embedding]);
  add("nextn.eh_proj", [embedding, 2 * embedding]);
  add("ffn_gate_shexp", [expertWidth, embedding]);
  add("ffn_up_shexp", [expertWidth, embedding]);
  add("ffn_down_shexp", [embedding, expertWidth]);
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("nextn-export", () => {
  it("writes a glm4moe of the trunk and a next-n layer that computes the trunk's logits and drafts with the layer", async () => {
    const layerPath = join(dir, "nextn.safetensors");
    const out = join(dir, "glm4moe.gguf");
    writeSafetensors(layerPath, nextn);
    await exportWithNextn(trunk, layerPath, out);

    const info = await readGgufInfo(out);
    expect(info.summary).toMatchObject({ architecture: "glm4moe", layers: layers + 1 });
    expect(info.metadata["glm4moe.nextn_predict_layers"]).toBe(1);
    const shape = (name: string) => info.tensors.find((t) => t.name === name)?.shape;
    expect(shape(`blk.${layers}.nextn.eh_proj.weight`)).toEqual([2 * embedding, embedding]);
    expect(shape(`blk.${layers}.exp_probs_b.bias`)).toBeDefined();
    expect(shape(`blk.0.post_attention_norm.weight`)).toEqual([embedding]);
    expect(shape(`blk.0.ffn_gate_shexp.weight`)).toEqual([embedding, expertWidth]);
    expect(shape(`blk.${layers}.ffn_gate_shexp.weight`)).toEqual([embedding, expertWidth]);

    const vocab = shape("token_embd.weight")![1]!;
    const tokens = Array.from({ length: 40 }, (_, i) => (i * 7919 + 17) % vocab);
    const logits = async (path: string) => {
      const model = await loadModel(path, { gpu: false, threads: 1 });
      try {
        return await model.createSession().evaluate(tokens, { logits: "all" });
      } finally {
        model.dispose();
      }
    };
    expect(await logits(out)).toEqual(await logits(trunk));

    const model = await loadModel(out, { gpu: false, threads: 1 });
    try {
      const options = { maxTokens: 32, logitBias: { [model.info.eosToken]: -Infinity } };
      const without = await model.createSession().generate(tokens, { ...options, draft: false }).result;
      const draft = { source: "mtp", adaptive: false, max: 2 } as const;
      const withDrafts = await model.createSession().generate(tokens, { ...options, draft }).result;
      expect(withDrafts.tokens).toEqual(without.tokens);
      expect(withDrafts.timings.draftTokens).toBeGreaterThan(10);
    } finally {
      model.dispose();
    }
  });

  it("refuses a next-n layer lacking a tensor before it writes anything", async () => {
    const layerPath = join(dir, "incomplete.safetensors");
    const out = join(dir, "incomplete.gguf");
    const incomplete = new Map(nextn);
    incomplete.delete(`blk.${layers}.nextn.enorm.weight`);
    writeSafetensors(layerPath, incomplete);
    await expect(exportWithNextn(trunk, layerPath, out)).rejects.toThrow(/lacks nextn\.enorm/);
    expect(existsSync(out)).toBe(false);
  });
});
