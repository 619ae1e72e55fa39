// Module hooks for child-loader.mjs: a relative `.js` import that names a `.ts` source resolves to it, and `.ts`
// files are transpiled (types stripped, one file at a time, with vite's transformWithOxc) as they load.
import { existsSync, readFileSync } from "node:fs";
import { fileURLToPath, URL } from "node:url";

export async function resolve(specifier, context, next) {
  if (specifier.startsWith(".") && specifier.endsWith(".js") && context.parentURL?.startsWith("file:")) {
    const url = new URL(`${specifier.slice(0, -3)}.ts`, context.parentURL);
    if (existsSync(fileURLToPath(url))) return { url: url.href, shortCircuit: true };
  }
  return next(specifier, context);
}

export async function load(url, context, next) {
  if (!url.startsWith("file:") || !url.endsWith(".ts")) return next(url, context);
  const fileName = fileURLToPath(url);
  // Loaded on the first .ts file only: every vitest process registers these hooks, most never use them.
  const { transformWithOxc } = await import("vite");
  const { code } = await transformWithOxc(readFileSync(fileName, "utf8"), fileName, { sourcemap: false });
  return { format: "module", source: code, shortCircuit: true };
}
