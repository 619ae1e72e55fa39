// bloomery-serve's -hf (the SDK's downloadModel) against a loopback stand-in for the Hugging Face hub: the tree API, resumable
// downloads with HTTP Range, checksum checks, the cache, and quant picking; and against a hostile one
// (issue 17, finding 6) whose listing and downloads lie.
import { existsSync, mkdirSync, readFileSync, statfsSync, writeFileSync } from "node:fs";
import type { ServerResponse } from "node:http";
import { join } from "node:path";
import { beforeEach, describe, expect, it } from "vitest";
import { MAX_FILE_BYTES } from "../src/download/hub.js";
import { parseServeOptions, UsageError } from "../examples/server/options.js";
import { BloomeryError, downloadModel, readGgufInfo, type DownloadModelOptions } from "../src/index.js";
import { sha256, useStandInHub } from "./hub-standin.js";
import { exitWithin, spawnServe } from "./server-helpers.js";

const REPO = "test-org/tiny-moe";
const fixture = useStandInHub(REPO);
const { hub } = fixture;

let cacheDir: string;
beforeEach(() => {
  hub.reset(
    new Map([
      ["tiny-moe-Q4_K_M.gguf", fixture.model],
      ["tiny-moe-Q8_0.gguf", fixture.other],
    ]),
  );
  cacheDir = fixture.newCacheDir();
});

/** -hf's download: the SDK's downloadModel, from the stand-in hub into this test's cache. */
function fetchHubModel(reference: string, extra: DownloadModelOptions = {}): Promise<string> {
  return downloadModel(reference, { endpoint: hub.endpoint, cacheDir, ...extra });
}

const downloads = () => hub.downloads();

describe("-hf downloads", () => {
  it("picks the file by quant (Q4_K_M by default, any case), downloads it and sends the token", async () => {
    const path = await fetchHubModel(REPO, { token: "secret" });
    expect(path).toBe(join(cacheDir, "test-org_tiny-moe", "tiny-moe-Q4_K_M.gguf"));
    expect(readFileSync(path).equals(fixture.model)).toBe(true);
    expect((await readGgufInfo(path)).summary.architecture).toBe("qwen3moe");
    expect(hub.requests.map((r) => r.headers.authorization)).toEqual(["Bearer secret", "Bearer secret"]);

    const q8 = await fetchHubModel(`${REPO}:q8_0`);
    expect(readFileSync(q8).equals(fixture.other)).toBe(true);
    expect(existsSync(`${q8}.partial`)).toBe(false);
  });

  it("resumes a partial download with a Range request", async () => {
    const target = join(cacheDir, "test-org_tiny-moe", "tiny-moe-Q4_K_M.gguf");
    mkdirSync(join(cacheDir, "test-org_tiny-moe"));
    const have = fixture.model.length >> 1;
    writeFileSync(`${target}.partial`, fixture.model.subarray(0, have));
    const path = await fetchHubModel(REPO);
    expect(downloads().map((r) => r.headers.range)).toEqual([`bytes=${have}-`]);
    expect(readFileSync(path).equals(fixture.model)).toBe(true);
  });

  it("starts over when the hub answers a Range request with the whole file", async () => {
    const target = join(cacheDir, "test-org_tiny-moe", "tiny-moe-Q4_K_M.gguf");
    mkdirSync(join(cacheDir, "test-org_tiny-moe"));
    writeFileSync(`${target}.partial`, Buffer.alloc(100, 0xaa));
    hub.ignoreRange = true;
    const path = await fetchHubModel(REPO);
    expect(downloads().map((r) => r.headers.range)).toEqual(["bytes=100-"]);
    expect(readFileSync(path).equals(fixture.model)).toBe(true);
  });

  it("refuses a download whose checksum does not match and leaves no file", async () => {
    hub.corrupt = true;
    await expect(fetchHubModel(REPO)).rejects.toThrow(/tiny-moe-Q4_K_M\.gguf: the download does not match.*sha256/);
    const target = join(cacheDir, "test-org_tiny-moe", "tiny-moe-Q4_K_M.gguf");
    expect(existsSync(target)).toBe(false);
    expect(existsSync(`${target}.partial`)).toBe(false);
  });

  it("reuses the cached file without a request", async () => {
    const first = await fetchHubModel(REPO);
    hub.requests = [];
    expect(await fetchHubModel(REPO)).toBe(first);
    expect(hub.requests).toEqual([]);
  });

  it("downloads every part of a split model and answers the first", async () => {
    hub.files.set("Q6_K/tiny-moe-Q6_K-00002-of-00002.gguf", fixture.other);
    hub.files.set("Q6_K/tiny-moe-Q6_K-00001-of-00002.gguf", fixture.model);
    const path = await fetchHubModel(`${REPO}:Q6_K`);
    expect(path).toBe(join(cacheDir, "test-org_tiny-moe", "Q6_K", "tiny-moe-Q6_K-00001-of-00002.gguf"));
    expect(readFileSync(path).equals(fixture.model)).toBe(true);
    expect(readFileSync(path.replace("00001-of", "00002-of")).equals(fixture.other)).toBe(true);
  });

  it("serves the file --hf-file names", async () => {
    const path = await fetchHubModel(REPO, { file: "tiny-moe-Q8_0.gguf" });
    expect(readFileSync(path).equals(fixture.other)).toBe(true);
    await expect(fetchHubModel(REPO, { file: "nope.gguf" })).rejects.toThrow(
      /test-org\/tiny-moe has no file nope\.gguf; its GGUF files: tiny-moe-Q4_K_M\.gguf, tiny-moe-Q8_0\.gguf/,
    );
  });

  it("refuses an unknown or ambiguous quant by name, listing the files", async () => {
    await expect(fetchHubModel(`${REPO}:Q2_K`)).rejects.toThrow(
      /test-org\/tiny-moe has no GGUF file for quant Q2_K; its GGUF files: tiny-moe-Q4_K_M\.gguf, tiny-moe-Q8_0\.gguf/,
    );
    hub.files.set("tiny-moe-Q4_K_S.gguf", fixture.other);
    await expect(fetchHubModel(`${REPO}:Q4_K`)).rejects.toThrow(
      /quant Q4_K is ambiguous, it names tiny-moe-Q4_K_M\.gguf, tiny-moe-Q4_K_S\.gguf/,
    );
    expect(downloads()).toEqual([]);
  });

  it("names the repo and the HTTP status of a failed request", async () => {
    const error = await fetchHubModel("test-org/missing").catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BloomeryError);
    expect((error as Error).message).toMatch(/^test-org\/missing: listing its files answered HTTP 404/);
    await expect(fetchHubModel("not-a-repo")).rejects.toThrow(/a model on the hub is <user>\/<model>\[:quant\]/);
  });
});

describe("-hf flags", () => {
  it("reads -hf, --hf-file and --hf-token from flags and their variables", () => {
    expect(parseServeOptions(["-hf", `${REPO}:Q8_0`, "--hf-file", "x.gguf", "--hf-token", "t"])).toMatchObject({
      hfRepo: `${REPO}:Q8_0`,
      hfFile: "x.gguf",
      hfToken: "t",
    });
    expect(
      parseServeOptions([], { LLAMA_ARG_HF_REPO: REPO, LLAMA_ARG_HF_FILE: "y.gguf", HF_TOKEN: "env" }),
    ).toMatchObject({ hfRepo: REPO, hfFile: "y.gguf", hfToken: "env" });
  });

  it("refuses -m with -hf, and --hf-file without -hf", () => {
    expect(() => parseServeOptions(["-m", "a.gguf", "--hf-repo", REPO])).toThrow(UsageError);
    expect(() => parseServeOptions(["-m", "a.gguf", "--hf-repo", REPO])).toThrow(/-m and -hf/);
    expect(() => parseServeOptions(["--hf-file", "x.gguf"])).toThrow(/--hf-file needs -hf/);
  });
});

describe("a hostile HF_ENDPOINT (finding 6)", () => {
  const LISTING = `/api/models/${REPO}/tree/main`;
  const FILE = "tiny-moe-Q4_K_M.gguf";
  const MB = 1024 * 1024;
  const target = () => join(cacheDir, "test-org_tiny-moe", FILE);

  /** A listing of one file, `entry` overriding its fields. */
  function listing(entry: Record<string, unknown>): string {
    return JSON.stringify([
      { type: "file", path: FILE, size: 1000, oid: "1".repeat(40), lfs: { oid: sha256(Buffer.alloc(1000)) }, ...entry },
    ]);
  }

  /**
   * Streams `total` bytes (1 MiB at a time, as fast as the client takes them) and resolves, once the connection is
   * over, with the bytes it managed to send.
   */
  function flood(res: ServerResponse, total: number, head: () => void): Promise<number> {
    const chunk = Buffer.alloc(MB, 0x20);
    let sent = 0;
    const over = new Promise<number>((resolve) => res.once("close", () => resolve(sent)));
    head();
    const pump = () => {
      while (sent < total && !res.destroyed) {
        sent += chunk.length;
        if (!res.write(chunk)) return void res.once("drain", pump);
      }
      if (!res.destroyed) res.end();
    };
    pump();
    return over;
  }

  /** The hub answers the listing with `body` and the file with `download` (when given). */
  function hostile(body: string | ((res: ServerResponse) => void), download?: (res: ServerResponse) => void): void {
    hub.hostile = (url, res) => {
      if (url.pathname === LISTING) {
        if (typeof body === "string") res.writeHead(200, { "content-type": "application/json" }).end(body);
        else body(res);
        return true;
      }
      if (download && url.pathname.endsWith(FILE)) return (download(res), true);
      return false;
    };
  }

  it("stops a download at the size the listing gave and removes the partial file, not after 200 MB", async () => {
    let floodSent: Promise<number> | undefined;
    hostile(listing({}), (res) => (floodSent = flood(res, 200 * MB, () => res.writeHead(200))));
    const started = performance.now();
    const error = await fetchHubModel(REPO).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BloomeryError);
    expect(error).toMatchObject({
      code: "HUB_DOWNLOAD_SIZE",
      message: expect.stringMatching(/tiny-moe-Q4_K_M\.gguf: the download ran past the 1000 bytes the listing gives/),
    });
    expect(existsSync(target())).toBe(false);
    expect(existsSync(`${target()}.partial`)).toBe(false);
    // The client stopped reading at once: the hub got rid of a few socket buffers' worth, not the 200 MB.
    const sent = await floodSent!;
    console.log(`hostile hub: sent ${(sent / MB).toFixed(0)} MiB of 200 before the client cut it`);
    expect(sent).toBeLessThan(64 * MB);
    expect(performance.now() - started).toBeLessThan(10_000);
  });

  it("refuses a download whose Content-Length disagrees with the listing before writing it", async () => {
    hostile(listing({}), (res) => res.writeHead(200, { "content-length": String(2000) }).end(Buffer.alloc(2000)));
    await expect(fetchHubModel(REPO)).rejects.toMatchObject({
      code: "HUB_DOWNLOAD_SIZE",
      message: expect.stringMatching(/the download is 2000 bytes, where the listing says 1000/),
    });
    expect(existsSync(`${target()}.partial`)).toBe(false);
  });

  it("keeps a download that broke off, to resume it, and says so", async () => {
    hostile(listing({}), (res) => {
      res.writeHead(200, { "content-length": "1000" });
      res.write(Buffer.alloc(400));
      setTimeout(() => res.destroy(), 50);
    });
    await expect(fetchHubModel(REPO)).rejects.toMatchObject({
      code: "HUB_DOWNLOAD_BROKEN",
      message: expect.stringMatching(/broke off .*run again to resume it/),
    });
    expect(readFileSync(`${target()}.partial`).length).toBe(400);
    // The next run resumes it from the real hub's bytes: the listing's checksum decides.
    hostile(listing({}), (res) => res.writeHead(206, { "content-range": "bytes 400-999/1000" }).end(Buffer.alloc(600)));
    const path = await fetchHubModel(REPO);
    expect(readFileSync(path).equals(Buffer.alloc(1000))).toBe(true);
  });

  const BAD_LISTINGS: { case: string; body: string; says: RegExp }[] = [
    { case: "HTML instead of JSON", body: "<html>rate limited</html>", says: /is not JSON/ },
    { case: "an object", body: '{"error":"no"}', says: /is not an array of files/ },
    { case: "a negative size", body: listing({ size: -5 }), says: /with a size of -5, not a byte count/ },
    { case: "a fractional size", body: listing({ size: 10.5 }), says: /with a size of 10\.5/ },
    { case: "a size in text", body: listing({ size: "1000" }), says: /with a size of "1000"/ },
    {
      case: "a size past the hub's largest file",
      body: listing({ size: 1e15 }),
      says: /with a size of 1000000000000000/,
    },
    { case: "no size", body: listing({ size: undefined }), says: /with a size of undefined/ },
    {
      case: "a checksum that is not hex",
      body: listing({ lfs: { oid: "../../x" } }),
      says: /not a sha256 or git blob id/,
    },
    { case: "no checksum", body: listing({ lfs: undefined, oid: undefined }), says: /without a checksum/ },
    { case: "a path out of the cache", body: listing({ path: "../../escape-Q4_K_M.gguf" }), says: /cannot hold/ },
    { case: "a path with a control byte", body: listing({ path: "a\u0000-Q4_K_M.gguf" }), says: /cannot hold/ },
  ];

  it.each(BAD_LISTINGS)("refuses a listing with $case by name, downloading nothing", async ({ body, says }) => {
    hostile(body);
    const error = await fetchHubModel(REPO).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BloomeryError);
    expect(error).toMatchObject({ code: "HUB_BAD_LISTING", message: expect.stringMatching(says) });
    expect(downloads()).toEqual([]);
  });

  it("stops reading a listing past 32 MiB", async () => {
    let floodSent: Promise<number> | undefined;
    hostile((res) => (floodSent = flood(res, 200 * MB, () => res.writeHead(200))));
    await expect(fetchHubModel(REPO)).rejects.toMatchObject({
      code: "HUB_BAD_LISTING",
      message: expect.stringMatching(/is larger than 33554432 bytes/),
    });
    expect(await floodSent!).toBeLessThan(96 * MB);
  });

  it("ignores a cache manifest that is not one and downloads again", async () => {
    const folder = join(cacheDir, "test-org_tiny-moe");
    mkdirSync(folder);
    writeFileSync(join(folder, ".manifest-Q4_K_M.json"), JSON.stringify({ files: [{ path: "../x", size: -1 }] }));
    const path = await fetchHubModel(REPO);
    expect(readFileSync(path).equals(fixture.model)).toBe(true);
  });

  it("refuses a download the cache's disk has no room for", async () => {
    const { bavail, bsize } = statfsSync(cacheDir);
    // A split model of parts as large as the hub allows, together more than the disk has free.
    const parts = Math.floor((bavail * bsize) / MAX_FILE_BYTES) + 2;
    const name = (i: number) =>
      `tiny-moe-Q4_K_M-${String(i).padStart(5, "0")}-of-${String(parts).padStart(5, "0")}.gguf`;
    const entries = Array.from({ length: parts }, (_, i) => ({
      type: "file",
      path: name(i + 1),
      size: MAX_FILE_BYTES,
      lfs: { oid: "0".repeat(64) },
    }));
    hostile(JSON.stringify(entries));
    await expect(fetchHubModel(REPO)).rejects.toMatchObject({
      code: "HUB_NO_SPACE",
      message: expect.stringMatching(new RegExp(`the download needs ${parts * MAX_FILE_BYTES} bytes and the disk`)),
    });
    expect(downloads()).toEqual([]);
  });

  it.each([
    { case: "a listing that is not JSON", body: "not json", says: /^bloomery-serve: HUB_BAD_LISTING: .*is not JSON/ },
    {
      case: "a negative size",
      body: listing({ size: -1 }),
      says: /^bloomery-serve: HUB_BAD_LISTING: the hub lists tiny-moe-Q4_K_M\.gguf with a size of -1/,
    },
  ])(
    "bloomery-serve -hf against $case exits with one line naming it, no stack trace",
    async ({ body, says }) => {
      hostile(body);
      const server = spawnServe(["-hf", REPO, "--port", "0"], { HF_ENDPOINT: hub.endpoint, LLAMA_CACHE: cacheDir });
      try {
        const exit = await exitWithin(server, 20_000);
        expect(exit, `still running: ${server.stderr()}`).toBeDefined();
        expect(exit!.code).toBe(1);
        expect(server.stderr()).toMatch(says);
        expect(server.stderr().trim().split("\n")).toHaveLength(1);
        expect(server.stderr()).not.toMatch(/^\s+at /m);
      } finally {
        await server.kill();
      }
    },
    30_000,
  );
});
