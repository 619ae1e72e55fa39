// Lists C++ sources for binding.gyp, by target:
//   engine  every .cc under native/ outside addon/ and tests/ (the static engine library)
//   addon   native/addon/*.cc (the N-API module)
//   tests   native/tests/*.cc (the native unit-test executable)
import { existsSync, readdirSync } from "node:fs";
import { join, dirname, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const native = join(root, "native");
const which = process.argv[2];
const out = [];
const walk = (dir, keep) => {
  if (!existsSync(dir)) return;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) walk(p, keep);
    else if (e.name.endsWith(".cc") && keep(relative(native, p))) out.push(relative(root, p));
  }
};
if (which === "engine") walk(native, (rel) => !rel.startsWith("addon/") && !rel.startsWith("tests/"));
else if (which === "addon") walk(join(native, "addon"), () => true);
else if (which === "tests") walk(join(native, "tests"), () => true);
else {
  console.error("usage: sources.mjs engine|addon|tests");
  process.exit(2);
}
console.log(out.sort().join("\n"));
