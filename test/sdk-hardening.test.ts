// The SDK as a careless or hostile integrator uses it: paths that are FIFOs or hold NUL bytes, token ids that are
// not token ids, absurd thread counts, malformed plans, misspelled options, a second generation on a busy session,
// a model file truncated while mapped. Each is refused by name; what hung or crashed the process before runs in a
// child process with a time limit.
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BloomeryError } from "../src/errors.js";
import { readGgufInfo } from "../src/gguf.js";
import { loadModel, type Model } from "../src/model.js";
import { callNativeAsync } from "../src/native.js";
import { checkOffloadPlan, modelFootprint, planOffload } from "../src/plan.js";
import { writeSyntheticModel } from "../tools/synth/synth.js";
import { expectCode } from "./gguf-helpers.js";
import { runScenario } from "./sdk-child-run.js";

const dir = mkdtempSync(join(tmpdir(), "bloomery-sdk-hardening-"));
const path = join(dir, "tiny.gguf");
let model: Model;

beforeAll(async () => {
  await writeSyntheticModel(path, { preset: "tiny-qwen3moe", weightType: "Q8_0" });
  model = await loadModel(path, { threads: 1, contextSize: 64, cacheRam: 0 });
});
afterAll(() => {
  model?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

/** The code of what `fn` throws synchronously (undefined when it does not throw). */
function thrownCode(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(BloomeryError);
    return (error as BloomeryError).code;
  }
  return undefined;
}

describe("paths", () => {
  it("a FIFO is refused at once by readGgufInfo and loadModel (they waited for a writer, past exit)", async () => {
    const fifo = join(dir, "model.fifo");
    execFileSync("mkfifo", [fifo]);
    for (const scenario of ["info", "load"]) {
      const end = await runScenario(scenario, [fifo]);
      expect(end.timedOut, `${scenario} on a FIFO`).toBe(false);
      expect(end.result?.outcome).toBe("FILE_READ");
    }
  });

  it("a NUL byte in a path is refused, not cut there (in TypeScript and at the addon)", async () => {
    const cut = `${path}\0.txt`;
    await expectCode(readGgufInfo(cut), "INVALID_ARGUMENT", /readGgufInfo\(\): the path contains a NUL byte/);
    await expectCode(loadModel(cut), "INVALID_ARGUMENT", /loadModel\(\): the path contains a NUL byte/);
    await expectCode(modelFootprint(cut), "INVALID_ARGUMENT", /modelFootprint\(\): the path contains a NUL byte/);
    await expectCode(
      callNativeAsync((a) => a.readGgufInfo(cut)),
      "INVALID_ARGUMENT",
      /a file path contains a NUL byte/,
    );
    await expectCode(
      callNativeAsync((a) => a.loadModel(cut, {})),
      "INVALID_ARGUMENT",
      /a file path contains a NUL/,
    );
    const session = model.createSession();
    await expectCode((async () => session.save(`${join(dir, "state.bin")}\0x`))(), "INVALID_ARGUMENT", /NUL/);
  });
});

describe("token ids", () => {
  const notIds: unknown[] = [2 ** 32 + 5, 5.9, "5", NaN, null, "abc", -1, 393, Infinity, undefined, 5n];

  it("evaluate and generate refuse what is not a token id, naming its index, and keep the context", async () => {
    const session = model.createSession();
    await session.evaluate([1, 2]);
    for (const bad of notIds) {
      const tokens = [3, bad] as number[];
      await expectCode(
        (async () => session.evaluate(tokens))(),
        "INVALID_ARGUMENT",
        /evaluate\(\)'s tokens\[1\] is .*, not a token id \(an integer from 0 to 392\)/,
      );
      expect(thrownCode(() => session.generate(tokens, { maxTokens: 1 }))).toBe("INVALID_ARGUMENT");
    }
    expect(session.position).toBe(2);
    expect(thrownCode(() => session.evaluate("12" as unknown as number[]))).toBe("INVALID_ARGUMENT");
  });
});

describe("options", () => {
  it("threads beyond the machine's logical cores are refused by name", async () => {
    await expectCode(loadModel(path, { threads: 1000 }), "INVALID_ARGUMENT", /threads = 1000 exceeds the \d+ logical/);
    await expectCode(loadModel(path, { threads: 2 ** 32 + 1 }), "INVALID_ARGUMENT", /threads/);
  });

  it("a plan of the wrong shape is refused by field, not a TypeError", async () => {
    const plans: unknown[] = [
      { layers: "x" },
      null,
      { contextSize: 64, layers: [null] },
      { contextSize: 64, layers: [{ gpu: 5, host: [] }] },
      { contextSize: 64, layers: [{ gpu: [], host: ["a"] }] },
      { contextSize: 64, layers: [], extra: 1 },
    ];
    for (const plan of plans) {
      await expectCode(loadModel(path, { plan: plan as never }), "INVALID_ARGUMENT", /^plan: /);
    }
    const footprint = await callNativeAsync((a) => a.hostFootprint(path, 64));
    expect(thrownCode(() => checkOffloadPlan({ layers: "x" } as never, footprint, { gpu: 0, hostRam: 1e9 }))).toBe(
      "INVALID_ARGUMENT",
    );
  });

  it("unknown options are refused by name, never ignored", async () => {
    await expectCode(
      loadModel(path, { contxtSize: 64 } as never),
      "INVALID_ARGUMENT",
      /loadModel\(\) has no option "contxtSize"/,
    );
    await expectCode(loadModel(path, { gpu: { devise: 0 } } as never), "INVALID_ARGUMENT", /"devise"/);
    await expectCode(loadModel(path, 5 as never), "INVALID_ARGUMENT", /must be an object/);
    const session = model.createSession();
    const cases: [string, () => unknown][] = [
      ["createSession", () => model.createSession({ contextSize: 8 } as never)],
      ["generate", () => session.generate("x", { maxToken: 2 } as never)],
      ["chat", () => session.chat([{ role: "user", content: "x" }], { tool: [] } as never)],
      ["evaluate", () => session.evaluate([1], { logit: "all" } as never)],
      ["tokenize", () => model.tokenize("x", { specal: true } as never)],
      ["detokenize", () => model.detokenize([1], { speciall: true } as never)],
    ];
    for (const [what, call] of cases) expect(thrownCode(call), what).toBe("INVALID_ARGUMENT");
    const footprint = await callNativeAsync((a) => a.hostFootprint(path, 64));
    expect(thrownCode(() => planOffload(footprint, { gpu: 0, hostRam: 1e9 }, { profle: {} } as never))).toBe(
      "INVALID_ARGUMENT",
    );
    await expectCode(modelFootprint(path, { ctx: 8 } as never), "INVALID_ARGUMENT", /"ctx"/);
  });
});

describe("a busy session", () => {
  it("refuses a second generation (and its other calls) while one is under way, instead of waiting forever", async () => {
    const session = model.createSession();
    const first = session.generate("The river ran past the mill", { maxTokens: 40 });
    const chunks = first[Symbol.asyncIterator]();
    await chunks.next(); // under way; its consumer stops reading here
    expect(thrownCode(() => session.generate("Another", { maxTokens: 2 }))).toBe("SESSION_BUSY");
    expect(thrownCode(() => session.chat([{ role: "user", content: "x" }]))).toBe("SESSION_BUSY");
    expect(thrownCode(() => session.evaluate([1]))).toBe("SESSION_BUSY");
    expect(thrownCode(() => session.save())).toBe("SESSION_BUSY");
    await chunks.return?.();
    expect((await first.result).stopReason).toBe("abort");
    expect((await session.generate("Another", { maxTokens: 2 }).result).tokens).toHaveLength(2);
  });
});

describe("a model file truncated while loaded", () => {
  it("fails the next pass with MODEL_FILE_CHANGED instead of killing the process with SIGBUS", async () => {
    const end = await runScenario("truncate", [path, join(dir, "truncated.gguf")]);
    expect(end.signal, end.stderr).toBeNull();
    expect(end.result?.outcome).toBe("MODEL_FILE_CHANGED");
  });

  it("does not touch a model read into private memory (mmap: false)", async () => {
    const end = await runScenario("truncate", [path, join(dir, "copied.gguf"), "copy"]);
    expect(end.signal, end.stderr).toBeNull();
    expect(end.result).toMatchObject({ outcome: "ok" });
    expect(end.result!.after).toBe(end.result!.before);
  });
});
