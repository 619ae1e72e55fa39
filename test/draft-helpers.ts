// The draft model of the default model's draft tests (bench/draft-model.mjs).
import { join } from "node:path";
import { writeDraftModel as write } from "../bench/draft-model.mjs";

export const DEFAULT_MODEL = "models/bloomery-tiny-moe-Q8_0.gguf";

/** Writes the default model with one routed expert per token into `dir`; returns the file's path. */
export function writeDraftModel(dir: string): Promise<string> {
  return write(DEFAULT_MODEL, join(dir, "draft.gguf"));
}
