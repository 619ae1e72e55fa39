// The model the command-line tools run when none is named: package.json's `bloomery.defaultModel`
// (models/README.md says what it is).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { packageRoot } from "../src/native.js";

export function defaultModelPath(): string {
  const pkg = JSON.parse(readFileSync(join(packageRoot(), "package.json"), "utf8")) as {
    bloomery: { defaultModel: string };
  };
  return join(packageRoot(), pkg.bloomery.defaultModel);
}
