// The built package as users load it: `import` and `require("bloomery")` both work.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { packageRoot } from "../src/native.js";

const root = packageRoot();
const run = (code: string, type: "module" | "commonjs") =>
  execFileSync(process.execPath, [type === "module" ? "--input-type=module" : "--input-type=commonjs", "-e", code], {
    cwd: root,
    encoding: "utf8",
  });

describe("the package", () => {
  it("has been built (npm install builds dist/)", () => {
    expect(existsSync(join(root, "dist", "index.js")), "dist/ is missing: run `npm run build`").toBe(true);
  });

  it("loads with import", () => {
    const out = run(
      'import { getSystemInfo, BloomeryError } from "bloomery"; console.log(typeof getSystemInfo().cpu.logicalCores, typeof BloomeryError)',
      "module",
    );
    expect(out.trim()).toBe("number function");
  });

  it("loads with require (CommonJS, as Electron apps use it)", () => {
    const out = run(
      'const b = require("bloomery"); console.log(typeof b.getSystemInfo().cpu.logicalCores, typeof b.readGgufInfo, new b.BloomeryError("DISPOSED", "x").code)',
      "commonjs",
    );
    expect(out.trim()).toBe("number function DISPOSED");
  });

  it("gives import and require one copy of each class (no dual-package hazard)", () => {
    const out = run(
      [
        'import { BloomeryError, loadModel, Model } from "bloomery";',
        'import { createRequire } from "node:module";',
        'const cjs = createRequire(import.meta.url)("bloomery");',
        "const thrown = await cjs.loadModel('/no/such/model.gguf').catch((e) => e);",
        "console.log(BloomeryError === cjs.BloomeryError, Model === cjs.Model, loadModel === cjs.loadModel,",
        "  thrown instanceof BloomeryError, thrown.code);",
      ].join("\n"),
      "module",
    );
    expect(out.trim()).toBe("true true true true FILE_NOT_FOUND");
  });

  it("ships type declarations for both", () => {
    expect(existsSync(join(root, "dist", "index.d.ts"))).toBe(true);
    expect(existsSync(join(root, "dist", "index.d.cts"))).toBe(true);
  });
});
