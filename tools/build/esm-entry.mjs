// Writes the package's ES module entry (dist/index.js) and its types (dist/index.d.ts) after tsup
// built the library as CommonJS: `import` then reaches that same build, so ES and CommonJS users
// share one copy of every class and of the module's state (a BloomeryError thrown to either is
// `instanceof` the other's), with no dual-package hazard. Node finds the CommonJS build's named
// exports through the annotation esbuild writes for them.
import { writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const dist = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "dist");
const entry = '// The ES module entry: the CommonJS build, so both share one copy.\nexport * from "./index.cjs";\n';
writeFileSync(join(dist, "index.js"), entry);
writeFileSync(join(dist, "index.d.ts"), entry);
