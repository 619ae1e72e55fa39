// Per-kernel GPU times (run on the GPU machine): runs a 512-token prompt and three decode
// steps of the whole model on the card under Nsight Compute (ncu), then sums each kernel's
// time per pass, so the limits of bench/gpu.mjs's figures can be named. With --streams N, N
// sessions each evaluate their prompt, then take their decode steps together (one pass of N
// rows a step, as parallel streams decode), so what grows with the streams can be named. With
// --suffix N --depth D, one session evaluates a prompt of D tokens and then N more instead (the
// last pass: a short prompt after a long context, as one served from the prompt-state cache;
// --suffix 4095 --depth 1 profiles a long prompt's passes); only the suffix's passes are profiled, so a long
// context costs its own time, not ncu's; with --decode as well, the N are a generation's decode
// steps after a prompt of D (each step replays its CUDA graph, as decode at depth runs). The JSON
// names the file's architecture.
// Writes JSON to $OUT.
//   node bench/gpu-kernels.mjs /root/q.gguf [--streams 1 | --suffix 100 --depth 3900 [--decode]]
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { getSystemInfo, loadModel, readGgufInfo } from "../dist/index.js";

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    streams: { type: "string", default: "1" },
    suffix: { type: "string", default: "0" },
    depth: { type: "string", default: "0" },
    decode: { type: "boolean", default: false },
  },
});
const SUFFIX = Number(values.suffix);
const DEPTH = Number(values.depth);
const DECODE = values.decode;
if (DECODE && !(SUFFIX > 0 && DEPTH > 0)) throw new Error("--decode takes --suffix N (steps) and --depth D (a prompt)");
const path = positionals[0] ?? "/root/q.gguf";
const STREAMS = Number(values.streams);
if (!Number.isInteger(STREAMS) || STREAMS < 1)
  throw new Error(`--streams takes a positive integer, not ${values.streams}`);
const PROMPT = 256; // eight streams' prompts fit one pass of the step budget (2,048 rows)
const DECODE_STEPS = 3;

async function workload() {
  const model = await loadModel(path, { gpu: "auto", contextSize: Math.max(4096, DEPTH + SUFFIX), parallel: STREAMS });
  const vocab = model.info.vocabSize;
  if (SUFFIX > 0) {
    const session = model.createSession();
    const tokens = Array.from({ length: DEPTH + SUFFIX }, (_, i) => (i * 7919 + 11) % vocab);
    if (DECODE) {
      const ban = { [model.info.eosToken]: -Infinity };
      await session.generate(tokens.slice(0, DEPTH), { maxTokens: SUFFIX + 1, logitBias: ban }).result;
    } else {
      await session.evaluate(tokens.slice(0, DEPTH));
      await session.evaluate(tokens.slice(DEPTH));
    }
    model.dispose();
    return;
  }
  const sessions = Array.from({ length: STREAMS }, () => model.createSession());
  // Generations started together share their passes: the prompts' and then each decode step's.
  const options = { maxTokens: DECODE_STEPS, logitBias: { [model.info.eosToken]: -Infinity } };
  await Promise.all(
    sessions.map(
      (session, s) =>
        session.generate(
          Array.from({ length: PROMPT }, (_, i) => (i * 7919 + s * 104729 + 11) % vocab),
          options,
        ).result,
    ),
  );
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

const METRICS = { "gpu__time_duration.sum": "ns", "dram__bytes_read.sum": "dramBytes" };

// ncu's CSV: one quoted row per kernel launch and metric, gathered into one record per launch.
function parseCsv(text) {
  const rows = [];
  for (const line of text.split("\n")) {
    if (!line.startsWith('"')) continue;
    rows.push(line.slice(1, -1).split('","'));
  }
  const header = rows.shift();
  const column = (name) => header.indexOf(name);
  const [id, kernel, grid, block, metric, unit, value] = [
    "ID",
    "Kernel Name",
    "Grid Size",
    "Block Size",
    "Metric Name",
    "Metric Unit",
    "Metric Value",
  ].map(column);
  const scale = { byte: 1, Kbyte: 1e3, Mbyte: 1e6, Gbyte: 1e9, nsecond: 1, usecond: 1e3, msecond: 1e6 };
  const launches = new Map();
  for (const r of rows) {
    const key = Number(r[id]);
    const launch = launches.get(key) ?? { id: key, kernel: r[kernel], grid: r[grid], block: r[block] };
    launch[METRICS[r[metric]]] = Number(r[value].replace(/,/g, "")) * (scale[r[unit]] ?? 1);
    launches.set(key, launch);
  }
  return [...launches.values()];
}

// "void ns::(anonymous namespace)::matvec_kernel<(unsigned int)12, 8>(ns::Args)" -> "matvec_kernel<12, 8>":
// the kernel and its template arguments (which name the weight type), without namespaces or parameters.
function kernelName(demangled) {
  let name = demangled.replace(/^void /, "");
  if (name.endsWith(")")) {
    for (let i = name.length - 1, depth = 0; i >= 0; --i) {
      if (name[i] === ")") depth += 1;
      if (name[i] === "(" && --depth === 0) {
        name = name.slice(0, i);
        break;
      }
    }
  }
  name = name.replace(/\(anonymous namespace\)::|<unnamed>::/g, "").replace(/\((unsigned )?[a-z]+\)/g, "");
  let start = 0;
  for (let i = 0, depth = 0; i < name.length; ++i) {
    if (name[i] === "<") depth += 1;
    if (name[i] === ">") depth -= 1;
    if (depth === 0 && name.startsWith("::", i)) start = i + 2;
  }
  return name.slice(start);
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
    const k = (pass.kernels[name] ??= { launches: 0, ms: 0, dramMB: 0 });
    k.launches += 1;
    k.ms += launch.ns / 1e6;
    k.dramMB += launch.dramBytes / 1e6;
    (pass.list ??= []).push({
      kernel: name,
      grid: launch.grid,
      block: launch.block,
      us: +(launch.ns / 1e3).toFixed(2),
      dramMB: +(launch.dramBytes / 1e6).toFixed(3),
    });
  }
  for (const pass of passes) {
    for (const k of Object.values(pass.kernels)) k.dramGBps = +(k.dramMB / k.ms).toFixed(1);
    pass.kernels = Object.fromEntries(Object.entries(pass.kernels).sort((a, b) => b[1].ms - a[1].ms));
  }
  // Each launch of the last pass (a decode step), in order; the others only summed.
  for (const pass of passes.slice(0, -1)) delete pass.list;
  return passes;
}

if (process.env.BLOOMERY_KERNELS_WORKLOAD) {
  await workload();
} else {
  const ncu = findNcu();
  const args = [
    "--csv",
    "--metrics",
    Object.keys(METRICS).join(","),
    "--clock-control",
    "none",
    "--cache-control",
    "none",
  ];
  // After a context (--depth), only the suffix's passes: the engine starts the collection at the first pass
  // past the context (BLOOMERY_PROFILE_FROM_POSITION), and the context's passes run at full speed, unprofiled.
  const window = SUFFIX > 0 ? ["--profile-from-start", "off"] : [];
  const from = SUFFIX > 0 ? { BLOOMERY_PROFILE_FROM_POSITION: String(DEPTH) } : {};
  const csv = execFileSync(
    ncu,
    [...args, ...window, process.execPath, fileURLToPath(import.meta.url), path, ...process.argv.slice(3)],
    {
      env: { ...process.env, BLOOMERY_KERNELS_WORKLOAD: "1", ...from },
      maxBuffer: 1 << 30,
      encoding: "utf8",
    },
  );
  const launches = parseCsv(csv);
  const passes = summarize(launches);
  const result = {
    command: `node bench/gpu-kernels.mjs ${process.argv.slice(2).join(" ")}`,
    date: new Date().toISOString(),
    machine: getSystemInfo(),
    model: {
      path,
      architecture: (await readGgufInfo(path)).summary.architecture,
      ...(SUFFIX > 0
        ? { depth: DEPTH, [DECODE ? "decodeSteps" : "suffix"]: SUFFIX }
        : { prompt: PROMPT, decodeSteps: DECODE_STEPS, streams: STREAMS }),
    },
    note:
      "kernel times and DRAM bytes read under ncu (--cache-control none, --clock-control none), each kernel " +
      "serialized: launch gaps excluded; the last pass (a decode step of every stream) also launch by launch",
    rawKernelName: launches[0]?.kernel,
    passes,
  };
  const name = SUFFIX > 0 ? `${DECODE ? "decode" : "suffix"}-${SUFFIX}-at-${DEPTH}` : STREAMS === 1 ? "" : `${STREAMS}`;
  const out = join(process.env.OUT ?? ".", name ? `gpu-kernels-${name}.json` : "gpu-kernels.json");
  writeFileSync(out, JSON.stringify(result, null, 2));
  for (const [i, pass] of passes.entries()) {
    const top = Object.entries(pass.kernels)
      .slice(0, 8)
      .map(([name, k]) => `${name} ${k.ms.toFixed(2)} ms/${k.launches}`);
    console.log(`pass ${i}: ${pass.launches} launches, ${pass.totalMs.toFixed(2)} ms: ${top.join("; ")}`);
  }
  console.log(`wrote ${out}`);
}
