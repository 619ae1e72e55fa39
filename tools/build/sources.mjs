// Lists C++ sources for binding.gyp, by target and target architecture:
//   engine [arch]  every .cc under native/ outside addon/ and tests/ (the static engine library)
//   addon          native/addon/*.cc (the N-API module)
//   tests [arch]   native/tests/*.cc (the native unit-test executable)
//   has-tests      1 when native/tests/ is here (a source checkout), 0 in the published package
// Files named for an x86 instruction set (`*_avx2.cc`, `*_avx512*.cc`) build only for x64 (`arch`,
// node-gyp's target_arch, defaults to x64): elsewhere the kernel tables hold the scalar kernels alone.
import { existsSync, readdirSync } from "node:fs";
import { join, dirname, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const native = join(root, "native");
const [which, arch = "x64"] = process.argv.slice(2);
const forArch = (rel) => arch === "x64" || !/_avx(2|512)/.test(rel);
const out = [];
const walk = (dir, keep) => {
  if (!existsSync(dir)) return;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) walk(p, keep);
    else if (e.name.endsWith(".cc") && keep(relative(native, p)) && forArch(e.name)) out.push(relative(root, p));
  }
};
if (which === "engine") walk(native, (rel) => !rel.startsWith("addon/") && !rel.startsWith("tests/"));
else if (which === "addon") walk(join(native, "addon"), () => true);
else if (which === "tests") walk(join(native, "tests"), () => true);
else if (which === "has-tests") out.push(existsSync(join(native, "tests")) ? "1" : "0");
else {
  console.error("usage: sources.mjs engine|addon|tests [arch] | has-tests");
  process.exit(2);
}
console.log(out.sort().join("\n"));
