// bloomery-serve's -hf against a loopback stand-in for the Hugging Face hub: the tree API, resumable
// downloads with HTTP Range, checksum checks, the cache, and quant picking.
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { fetchHubModel, HubError, type HubRequest } from "../examples/server/hf.js";
import { parseServeOptions, UsageError } from "../examples/server/options.js";
import { readGgufInfo } from "../src/index.js";
import { writeSyntheticModel } from "../tools/synth/synth.js";

const REPO = "test-org/tiny-moe";
const dir = mkdtempSync(join(tmpdir(), "bloomery-hf-"));
let model: Buffer;
let other: Buffer;

/** The stand-in hub: serves `files` by path, records every request, and can misbehave on purpose. */
const hub = {
  files: new Map<string, Buffer>(),
  requests: [] as { url: string; headers: IncomingHttpHeaders }[],
  /** Answer a Range request with the whole file (200), as a server without resume does. */
  ignoreRange: false,
  /** Flip one byte of every download. */
  corrupt: false,
  server: undefined as Server | undefined,
  endpoint: "",
};

function sha256(bytes: Buffer): string {
  return createHash("sha256").update(bytes).digest("hex");
}

function tree(): unknown[] {
  return [
    { type: "file", path: "README.md", size: 5, oid: "0".repeat(40) },
    ...[...hub.files].map(([path, bytes]) => ({
      type: "file",
      path,
      size: bytes.length,
      oid: "1".repeat(40),
      lfs: { oid: sha256(bytes), size: bytes.length, pointerSize: 134 },
    })),
  ];
}

beforeAll(async () => {
  await writeSyntheticModel(join(dir, "a.gguf"), { preset: "tiny-qwen3moe", weightType: "Q8_0" });
  await writeSyntheticModel(join(dir, "b.gguf"), { preset: "tiny-qwen3moe", weightType: "Q8_0", seed: 2 });
  model = readFileSync(join(dir, "a.gguf"));
  other = readFileSync(join(dir, "b.gguf"));
  hub.server = createServer((req, res) => {
    hub.requests.push({ url: req.url!, headers: req.headers });
    const url = new URL(req.url!, "http://hub");
    if (url.pathname === `/api/models/${REPO}/tree/main`) {
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(tree()));
      return;
    }
    const prefix = `/${REPO}/resolve/main/`;
    const bytes = url.pathname.startsWith(prefix)
      ? hub.files.get(decodeURIComponent(url.pathname.slice(prefix.length)))
      : undefined;
    if (!bytes) {
      res.writeHead(404).end("not found");
      return;
    }
    const body = Buffer.from(bytes);
    if (hub.corrupt) body[body.length >> 1]! ^= 0xff;
    const range = /^bytes=(\d+)-$/.exec(req.headers.range ?? "");
    if (range && !hub.ignoreRange) {
      const start = Number(range[1]);
      res
        .writeHead(206, { "content-range": `bytes ${start}-${body.length - 1}/${body.length}` })
        .end(body.subarray(start));
    } else res.writeHead(200).end(body);
  });
  await new Promise<void>((resolve) => hub.server!.listen(0, "127.0.0.1", resolve));
  hub.endpoint = `http://127.0.0.1:${(hub.server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await new Promise((resolve) => hub.server?.close(resolve));
  rmSync(dir, { recursive: true, force: true });
});

let cacheDir: string;
beforeEach(() => {
  hub.files = new Map([
    ["tiny-moe-Q4_K_M.gguf", model],
    ["tiny-moe-Q8_0.gguf", other],
  ]);
  hub.requests = [];
  hub.ignoreRange = false;
  hub.corrupt = false;
  cacheDir = mkdtempSync(join(dir, "cache-"));
});

function request(repo: string, extra: Partial<HubRequest> = {}): HubRequest {
  return { repo, endpoint: hub.endpoint, cacheDir, ...extra };
}

const downloads = () => hub.requests.filter((r) => r.url.includes("/resolve/"));

describe("-hf downloads", () => {
  it("picks the file by quant (Q4_K_M by default, any case), downloads it and sends the token", async () => {
    const path = await fetchHubModel(request(REPO, { token: "secret" }));
    expect(path).toBe(join(cacheDir, "test-org_tiny-moe", "tiny-moe-Q4_K_M.gguf"));
    expect(readFileSync(path).equals(model)).toBe(true);
    expect((await readGgufInfo(path)).summary.architecture).toBe("qwen3moe");
    expect(hub.requests.map((r) => r.headers.authorization)).toEqual(["Bearer secret", "Bearer secret"]);

    const q8 = await fetchHubModel(request(`${REPO}:q8_0`));
    expect(readFileSync(q8).equals(other)).toBe(true);
    expect(existsSync(`${q8}.partial`)).toBe(false);
  });

  it("resumes a partial download with a Range request", async () => {
    const target = join(cacheDir, "test-org_tiny-moe", "tiny-moe-Q4_K_M.gguf");
    mkdirSync(join(cacheDir, "test-org_tiny-moe"));
    const have = model.length >> 1;
    writeFileSync(`${target}.partial`, model.subarray(0, have));
    const path = await fetchHubModel(request(REPO));
    expect(downloads().map((r) => r.headers.range)).toEqual([`bytes=${have}-`]);
    expect(readFileSync(path).equals(model)).toBe(true);
  });

  it("starts over when the hub answers a Range request with the whole file", async () => {
    const target = join(cacheDir, "test-org_tiny-moe", "tiny-moe-Q4_K_M.gguf");
    mkdirSync(join(cacheDir, "test-org_tiny-moe"));
    writeFileSync(`${target}.partial`, Buffer.alloc(100, 0xaa));
    hub.ignoreRange = true;
    const path = await fetchHubModel(request(REPO));
    expect(downloads().map((r) => r.headers.range)).toEqual(["bytes=100-"]);
    expect(readFileSync(path).equals(model)).toBe(true);
  });

  it("refuses a download whose checksum does not match and leaves no file", async () => {
    hub.corrupt = true;
    await expect(fetchHubModel(request(REPO))).rejects.toThrow(
      /tiny-moe-Q4_K_M\.gguf: the download does not match.*sha256/,
    );
    const target = join(cacheDir, "test-org_tiny-moe", "tiny-moe-Q4_K_M.gguf");
    expect(existsSync(target)).toBe(false);
    expect(existsSync(`${target}.partial`)).toBe(false);
  });

  it("reuses the cached file without a request", async () => {
    const first = await fetchHubModel(request(REPO));
    hub.requests = [];
    expect(await fetchHubModel(request(REPO))).toBe(first);
    expect(hub.requests).toEqual([]);
  });

  it("downloads every part of a split model and answers the first", async () => {
    hub.files.set("Q6_K/tiny-moe-Q6_K-00002-of-00002.gguf", other);
    hub.files.set("Q6_K/tiny-moe-Q6_K-00001-of-00002.gguf", model);
    const path = await fetchHubModel(request(`${REPO}:Q6_K`));
    expect(path).toBe(join(cacheDir, "test-org_tiny-moe", "Q6_K", "tiny-moe-Q6_K-00001-of-00002.gguf"));
    expect(readFileSync(path).equals(model)).toBe(true);
    expect(readFileSync(path.replace("00001-of", "00002-of")).equals(other)).toBe(true);
  });

  it("serves the file --hf-file names", async () => {
    const path = await fetchHubModel(request(REPO, { file: "tiny-moe-Q8_0.gguf" }));
    expect(readFileSync(path).equals(other)).toBe(true);
    await expect(fetchHubModel(request(REPO, { file: "nope.gguf" }))).rejects.toThrow(
      /test-org\/tiny-moe has no file nope\.gguf; its GGUF files: tiny-moe-Q4_K_M\.gguf, tiny-moe-Q8_0\.gguf/,
    );
  });

  it("refuses an unknown or ambiguous quant by name, listing the files", async () => {
    await expect(fetchHubModel(request(`${REPO}:Q2_K`))).rejects.toThrow(
      /test-org\/tiny-moe has no GGUF file for quant Q2_K; its GGUF files: tiny-moe-Q4_K_M\.gguf, tiny-moe-Q8_0\.gguf/,
    );
    hub.files.set("tiny-moe-Q4_K_S.gguf", other);
    await expect(fetchHubModel(request(`${REPO}:Q4_K`))).rejects.toThrow(
      /quant Q4_K is ambiguous, it names tiny-moe-Q4_K_M\.gguf, tiny-moe-Q4_K_S\.gguf/,
    );
    expect(downloads()).toEqual([]);
  });

  it("names the repo and the HTTP status of a failed request", async () => {
    const error = await fetchHubModel(request("test-org/missing")).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(HubError);
    expect((error as Error).message).toMatch(/^test-org\/missing: listing its files answered HTTP 404/);
    await expect(fetchHubModel(request("not-a-repo"))).rejects.toThrow(/--hf must be <user>\/<model>\[:quant\]/);
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
