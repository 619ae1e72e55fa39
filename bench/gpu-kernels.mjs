// Per-kernel GPU times (run on the GPU machine): runs a 512-token prompt and three decode
// steps of the whole model on the card under Nsight Compute (ncu), then sums each kernel's
// time per pass, so the limits of bench/gpu.mjs's figures can be named. Writes JSON to $OUT.
//   node bench/gpu-kernels.mjs /root/q.gguf
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { getSystemInfo, loadModel } from "../dist/index.js";

const path = process.argv[2] ?? "/root/q.gguf";
const PROMPT = 512;
const DECODE_STEPS = 3;

async function workload() {
  const model = await loadModel(path, { gpu: "auto", contextSize: 4096 });
  const vocab = model.info.vocabSize;
  const session = model.createSession();
  await session.evaluate(Array.from({ length: PROMPT }, (_, i) => (i * 7919 + 11) % vocab));
  for (let i = 0; i < DECODE_STEPS; ++i) await session.evaluate([(i * 131 + 7) % vocab]);
  model.dispose();
}

function findNcu() {
  for (const candidate of ["/usr/local/cuda/bin/ncu", "/usr/bin/ncu"]) if (existsSync(candidate)) return candidate;
  const root = "/opt/nvidia/nsight-compute";
  if (existsSync(root)) {
    for (const version of readdirSync(root).sort().reverse()) {
      const candidate = join(root, version, "ncu");
      if (existsSync(candidate)) return candidate;
    }
  }
  throw new Error("ncu (Nsight Compute) is not installed here");
}

// ncu's CSV: one quoted row per kernel launch and metric.
function parseCsv(text) {
  const rows = [];
  for (const line of text.split("\n")) {
    if (!line.startsWith('"')) continue;
    rows.push(line.slice(1, -1).split('","'));
  }
  const header = rows.shift();
  const column = (name) => header.indexOf(name);
  const [id, kernel, value] = [column("ID"), column("Kernel Name"), column("Metric Value")];
  return rows.map((r) => ({ id: Number(r[id]), kernel: r[kernel], ns: Number(r[value].replace(/,/g, "")) }));
}

// "void ns::(anonymous namespace)::matvec_kernel<(unsigned int)12, 8>(Args)" -> "matvec_kernel<12, 8>":
// the kernel and its template arguments (which name the weight type), without namespaces or parameters.
function kernelName(demangled) {
  const name = demangled
    .replace(/\(anonymous namespace\)::|<unnamed>::/g, "")
    .replace(/^void /, "")
    .replace(/\([a-z ]+\)/g, "");
  let depth = 0;
  for (let i = 0; i < name.length; ++i) {
    if (name[i] === "<") depth += 1;
    if (name[i] === ">") depth -= 1;
    if (name[i] === "(" && depth === 0) return name.slice(0, i).split("::").pop();
  }
  return name.split("::").pop();
}

// Splits launches into passes at each embedding lookup (every pass starts with one) and sums
// each kernel's time (the name up to its template arguments) per pass.
function summarize(launches) {
  const passes = [];
  for (const launch of launches.sort((a, b) => a.id - b.id)) {
    const name = kernelName(launch.kernel);
    if (name.includes("embed") || passes.length === 0) passes.push({ launches: 0, totalMs: 0, kernels: {} });
    const pass = passes[passes.length - 1];
    pass.launches += 1;
    pass.totalMs += launch.ns / 1e6;
    const k = (pass.kernels[name] ??= { launches: 0, ms: 0 });
    k.launches += 1;
    k.ms += launch.ns / 1e6;
  }
  for (const pass of passes) {
    pass.kernels = Object.fromEntries(Object.entries(pass.kernels).sort((a, b) => b[1].ms - a[1].ms));
  }
  return passes;
}

if (process.env.BLOOMERY_KERNELS_WORKLOAD) {
  await workload();
} else {
  const ncu = findNcu();
  const args = ["--csv", "--metrics", "gpu__time_duration.sum", "--clock-control", "none", "--cache-control", "none"];
  const csv = execFileSync(ncu, [...args, process.execPath, fileURLToPath(import.meta.url), path], {
    env: { ...process.env, BLOOMERY_KERNELS_WORKLOAD: "1" },
    maxBuffer: 1 << 30,
    encoding: "utf8",
  });
  const passes = summarize(parseCsv(csv));
  const result = {
    command: `node bench/gpu-kernels.mjs ${path}`,
    date: new Date().toISOString(),
    machine: getSystemInfo(),
    model: { path, preset: "qwen3-30b-a3b synthetic", prompt: PROMPT, decodeSteps: DECODE_STEPS },
    note: "kernel times under ncu (--cache-control none, --clock-control none), each kernel serialized: launch gaps excluded",
    passes,
  };
  const out = join(process.env.OUT ?? ".", "gpu-kernels.json");
  writeFileSync(out, JSON.stringify(result, null, 2));
  for (const [i, pass] of passes.entries()) {
    const top = Object.entries(pass.kernels)
      .slice(0, 8)
      .map(([name, k]) => `${name} ${k.ms.toFixed(2)} ms/${k.launches}`);
    console.log(`pass ${i}: ${pass.launches} launches, ${pass.totalMs.toFixed(2)} ms: ${top.join("; ")}`);
  }
  console.log(`wrote ${out}`);
}
