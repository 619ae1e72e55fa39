// The peer of the GPU machine's benchmarks: ik_llama.cpp's llama-bench, built there by
// ../shared/device/peer/build.sh under /root/ikl, run on the same file as ours.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";

export const IK_BENCH = "/root/ikl/build/bin/llama-bench";
export const IK_BATCHED_BENCH = "/root/ikl/build/bin/llama-batched-bench";

/** Waits (up to 15 minutes) for the peer's build, which may still run beside ours; whether llama-bench is there. */
export async function peerBuilt() {
  for (let waited = 0; !existsSync("/root/ikl/build.done") && existsSync("/root/ikl") && waited < 900; waited += 5) {
    await sleep(5000);
  }
  return existsSync(IK_BENCH);
}

/**
 * llama-bench's t/s for each test of one run on `path` (`pp512`, `tg128`, ...), from its markdown table, with
 * -fa 1 -fmoe 1 -t 16 (and -mla 3 for an MLA model) before `args`.
 */
export function ikRun(path, args, { mla = false } = {}) {
  const command = [IK_BENCH, "-m", path, "-fa", "1", "-fmoe", "1", "-t", "16", ...(mla ? ["-mla", "3"] : []), ...args];
  const run = spawnSync(command[0], [...command.slice(1), "-o", "md"], { encoding: "utf8", timeout: 900_000 });
  const figures = {};
  for (const line of (run.stdout ?? "").split("\n")) {
    const cells = line.split("|").map((c) => c.trim());
    const test = cells.at(-3);
    const rate = /^([\d.]+) ± ([\d.]+)$/.exec(cells.at(-2) ?? "");
    if (test && rate) figures[test] = Number(rate[1]);
  }
  if (Object.keys(figures).length === 0) figures.error = (run.stderr || run.stdout || String(run.error)).slice(-2000);
  return { command: command.join(" "), figures };
}

/**
 * llama-batched-bench's total decode rate (S_TG t/s: all streams' generated tokens over the time of their
 * passes) for each stream count, the whole model on the GPU with -fa 1 and fused MoE (its default): every
 * stream gets its own prompt of `prompt` tokens, then `decode` tokens one pass per step for all of them.
 */
export function ikBatchedRun(path, { prompt, decode, streams }) {
  const context = Math.max(...streams) * (prompt + decode);
  const command = [IK_BATCHED_BENCH, "-m", path, "-fa", "1", "-ngl", "99", "-c", String(context)];
  command.push("-npp", String(prompt), "-ntg", String(decode), "-npl", streams.join(","));
  const run = spawnSync(command[0], command.slice(1), { encoding: "utf8", timeout: 900_000 });
  const figures = {};
  for (const line of `${run.stdout ?? ""}\n${run.stderr ?? ""}`.split("\n")) {
    // | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
    const cells = line.split("|").map((c) => c.trim());
    if (cells.length !== 12 || !/^\d+$/.test(cells[3])) continue;
    figures[`decodeTokensPerSecond${cells[3]}`] = Number(cells[8]);
  }
  if (Object.keys(figures).length === 0) figures.error = (run.stderr || run.stdout || String(run.error)).slice(-2000);
  return { command: command.join(" "), figures };
}

/**
 * ik's placement for a GPU budget of `budget` bytes (a modelFootprint's): the dense part and the cache, then
 * whole layers' routed experts from the first layer on while they fit; the others' experts on the CPU (-ot).
 */
export function ikLayerSplit(footprint, budget) {
  const routed = footprint.expertBytes.map((bytes, l) => ({ bytes, l })).filter((x) => x.bytes > 0);
  let left = budget - footprint.denseBytes - footprint.kvBytes - footprint.workspaceBytes;
  const onGpu = new Set();
  for (const { bytes, l } of routed) {
    if (bytes * footprint.experts > left) break;
    left -= bytes * footprint.experts;
    onGpu.add(l);
  }
  const cpuLayers = routed.filter((x) => !onGpu.has(x.l)).map((x) => x.l);
  const args = ["-ngl", "99"];
  if (cpuLayers.length > 0) args.push("-ot", `blk\\.(${cpuLayers.join("|")})\\.ffn_(gate|up|down)_exps=CPU`);
  return { args, gpuLayers: onGpu.size, moeLayers: routed.length };
}
