// Saved session states are not trusted either: a state of a model with other weights, a corrupted state file, a
// link or a FIFO where a state file should be are all refused by name, and the session is unchanged after each.
// What hung before (a FIFO) runs in a child process with a time limit.
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BloomeryError } from "../src/errors.js";
import { loadModel, type Model } from "../src/model.js";
import { writeSyntheticModel } from "../tools/synth/synth.js";
import { expectCode } from "./gguf-helpers.js";
import { parseGguf, serializeGguf } from "./gguf-mutate.js";
import { runScenario } from "./sdk-child-run.js";

const dir = mkdtempSync(join(tmpdir(), "bloomery-state-files-"));
const path = join(dir, "tiny.gguf");
const HEADER_BYTES = 88; // native/engine/state.cc FileHeader
let model: Model;

beforeAll(async () => {
  await writeSyntheticModel(path, { preset: "tiny-qwen3moe", weightType: "Q8_0" });
  model = await loadModel(path, { threads: 1, contextSize: 64, cacheRam: 0 });
});
afterAll(() => {
  model?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

/** A session whose context is a prompt and 12 generated tokens, and the continuation it then gives. */
async function savedSession(): Promise<{ file: string; position: number; continuation: string }> {
  const session = model.createSession();
  await session.generate("The river ran past the mill", { maxTokens: 12 }).result;
  const file = join(dir, `state-${Math.random().toString(36).slice(2)}.bin`);
  await session.save(file);
  const position = session.position;
  const continuation = (await session.generate(await stateTokens(file, position), { maxTokens: 6 }).result).text;
  session.dispose();
  return { file, position, continuation };
}

/** The tokens a state file holds. */
async function stateTokens(file: string, position: number): Promise<number[]> {
  const bytes = readFileSync(file);
  return Array.from({ length: position }, (_, i) => bytes.readInt32LE(HEADER_BYTES + 4 * i));
}

describe("a state saved from another model", () => {
  it("is refused when the weights differ, even past the first bytes of every tensor", async () => {
    // Every tensor's bytes after its first 32 changed: the old fingerprint (32 bytes per tensor) took it for the same.
    const g = parseGguf(readFileSync(path));
    g.data = Buffer.from(g.data);
    for (const t of g.tensors) {
      const start = Number(t.offset) + 32;
      const next = g.tensors.map((u) => Number(u.offset)).filter((o) => o > Number(t.offset));
      const end = Math.min(g.data.length, ...next);
      for (let i = start; i < end; i += 7) g.data[i]! ^= 0x01;
    }
    const otherPath = join(dir, "other-weights.gguf");
    writeFileSync(otherPath, serializeGguf(g));
    const other = await loadModel(otherPath, { threads: 1, contextSize: 64, cacheRam: 0 });
    try {
      const session = model.createSession();
      await session.generate("The river ran", { maxTokens: 4 }).result;
      const state = await session.save();
      const file = join(dir, "from-original.bin");
      await session.save(file);
      const target = other.createSession();
      await expectCode(target.restore(state), "STATE_MODEL_MISMATCH");
      await expectCode(target.restore(file), "STATE_MODEL_MISMATCH");
      expect(target.position).toBe(0);
      // The same file loaded again is the same model.
      const again = await loadModel(path, { threads: 1, contextSize: 64, cacheRam: 0 });
      await again.createSession().restore(file);
      again.dispose();
    } finally {
      other.dispose();
    }
  });
});

describe("a corrupted state file", () => {
  it("is refused for any changed token id, flipped byte or cut, and the session keeps its context", async () => {
    const { file, position, continuation } = await savedSession();
    const intact = readFileSync(file);
    const session = model.createSession();
    await session.generate("Something else entirely", { maxTokens: 2 }).result;
    const before = session.position;
    const refused = new Map<string, number>();
    const attempt = async (bytes: Buffer, what: string) => {
      writeFileSync(file, bytes);
      const error = await session.restore(file).then(
        () => new Error(`${what}: restored`),
        (e: unknown) => e,
      );
      expect(error, what).toBeInstanceOf(BloomeryError);
      const code = (error as BloomeryError).code;
      expect(
        ["STATE_BAD_FILE", "STATE_UNSUPPORTED_VERSION", "STATE_MODEL_MISMATCH", "CONTEXT_TOO_LONG"],
        what,
      ).toContain(code);
      refused.set(code, (refused.get(code) ?? 0) + 1);
      expect(session.position, what).toBe(before);
    };
    for (const at of [0, position >> 1, position - 1]) {
      for (const id of [-1, 393, 8192, 2 ** 31 - 1]) {
        const bytes = Buffer.from(intact);
        bytes.writeInt32LE(id, HEADER_BYTES + 4 * at);
        await attempt(bytes, `token ${at} = ${id}`);
      }
    }
    for (let k = 0; k < 206; k++) {
      const bytes = Buffer.from(intact);
      const at = Math.floor((k * bytes.length) / 206);
      bytes[at]! ^= 0xff;
      await attempt(bytes, `byte ${at} flipped`);
    }
    for (const cut of [0, 10, HEADER_BYTES, intact.length - 1]) await attempt(intact.subarray(0, cut), `cut at ${cut}`);
    expect(refused.get("STATE_BAD_FILE")).toBeGreaterThan(200);

    writeFileSync(file, intact);
    await session.restore(file);
    expect(session.position).toBe(position);
    const tokens = await stateTokens(file, position);
    expect((await session.generate(tokens, { maxTokens: 6 }).result).text).toBe(continuation);
  });
});

describe("what is at a state file's path", () => {
  it("a link is neither written through (to an existing file or a dangling one) nor read through", async () => {
    const { file } = await savedSession();
    const session = model.createSession();
    await session.generate("The river", { maxTokens: 2 }).result;
    const outside = join(dir, "outside.txt");
    writeFileSync(outside, "precious");
    const link = join(dir, "link.bin");
    symlinkSync(outside, link);
    await expectCode(session.save(link), "FILE_WRITE", /symbolic link/);
    expect(readFileSync(outside, "utf8")).toBe("precious");
    const dangling = join(dir, "dangling.bin");
    symlinkSync(join(dir, "created-through-link.bin"), dangling);
    await expectCode(session.save(dangling), "FILE_WRITE", /symbolic link/);
    expect(existsSync(join(dir, "created-through-link.bin"))).toBe(false);
    const toState = join(dir, "to-state.bin");
    symlinkSync(file, toState);
    await expectCode(session.restore(toState), "FILE_READ", /symbolic link/);
  });

  it("a FIFO is refused at once on save and restore (a restore waited for a writer forever)", async () => {
    const fifo = join(dir, "state.fifo");
    execFileSync("mkfifo", [fifo]);
    for (const scenario of ["restore", "save"]) {
      const end = await runScenario(scenario, [path, fifo]);
      expect(end.timedOut, `${scenario} of a FIFO`).toBe(false);
      expect(end.result?.outcome, end.stderr).toBe(scenario === "save" ? "FILE_WRITE" : "FILE_READ");
    }
  });
});
