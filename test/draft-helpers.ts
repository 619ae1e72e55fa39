// A draft model for the default model's tests: its first layers and its output head (the same
// vocabulary, so it drafts for it; its guesses are the full model's often enough to be kept).
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseGguf, serializeGguf, setInt, U32 } from "./gguf-mutate.js";

export const DEFAULT_MODEL = "models/bloomery-tiny-moe-Q8_0.gguf";

/** Writes the default model cut to its first `layers` layers into `dir`; returns the file's path. */
export function writeDraftModel(dir: string, layers = 6, experts = 1): string {
  const g = parseGguf(readFileSync(DEFAULT_MODEL));
  // Each tensor's bytes run to the next one's (its alignment padding included): the kept ones are packed again.
  const byOffset = [...g.tensors].sort((a, b) => Number(a.offset - b.offset));
  const slices = new Map(
    byOffset.map((t, i) => [t, g.data.subarray(Number(t.offset), Number(byOffset[i + 1]?.offset ?? g.data.length))]),
  );
  const kept = byOffset.filter((t) => {
    const block = /^blk\.(\d+)\./.exec(t.name);
    return !block || Number(block[1]) < layers;
  });
  let offset = 0n;
  for (const t of kept) {
    t.offset = offset;
    offset += BigInt(slices.get(t)!.length);
  }
  g.data = Buffer.concat(kept.map((t) => slices.get(t)!));
  g.tensors = g.tensors.filter((t) => kept.includes(t));
  setInt(g, "qwen3moe.block_count", U32, BigInt(layers));
  setInt(g, "qwen3moe.expert_used_count", U32, BigInt(experts));
  const path = join(dir, `draft-${layers}-layers-${experts}-experts.gguf`);
  writeFileSync(path, serializeGguf(g));
  return path;
}
