// bloomery-serve's web page in a real browser (Debian's chromium, driven by playwright-core): the page loads, a
// question streams an answer, and the live view draws the offload plan's layers. .ci/run installs chromium, so CI
// runs it; elsewhere it skips, saying so, only when no chromium binary exists (BLOOMERY_CHROMIUM names another).
import { existsSync } from "node:fs";
import { chromium, type Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApp } from "../examples/server/app.js";
import { Slots } from "../examples/server/slots.js";
import { loadModel } from "../src/index.js";
import { defaultModelPath } from "../tools/default-model.js";
import { startServer, type TestServer } from "./server-helpers.js";

const CANDIDATES = [process.env.BLOOMERY_CHROMIUM, "/usr/bin/chromium", "/usr/bin/chromium-browser"];
const executable = CANDIDATES.find((path): path is string => !!path && existsSync(path));
if (!executable) console.warn(`webui.test.ts: skipped: no chromium at ${CANDIDATES.filter(Boolean).join(", ")}`);

describe.skipIf(!executable)("the web page in chromium", () => {
  let server: TestServer;
  let browser: Browser;

  beforeAll(async () => {
    server = await startServer();
    // Root in CI containers: chromium's sandbox needs user namespaces it may not have.
    browser = await chromium.launch({ executablePath: executable!, args: ["--no-sandbox"], headless: true });
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await server?.close();
  });

  it("loads, streams an answer to a question, and shows the plan's layers", async () => {
    const started = performance.now();
    const page = await browser.newPage();
    const errors: string[] = [];
    page.on("pageerror", (error) => errors.push(error.message));
    await page.goto(server.url);
    await expect.poll(() => page.textContent("#model-name"), { timeout: 10_000 }).toBe("tiny");

    // Count the answer text's updates as they land: a streamed answer grows in several steps, not one.
    await page.evaluate(`
      window.updates = 0;
      new MutationObserver((records) => {
        for (const record of records) {
          const node = record.target.nodeType === Node.TEXT_NODE ? record.target.parentElement : record.target;
          if (node.closest(".message.assistant .content")) window.updates += 1;
        }
      }).observe(document.querySelector("#messages"), {
        subtree: true,
        childList: true,
        characterData: true,
      });
    `);
    await page.click('nav button[data-tab="settings"]');
    await page.fill("#settings-form [name=temperature]", "0");
    await page.click('nav button[data-tab="chat"]');
    await page.fill("#question", "What is a river?");
    await page.press("#question", "Enter");
    const answer = page.locator('.message.assistant[data-state="done"] .content');
    await answer.waitFor({ timeout: 60_000 });
    const text = (await answer.textContent()) ?? "";
    expect(text.trim().length).toBeGreaterThan(0);
    expect(await page.locator(".message.assistant .error").count()).toBe(0);
    expect(await page.evaluate("window.updates")).toBeGreaterThan(3);

    await page.click('nav button[data-tab="where"]');
    const { layers, experts } = server.model.info;
    const rows = page.locator("#plan g.layer");
    await expect.poll(() => rows.count(), { timeout: 10_000 }).toBe(layers);
    expect(await rows.first().locator("rect").count()).toBe(experts);
    // On the CPU every expert is in host RAM.
    expect(await page.locator('#plan rect[data-tier="host"]').count()).toBe(layers * experts);
    // The answer's tokens show in the tokens-per-second plot once two polls bracket them.
    await expect
      .poll(() => page.locator('#plot-speed path[data-series="decode"]').count(), { timeout: 10_000 })
      .toBe(1);
    expect(errors).toEqual([]);
    console.log(`webui: page, answer and plan in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  }, 90_000);
});

describe("the web page's routes", () => {
  it("serves / without the API key while the live data needs it, and nothing with --no-webui", async () => {
    const config = { modelPath: "m.gguf", apiKeys: ["k"], metrics: false, temperature: 0.8 };
    const on = createApp(config);
    const page = await on.app.inject({ url: "/" });
    expect(page.statusCode).toBe(200);
    expect(page.headers["content-type"]).toMatch(/text\/html/);
    expect(page.body).toContain('src="/webui/app.js"');
    for (const asset of ["/webui/app.js", "/webui/plots.js", "/webui/style.css"])
      expect((await on.app.inject({ url: asset })).statusCode).toBe(200);
    expect((await on.app.inject({ url: "/webui/live" })).statusCode).toBe(401);
    await on.app.close();

    const model = await loadModel(defaultModelPath(), { threads: 1 });
    const off = createApp({ ...config, apiKeys: [] }, { webui: false });
    off.context.serve(new Slots(model, 1));
    expect((await off.app.inject({ url: "/" })).statusCode).toBe(404);
    expect((await off.app.inject({ url: "/webui/live" })).statusCode).toBe(404);
    expect((await off.app.inject({ url: "/health" })).statusCode).toBe(200);
    await off.app.close();
    model.dispose();
  });
});
