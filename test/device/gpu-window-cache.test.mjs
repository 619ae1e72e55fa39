// GPU machine: a sliding-window layer's KV cache on the GPU holds the window, its alignment and one
// pass's rows (engine/gpu_forward.h: gpu_window_first), as llama.cpp's iSWA cache holds the window
// and a batch. tiny-gpt-oss (window 32 on its even layers) at a context of 4,096 with passes of
// 2,048 rows keeps 32 + 64 + 2,048 rows there, so 4,000 positions move the windows' rows to the
// front: in the prompt's second pass, and in a decode step, whose graph is captured again for the
// moved cache. Through those moves the GPU's logits match the CPU's; a GPU session's state restores
// on the GPU exactly and on the CPU within the bar, and the CPU's on the GPU; the plan counts the
// windows' rows. Skips where no NVIDIA device exists.
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import {
  assertWithinBar,
  compare,
  cpuFloor,
  decodeAll,
  expectExactStateRoundTrips,
  fixtures,
  skip,
} from "./helpers.mjs";
import { agreementBar, walkTokens } from "../distributions.mjs";
import { loadModel } from "../../dist/index.js";

const { dir, fixture } = fixtures("gpu-window");
const CONTEXT = 4096;
const POSITIONS = 4000;
// tiny-gpt-oss: 4 layers, the even ones windowed (32), 2 KV heads of 64 (keys and values in f16).
const ROW_BYTES = 2 * 64 * 2 * 2;
const WINDOW_ROWS = 32 + 64 + 2048;

test("the plan counts a windowed layer's window, not the context", { skip }, async () => {
  const gpu = await loadModel(fixture("tiny-gpt-oss", "Q8_0"), { gpu: "auto", contextSize: CONTEXT });
  try {
    assert.equal(gpu.plan.bytes.gpu.kvCache, (2 * CONTEXT + 2 * WINDOW_ROWS) * ROW_BYTES);
  } finally {
    gpu.dispose();
  }
});

for (const [preset, type] of [
  ["tiny-gpt-oss", "Q8_0"],
  ["tiny-gpt-oss", "MXFP4"],
  ["tiny-mimo2", "F16"],
]) {
  test(
    `${preset} ${type}: GPU logits match the CPU's over ${POSITIONS} positions whose windows move`,
    { skip },
    async () => {
      const path = fixture(preset, type);
      const cpu = await loadModel(path, { gpu: false, contextSize: CONTEXT });
      const gpu = await loadModel(path, { gpu: "auto", contextSize: CONTEXT });
      try {
        const vocab = cpu.info.vocabSize;
        const input = walkTokens(cpu.info.bosToken, vocab, POSITIONS);
        const reference = await cpu.createSession().evaluate(input, { logits: "all" });
        const floor = cpuFloor(path, input, reference, vocab, { contextSize: CONTEXT, dir });
        const bar = agreementBar(floor.top1, floor.kl);
        const prompt = compare(reference, await gpu.createSession().evaluate(input, { logits: "all" }), vocab);
        const decode = compare(reference, await decodeAll(gpu, input), vocab);
        console.log(
          `${preset} ${type}: prompt ${JSON.stringify(prompt)}, decode ${JSON.stringify(decode)}, bar ${JSON.stringify(bar)}`,
        );
        assertWithinBar({ prompt, decode }, bar);
      } finally {
        cpu.dispose();
        gpu.dispose();
      }
    },
  );
}

test("states with moved windows restore on the GPU exactly, and between the GPU and the CPU", { skip }, async () => {
  const path = fixture("tiny-gpt-oss", "F16");
  const cpu = await loadModel(path, { gpu: false, contextSize: CONTEXT, cacheRam: 0 });
  const gpu = await loadModel(path, { gpu: "auto", contextSize: CONTEXT, cacheRam: 0 });
  try {
    const vocab = cpu.info.vocabSize;
    const input = walkTokens(cpu.info.bosToken, vocab, POSITIONS + 64);
    const prefix = input.slice(0, POSITIONS);
    const probe = input.slice(POSITIONS);
    const { expected, state: gpuState } = await expectExactStateRoundTrips(
      gpu,
      prefix,
      probe,
      join(dir, "moved-windows.bin"),
    );

    const onCpu = cpu.createSession();
    await onCpu.evaluate(prefix);
    const cpuState = await onCpu.save();
    const reference = await onCpu.evaluate(probe, { logits: "all" });
    const bar = agreementBar(1, 0);
    const gpuToCpu = cpu.createSession();
    await gpuToCpu.restore(gpuState);
    const cpuFromGpu = compare(reference, await gpuToCpu.evaluate(probe, { logits: "all" }), vocab);
    const cpuToGpu = gpu.createSession();
    await cpuToGpu.restore(cpuState);
    const gpuFromCpu = compare(expected, await cpuToGpu.evaluate(probe, { logits: "all" }), vocab);
    console.log(
      `GPU state on the CPU ${JSON.stringify(cpuFromGpu)}, CPU state on the GPU ${JSON.stringify(gpuFromCpu)}`,
    );
    assertWithinBar({ "the GPU's state on the CPU": cpuFromGpu, "the CPU's state on the GPU": gpuFromCpu }, bar);
  } finally {
    cpu.dispose();
    gpu.dispose();
  }
});
