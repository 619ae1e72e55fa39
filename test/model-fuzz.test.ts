// Mutated model files through loadModel and a short generation, thousands of them, in child processes that are
// watched from outside: every file must load and generate, or be refused with a BloomeryError code; a child that
// dies (by a signal or otherwise), stops answering for FILE_TIMEOUT_MS or grows past RSS_LIMIT fails the test,
// naming the file's seed and index and what was mutated. BLOOMERY_FUZZ_SEED sets the seed (printed),
// BLOOMERY_FUZZ_FILES the number of files, BLOOMERY_FUZZ_INDEX runs that one file alone.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, test } from "vitest";
import { writeSyntheticModel } from "../tools/synth/synth.js";

const SEED = Number(process.env.BLOOMERY_FUZZ_SEED ?? 0x6d0de1);
const FILES = Number(process.env.BLOOMERY_FUZZ_FILES ?? 2000);
const ONLY = process.env.BLOOMERY_FUZZ_INDEX === undefined ? undefined : Number(process.env.BLOOMERY_FUZZ_INDEX);
const CHILDREN = Math.max(1, Math.min(2, availableParallelism()));
const FILE_TIMEOUT_MS = 15_000;
const START_TIMEOUT_MS = 60_000;
const RSS_LIMIT = 1536 * 2 ** 20;

const dir = mkdtempSync(join(tmpdir(), "bloomery-model-fuzz-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface ChildReport {
  outcomes: Map<string, number>;
  failures: string[];
}

/** The resident set of a running process, from /proc (0 once it is gone). */
function rssOf(pid: number): number {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

/** Runs files [from, to) in one child, watching it. */
function runChild(bases: string[], from: number, to: number): Promise<ChildReport> {
  const report: ChildReport = { outcomes: new Map(), failures: [] };
  const name = (index: number, what: string) =>
    `seed ${SEED} file ${index} (BLOOMERY_FUZZ_SEED=${SEED} BLOOMERY_FUZZ_INDEX=${index}): ${what}`;
  return new Promise((resolve) => {
    const task = JSON.stringify({ bases, seed: SEED, from, to, dir });
    const child = spawn(process.execPath, ["--import", "./test/child-loader.mjs", "test/model-fuzz-child.ts", task], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let current: { index: number; what: string } | undefined;
    let lastWord = Date.now();
    let started = false;
    let stderr = "";
    let buffered = "";
    let killed = false;
    const stop = (why: string) => {
      if (killed) return;
      killed = true;
      report.failures.push(name(current?.index ?? from, `${current?.what ?? "before the first file"}: ${why}`));
      child.kill("SIGKILL");
    };
    const watch = setInterval(() => {
      const rss = rssOf(child.pid!);
      if (rss > RSS_LIMIT) stop(`the process grew to ${(rss / 2 ** 20).toFixed(0)} MiB`);
      const limit = started ? FILE_TIMEOUT_MS : START_TIMEOUT_MS;
      if (Date.now() - lastWord > limit) stop(`no answer within ${limit} ms`);
    }, 100);
    child.stderr.on("data", (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-4000)));
    child.stdout.on("data", (chunk: Buffer) => {
      lastWord = Date.now();
      started = true;
      buffered += chunk.toString();
      const lines = buffered.split("\n");
      buffered = lines.pop()!;
      for (const line of lines) {
        const [kind, index, ...rest] = line.split(" ");
        if (kind === "start") {
          current = { index: Number(index), what: rest.join(" ") };
          continue;
        }
        const [peak, ...outcome] = rest;
        const code = outcome.join(" ");
        if (code.startsWith("bad:")) report.failures.push(name(Number(index), `${current!.what}: ${code}`));
        if (Number(peak) > RSS_LIMIT) report.failures.push(name(Number(index), `${current!.what}: peak RSS ${peak}`));
        const key = code.startsWith("bad:") ? "bad" : code;
        report.outcomes.set(key, (report.outcomes.get(key) ?? 0) + 1);
        current = undefined;
      }
    });
    child.on("exit", (code, signal) => {
      clearInterval(watch);
      if (killed) {
        // stop() named the file already.
      } else if (current) {
        stop(`the process ended (${signal ?? `exit code ${code}`}) while it ran: ${stderr.trim()}`);
      } else if (code !== 0) {
        report.failures.push(`a fuzz child ended with ${signal ?? `exit code ${code}`}: ${stderr.trim()}`);
      }
      resolve(report);
    });
  });
}

test(`mutated models load and generate, or are refused by code (${FILES} files)`, { timeout: 300_000 }, async () => {
  process.stderr.write(`model fuzz seed: ${SEED} (set BLOOMERY_FUZZ_SEED to change it)\n`);
  const bases = [
    ["tiny-qwen3moe", "Q4_0"],
    ["tiny-llama", "Q4_K"],
    ["tiny-qwen2", "Q8_0"],
  ].map(([preset, weightType]) => join(dir, `${preset}-${weightType}.gguf`));
  await writeSyntheticModel(bases[0]!, { preset: "tiny-qwen3moe", weightType: "Q4_0" });
  await writeSyntheticModel(bases[1]!, { preset: "tiny-llama", weightType: "Q4_K" });
  await writeSyntheticModel(bases[2]!, { preset: "tiny-qwen2", weightType: "Q8_0" });

  const started = performance.now();
  const ranges: [number, number][] =
    ONLY !== undefined
      ? [[ONLY, ONLY + 1]]
      : Array.from({ length: CHILDREN }, (_, c) => [
          Math.floor((FILES * c) / CHILDREN),
          Math.floor((FILES * (c + 1)) / CHILDREN),
        ]);
  const reports = await Promise.all(ranges.map(([from, to]) => runChild(bases, from, to)));
  const outcomes = new Map<string, number>();
  for (const r of reports) for (const [code, n] of r.outcomes) outcomes.set(code, (outcomes.get(code) ?? 0) + n);
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  process.stderr.write(`model fuzz: ${seconds} s, outcomes ${JSON.stringify(Object.fromEntries(outcomes))}\n`);

  expect(reports.flatMap((r) => r.failures)).toEqual([]);
  if (ONLY !== undefined) return;
  const total = [...outcomes.values()].reduce((a, b) => a + b, 0);
  expect(total).toBe(FILES);
  // The mutations must reach the loader and the engine, not stop at the reader.
  expect(outcomes.get("ok") ?? 0).toBeGreaterThan(FILES / 10);
  for (const code of ["MODEL_BAD_METADATA", "MODEL_TENSOR_SHAPE", "GGUF_TENSOR_LAYOUT", "TOKENIZER_BAD_VOCAB"]) {
    expect(outcomes.get(code) ?? 0, code).toBeGreaterThan(0);
  }
});
