// A draft model for the default model: the same file with fewer routed experts per token (one
// instead of four), so the same vocabulary, a cheaper pass and guesses close to the model's.
// The draft benchmark and the draft tests use it.
import { readFile } from "node:fs/promises";
import { readGgufInfo, writeGguf } from "../dist/index.js";

/** Writes `source` with `expertsUsed` routed experts per token to `path`. */
export async function writeDraftModel(source, path, expertsUsed = 1) {
  const info = await readGgufInfo(source);
  const bytes = await readFile(source);
  const arch = info.metadata["general.architecture"];
  await writeGguf(path, {
    alignment: info.alignment,
    metadata: { ...info.metadata, [`${arch}.expert_used_count`]: expertsUsed },
    metadataTypes: info.metadataTypes,
    tensors: info.tensors.map((t) => ({
      name: t.name,
      type: t.type,
      shape: t.shape,
      data: bytes.subarray(t.offset, t.offset + t.bytes),
    })),
  });
  return path;
}
