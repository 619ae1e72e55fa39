// downloadModel (the SDK's, which bloomery-serve's -hf uses: server-hf.test.ts covers the hub's listing and a hostile
// endpoint) against a loopback stand-in hub: progress events, an abort and the resume after it, a URL's sha256
// (x-linked-etag), split models from a URL, and loadModel given a user/repo:quant reference.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { beforeEach, describe, expect, it } from "vitest";
import { BloomeryError, downloadModel, loadModel, type DownloadProgress } from "../src/index.js";
import { useStandInHub } from "./hub-standin.js";

const REPO = "test-org/tiny-moe";
const fixture = useStandInHub(REPO);
const { hub } = fixture;
let cacheDir: string;

beforeEach(() => {
  hub.reset(
    new Map([
      ["tiny-moe-Q4_K_M.gguf", fixture.model],
      ["Q6_K/tiny-moe-Q6_K-00001-of-00002.gguf", fixture.model],
      ["Q6_K/tiny-moe-Q6_K-00002-of-00002.gguf", fixture.other],
    ]),
  );
  cacheDir = fixture.newCacheDir();
});

/** Every file under the cache folder, by its path inside it. */
function cached(): string[] {
  return readdirSync(cacheDir, { recursive: true, encoding: "utf8" })
    .filter((path) => statSync(join(cacheDir, path)).isFile())
    .sort();
}

describe("downloadModel", () => {
  it("reports each file's bytes as they come, up to its size", async () => {
    const events: DownloadProgress[] = [];
    const path = await downloadModel(`${REPO}:Q6_K`, {
      endpoint: hub.endpoint,
      cacheDir,
      onProgress: (p) => events.push({ ...p }),
    });
    expect(readFileSync(path).equals(fixture.model)).toBe(true);
    for (const [part, bytes] of [
      [1, fixture.model],
      [2, fixture.other],
    ] as const) {
      const mine = events.filter((e) => e.part === part);
      expect(mine.length).toBeGreaterThan(1);
      expect(mine.every((e) => e.parts === 2 && e.totalBytes === bytes.length)).toBe(true);
      expect(mine[0]!.bytes).toBe(0);
      expect(mine.at(-1)!.bytes).toBe(bytes.length);
      expect(mine.every((e, i) => i === 0 || e.bytes >= mine[i - 1]!.bytes)).toBe(true);
      expect(mine[0]!.file).toBe(`Q6_K/tiny-moe-Q6_K-0000${part}-of-00002.gguf`);
    }
  });

  it("stops at an abort, keeping only a partial file, and resumes from it with a Range request", async () => {
    const cut = 64 * 1024;
    hub.stallAfter = cut;
    const stop = new AbortController();
    const first = downloadModel(REPO, {
      endpoint: hub.endpoint,
      cacheDir,
      signal: stop.signal,
      onProgress: (p) => p.bytes >= cut && stop.abort(),
    });
    await expect(first).rejects.toMatchObject({ name: "BloomeryError", code: "ABORTED" });
    // Nothing counts as downloaded: no model file, no manifest; the partial file holds what came.
    expect(cached()).toEqual(["test-org_tiny-moe/tiny-moe-Q4_K_M.gguf.partial"]);
    expect(statSync(join(cacheDir, cached()[0]!)).size).toBe(cut);

    hub.stallAfter = undefined;
    hub.requests = [];
    const events: DownloadProgress[] = [];
    const path = await downloadModel(REPO, { endpoint: hub.endpoint, cacheDir, onProgress: (p) => events.push(p) });
    expect(hub.downloads().map((r) => r.headers.range)).toEqual([`bytes=${cut}-`]);
    expect(events[0]!.bytes).toBe(cut);
    expect(readFileSync(path).equals(fixture.model)).toBe(true);
    expect(cached()).toEqual(["test-org_tiny-moe/.manifest-Q4_K_M.json", "test-org_tiny-moe/tiny-moe-Q4_K_M.gguf"]);
  });

  it("refuses a URL's download whose sha256 is not its x-linked-etag, leaving nothing in the cache", async () => {
    hub.corrupt = true;
    const error = await downloadModel(`${hub.endpoint}/files/tiny-moe-Q4_K_M.gguf`, { cacheDir }).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(BloomeryError);
    expect(error).toMatchObject({
      code: "HUB_CHECKSUM",
      message: expect.stringMatching(/tiny-moe-Q4_K_M\.gguf: the download does not match .*sha256:/),
    });
    expect(cached()).toEqual([]);
    hub.corrupt = false;
    const path = await downloadModel(`${hub.endpoint}/files/tiny-moe-Q4_K_M.gguf`, { cacheDir });
    expect(path).toBe(join(cacheDir, "tiny-moe-Q4_K_M.gguf"));
    expect(readFileSync(path).equals(fixture.model)).toBe(true);
  });

  it("downloads every part of a split model from the URL of its first, then reads them from the cache", async () => {
    const url = `${hub.endpoint}/files/tiny-moe-Q6_K-00001-of-00002.gguf`;
    const path = await downloadModel(url, { cacheDir });
    expect(readFileSync(path).equals(fixture.model)).toBe(true);
    expect(readFileSync(path.replace("00001-of", "00002-of")).equals(fixture.other)).toBe(true);
    expect(hub.downloads().map((r) => r.url)).toEqual([
      "/files/tiny-moe-Q6_K-00001-of-00002.gguf",
      "/files/tiny-moe-Q6_K-00002-of-00002.gguf",
    ]);
    hub.requests = [];
    expect(await downloadModel(url, { cacheDir })).toBe(path);
    expect(hub.requests).toEqual([]);
  });

  it("reads a hub resolve URL as its repo and file, checked against the listing", async () => {
    const path = await downloadModel(`${hub.endpoint}/${REPO}/resolve/main/tiny-moe-Q4_K_M.gguf`, {
      endpoint: hub.endpoint,
      cacheDir,
    });
    expect(path).toBe(join(cacheDir, "test-org_tiny-moe", "tiny-moe-Q4_K_M.gguf"));
    expect(hub.requests.map((r) => r.url)).toEqual([
      `/api/models/${REPO}/tree/main?recursive=true`,
      `/${REPO}/resolve/main/tiny-moe-Q4_K_M.gguf`,
    ]);
  });

  it("refuses offline what the cache lacks, and bad arguments by name", async () => {
    await expect(downloadModel(REPO, { endpoint: hub.endpoint, cacheDir, offline: true })).rejects.toMatchObject({
      code: "HUB_OFFLINE",
    });
    await expect(downloadModel(REPO, { cacheDir, retries: 3 } as never)).rejects.toMatchObject({
      code: "INVALID_ARGUMENT",
      message: expect.stringMatching(/retries/),
    });
    expect(hub.requests).toEqual([]);
  });
});

describe("loadModel with a reference", () => {
  it("downloads user/repo:quant through downloadModel and loads it", async () => {
    const events: DownloadProgress[] = [];
    const loaded = await loadModel(`${REPO}:Q4_K_M`, {
      download: { endpoint: hub.endpoint, cacheDir, onProgress: (p) => events.push(p) },
    });
    try {
      expect(loaded.info.architecture).toBe("qwen3moe");
      expect(events.at(-1)).toMatchObject({ bytes: fixture.model.length, totalBytes: fixture.model.length });
      expect(existsSync(join(cacheDir, "test-org_tiny-moe", "tiny-moe-Q4_K_M.gguf"))).toBe(true);
    } finally {
      loaded.dispose();
    }
    // A path that names no file is not a reference when it ends in .gguf: FILE_NOT_FOUND, no request.
    hub.requests = [];
    await expect(loadModel("test-org/missing.gguf")).rejects.toMatchObject({ code: "FILE_NOT_FOUND" });
    expect(hub.requests).toEqual([]);
  });
});
