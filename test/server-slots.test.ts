import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServer, type TestServer } from "./server-helpers.js";

// llama-server's slot endpoints: a slot's context saved to --slot-save-path, erased, and restored,
// so that a completion after the restore continues exactly as it did before the erase.
describe("bloomery-serve /slots", () => {
  let server: TestServer;
  const folder = mkdtempSync(join(tmpdir(), "bloomery-slots-"));

  beforeAll(async () => {
    server = await startServer({ parallel: 1, config: { slotSavePath: folder } });
  });

  afterAll(async () => {
    await server?.close();
    rmSync(folder, { recursive: true, force: true });
  });

  const post = (path: string, body: unknown = {}) =>
    fetch(`${server.url}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
  const slots = async () => (await (await fetch(`${server.url}/slots`)).json()) as Record<string, unknown>[];
  const complete = async (prompt: string) => {
    const response = await post("/completion", { prompt, n_predict: 8, temperature: 0 });
    return (await response.json()) as { content: string; timings: { cache_n: number; prompt_n: number } };
  };

  it("saves, erases and restores a slot's context; the restored prefix is reused", async () => {
    const prompt = "The river ran past the old mill and the quiet town";
    const first = await complete(prompt);
    const held = (await slots())[0]!;
    expect(held).toMatchObject({ id: 0, is_processing: false });
    expect(held.n_past).toBeGreaterThan(8);

    const saved = await post("/slots/0?action=save", { filename: "river.bin" });
    expect(saved.status).toBe(200);
    expect(await saved.json()).toMatchObject({ id_slot: 0, filename: "river.bin", n_saved: held.n_past });

    const erased = await post("/slots/0?action=erase");
    expect(await erased.json()).toEqual({ id_slot: 0, n_erased: held.n_past });
    expect((await slots())[0]!.n_past).toBe(0);

    const restored = await post("/slots/0?action=restore", { filename: "river.bin" });
    expect(await restored.json()).toMatchObject({ id_slot: 0, filename: "river.bin", n_restored: held.n_past });

    const again = await complete(prompt);
    expect(again.content).toBe(first.content);
    expect(again.timings.cache_n).toBeGreaterThan(0);
  });

  it("evaluates the whole prompt when cache_prompt is false", async () => {
    const prompt = "A heron stood in the shallows at the edge of the reeds";
    await complete(prompt);
    const reused = await complete(prompt);
    expect(reused.timings.cache_n).toBeGreaterThan(0);
    const response = await post("/completion", { prompt, n_predict: 8, temperature: 0, cache_prompt: false });
    const whole = (await response.json()) as { content: string; timings: { cache_n: number; prompt_n: number } };
    expect(whole.timings.cache_n).toBe(0);
    expect(whole.timings.prompt_n).toBe(reused.timings.cache_n + reused.timings.prompt_n);
    const chat = async (fields: Record<string, unknown> = {}) => {
      const body = { messages: [{ role: "user", content: prompt }], max_tokens: 4, temperature: 0, ...fields };
      const reply = (await (await post("/v1/chat/completions", body)).json()) as {
        usage: { prompt_tokens_details: { cached_tokens: number } };
      };
      return reply.usage.prompt_tokens_details.cached_tokens;
    };
    await chat();
    expect(await chat()).toBeGreaterThan(0);
    expect(await chat({ cache_prompt: false })).toBe(0);
  });

  it("neither follows a link in the save folder nor waits on a FIFO there", async () => {
    const outside = mkdtempSync(join(tmpdir(), "bloomery-slots-outside-"));
    try {
      await complete("The river ran past the mill");
      const target = join(outside, "precious.txt");
      writeFileSync(target, "precious");
      symlinkSync(target, join(folder, "link.bin"));
      symlinkSync(join(outside, "created.bin"), join(folder, "dangling.bin"));
      execFileSync("mkfifo", [join(folder, "fifo.bin")]);
      const answer = async (action: string, filename: string) => {
        const response = await fetch(`${server.url}/slots/0?action=${action}`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ filename }),
          signal: AbortSignal.timeout(15_000),
        });
        return { status: response.status, text: JSON.stringify(await response.json()) };
      };
      for (const filename of ["link.bin", "dangling.bin", "fifo.bin"]) {
        const saved = await answer("save", filename);
        expect(saved.status, filename).toBe(500);
        expect(saved.text).toMatch(/FILE_WRITE/);
      }
      expect(readFileSync(target, "utf8")).toBe("precious");
      expect(existsSync(join(outside, "created.bin"))).toBe(false);
      for (const filename of ["link.bin", "fifo.bin"]) {
        const restored = await answer("restore", filename);
        expect(restored.status, filename).toBe(500);
        expect(restored.text).toMatch(/FILE_READ/);
      }
      // The slot was never held: it saves and restores a plain file as before.
      expect((await answer("save", "plain.bin")).status).toBe(200);
      expect((await answer("restore", "plain.bin")).status).toBe(200);
    } finally {
      rmSync(outside, { recursive: true, force: true });
    }
  });

  it("refuses by name: an unknown action, a path as file name, a missing slot or file", async () => {
    expect((await post("/slots/0?action=explode")).status).toBe(400);
    const escape = await post("/slots/0?action=save", { filename: "../outside.bin" });
    expect(escape.status).toBe(400);
    expect(JSON.stringify(await escape.json())).toMatch(/plain file name/);
    expect((await post("/slots/7?action=erase")).status).toBe(404);
    expect((await post("/slots/0?action=restore", { filename: "never-saved.bin" })).status).toBe(404);
    expect((await post("/slots/0?action=save", { filename: "x.bin", extra: 1 })).status).toBe(400);
  });
});

describe("bloomery-serve id_slot", () => {
  let server: TestServer;

  beforeAll(async () => {
    server = await startServer({ parallel: 2 });
  });

  afterAll(async () => {
    await server?.close();
  });

  const complete = (body: Record<string, unknown>) =>
    fetch(`${server.url}/completion`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ prompt: "A quiet town by the river", n_predict: 4, temperature: 0, ...body }),
    });

  it("runs a request on the slot it names, and refuses a slot that does not exist", async () => {
    const response = await complete({ id_slot: 1 });
    expect(response.status).toBe(200);
    expect(((await response.json()) as { id_slot: number }).id_slot).toBe(1);
    const slots = (await (await fetch(`${server.url}/slots`)).json()) as { id: number; n_past: number }[];
    expect(slots.find((s) => s.id === 1)!.n_past).toBeGreaterThan(4);
    expect(slots.find((s) => s.id === 0)!.n_past).toBe(0);

    const refused = await complete({ id_slot: 2 });
    expect(refused.status).toBe(400);
    expect(JSON.stringify(await refused.json())).toMatch(/id_slot/);
  });
});
