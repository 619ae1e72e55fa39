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

/** state.cc's checksum: a word hash fed the header (checksum 0), then each block of the payload in turn. */
function stateChecksum(header: Buffer, blocks: Buffer[]): bigint {
  const mask = (1n << 64n) - 1n;
  let state = 0x2545f4914f6cdd1dn;
  const mix = (word: bigint) => {
    state ^= (word * 0x9e3779b97f4a7c15n) & mask;
    state = ((((state << 31n) | (state >> 33n)) & mask) * 0xbf58476d1ce4e5b9n) & mask;
  };
  for (const block of [header, ...blocks]) {
    let at = 0;
    for (; at + 8 <= block.length; at += 8) mix(block.readBigUInt64LE(at));
    const tail = block.length - at;
    if (tail > 0) {
      const rest = Buffer.alloc(8);
      block.copy(rest, 0, at);
      mix(rest.readBigUInt64LE(0) ^ (BigInt(tail) << 56n));
    }
  }
  let h = state ^ (state >> 33n);
  h = (h * 0xff51afd7ed558ccdn) & mask;
  return h ^ (h >> 33n);
}

/** A state file of `tokens` tokens (ids 0) whose every layer holds every position, under `header`'s model. */
function forgedState(header: Buffer, tokens: number): Buffer {
  const head = Buffer.from(header.subarray(0, HEADER_BYTES));
  const layers = Number(head.readBigUInt64LE(24));
  const keyWidth = Number(head.readBigUInt64LE(32));
  const valueWidth = Number(head.readBigUInt64LE(40));
  head.writeBigUInt64LE(BigInt(tokens), 48); // tokens
  head.writeBigUInt64LE(0n, 64); // window_first
  head.writeBigUInt64LE(BigInt(tokens), 72); // shifted_from: none
  head.writeBigUInt64LE(0n, 80); // checksum
  const ids = Buffer.alloc(4 * tokens);
  const keys = Buffer.alloc(2 * layers * tokens * keyWidth);
  const values = Buffer.alloc(2 * layers * tokens * valueWidth);
  head.writeBigUInt64LE(stateChecksum(head, [ids, keys, values]), 80);
  return Buffer.concat([head, ids, keys, values]);
}

describe("a state whose sliding-window layers hold more positions than the session's", () => {
  it("is refused by name (it overran the windowed layers' cache), and one that fits restores", async () => {
    const ossPath = join(dir, "tiny-gpt-oss.gguf");
    await writeSyntheticModel(ossPath, { preset: "tiny-gpt-oss", weightType: "Q8_0" });
    // A context of 1,024: a windowed layer (window 32) holds 32 + 64 + 256 = 352 rows on the CPU.
    const oss = await loadModel(ossPath, { threads: 1, contextSize: 1024, cacheRam: 0 });
    try {
      const session = oss.createSession();
      await session.evaluate(Array.from({ length: 40 }, (_, i) => (i * 7919 + 13) % oss.info.vocabSize));
      const saved = join(dir, "oss-saved.bin");
      await session.save(saved);
      const header = readFileSync(saved);
      const file = join(dir, "oss-forged.bin");
      writeFileSync(file, forgedState(header, 352));
      await session.restore(file);
      expect(session.position).toBe(352);
      writeFileSync(file, forgedState(header, 400));
      await expectCode(session.restore(file), "STATE_MODEL_MISMATCH", /sliding-window layers hold 400 positions/);
      expect(session.position).toBe(352);
    } finally {
      oss.dispose();
    }
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
