// bloomery-inspect: what this machine offers and what a GGUF file holds.
//   bloomery-inspect [model.gguf] [--json]
// Without a path it inspects the default model (models/README.md).
import { existsSync } from "node:fs";
import { getSystemInfo, readGgufInfo, BloomeryError } from "../../src/index.js";
import { defaultModelPath } from "../default-model.js";

const GiB = 1024 ** 3;
const fmtBytes = (n: number) => (n >= GiB ? `${(n / GiB).toFixed(2)} GiB` : `${(n / 1024 ** 2).toFixed(1)} MiB`);

async function main(argv: string[]): Promise<number> {
  const json = argv.includes("--json");
  const paths = argv.filter((a) => !a.startsWith("--"));
  if (argv.includes("--help")) {
    console.log("usage: bloomery-inspect [model.gguf] [--json]");
    return 0;
  }
  const path = paths[0] ?? defaultModelPath();
  if (!existsSync(path)) {
    console.error(`bloomery-inspect: ${path} not found`);
    return 1;
  }
  const system = getSystemInfo();
  const info = await readGgufInfo(path);
  if (json) {
    console.log(JSON.stringify({ system, summary: info.summary }, null, 2));
    return 0;
  }
  const f = system.cpu.features;
  const simd = ["avx2", "avx512f", "avx512vnni", "amxInt8"].filter((k) => f[k as keyof typeof f]).join(" ");
  console.log(
    `CPU   ${system.cpu.model}: ${system.cpu.physicalCores} cores (${system.cpu.logicalCores} threads), ${simd}`,
  );
  console.log(`RAM   ${fmtBytes(system.memory.available)} available of ${fmtBytes(system.memory.total)}`);
  if (system.gpus.length === 0) console.log(`GPU   none: ${system.cuda.reason}`);
  for (const g of system.gpus)
    console.log(
      `GPU   ${g.index}: ${g.name} (sm ${g.computeCapability}), ${fmtBytes(g.freeMemory)} free of ${fmtBytes(g.totalMemory)}`,
    );
  const s = info.summary;
  console.log(`\n${path}`);
  console.log(`model ${s.name ?? "(unnamed)"}: ${s.architecture}, ${s.layers} layers, width ${s.embeddingLength}`);
  if (s.experts > 0) console.log(`      mixture of experts: ${s.experts} experts, ${s.expertsUsed} used per token`);
  console.log(
    `      ${(s.parameters / 1e6).toFixed(1)} M parameters, ${fmtBytes(s.tensorBytes)} of weights, context ${s.contextLength}`,
  );
  const types = Object.entries(s.bytesByType)
    .sort((a, b) => b[1] - a[1])
    .map(([t, b]) => `${t} ${fmtBytes(b)}`);
  console.log(`      by type: ${types.join(", ")}`);
  return 0;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    if (error instanceof BloomeryError) console.error(`bloomery-inspect: ${error.code}: ${error.message}`);
    else console.error(error);
    process.exit(1);
  },
);
