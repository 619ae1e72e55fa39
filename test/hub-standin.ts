// A loopback stand-in for the Hugging Face hub, for downloadModel's and -hf's tests: the tree API of one repo,
// `resolve/main` downloads with HTTP Range, HEAD answers with the hub's x-linked-size / x-linked-etag, plain files
// under /files/, and switches that make it misbehave on purpose.
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll } from "vitest";
import { writeSyntheticModel } from "../tools/synth/synth.js";

export function sha256(bytes: Buffer): string {
  return createHash("sha256").update(bytes).digest("hex");
}

export class StandInHub {
  /** The repo's files by path; also served by name under /files/. */
  files = new Map<string, Buffer>();
  requests: { method: string; url: string; headers: IncomingHttpHeaders }[] = [];
  /** Answer a Range request with the whole file (200), as a server without resume does. */
  ignoreRange = false;
  /** Flip one byte of every download. */
  corrupt = false;
  /** Send this many bytes of a download, then hold the connection open without sending more. */
  stallAfter: number | undefined;
  /** A hostile hub's answer, instead of the real one, to the requests it takes (returns true). */
  hostile: ((url: URL, res: ServerResponse) => boolean) | undefined;
  endpoint = "";
  readonly #server: Server;

  constructor(readonly repo: string) {
    this.#server = createServer((req, res) => {
      this.requests.push({ method: req.method!, url: req.url!, headers: req.headers });
      const url = new URL(req.url!, "http://hub");
      if (this.hostile?.(url, res)) return;
      if (url.pathname === `/api/models/${repo}/tree/main`) {
        res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(this.tree()));
        return;
      }
      const bytes = this.#file(url.pathname);
      if (!bytes) {
        res.writeHead(404).end("not found");
        return;
      }
      if (req.method === "HEAD") {
        res.writeHead(200, { "x-linked-size": String(bytes.length), "x-linked-etag": `"${sha256(bytes)}"` }).end();
        return;
      }
      const body = Buffer.from(bytes);
      if (this.corrupt) body[body.length >> 1]! ^= 0xff;
      const range = /^bytes=(\d+)-$/.exec(req.headers.range ?? "");
      const start = range && !this.ignoreRange ? Number(range[1]) : 0;
      const headers: Record<string, string> = { "content-length": String(body.length - start) };
      if (start > 0) headers["content-range"] = `bytes ${start}-${body.length - 1}/${body.length}`;
      res.writeHead(start > 0 ? 206 : 200, headers);
      if (this.stallAfter === undefined) res.end(body.subarray(start));
      else res.write(body.subarray(start, start + this.stallAfter));
    });
  }

  #file(path: string): Buffer | undefined {
    const prefix = `/${this.repo}/resolve/main/`;
    if (path.startsWith(prefix)) return this.files.get(decodeURIComponent(path.slice(prefix.length)));
    if (path.startsWith("/files/")) {
      const name = decodeURIComponent(path.slice("/files/".length));
      return [...this.files].find(([p]) => p.split("/").pop() === name)?.[1];
    }
    return undefined;
  }

  /** The tree API's listing: a README (a git blob) and the files (LFS, with their sha256). */
  tree(): unknown[] {
    return [
      { type: "file", path: "README.md", size: 5, oid: "0".repeat(40) },
      ...[...this.files].map(([path, bytes]) => ({
        type: "file",
        path,
        size: bytes.length,
        oid: "1".repeat(40),
        lfs: { oid: sha256(bytes), size: bytes.length, pointerSize: 134 },
      })),
    ];
  }

  /** The requests that downloaded a file (GET of resolve/ or files/). */
  downloads(): { method: string; url: string; headers: IncomingHttpHeaders }[] {
    return this.requests.filter((r) => r.method === "GET" && /\/(resolve|files)\//.test(r.url));
  }

  reset(files: Map<string, Buffer>): void {
    this.files = files;
    this.requests = [];
    this.ignoreRange = false;
    this.corrupt = false;
    this.stallAfter = undefined;
    this.hostile = undefined;
  }

  async start(): Promise<void> {
    await new Promise<void>((resolve) => this.#server.listen(0, "127.0.0.1", resolve));
    this.endpoint = `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
  }

  async stop(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise((resolve) => this.#server.close(resolve));
  }
}

/** A test file's stand-in hub and the two model files it serves. */
export interface StandInHubFixture {
  readonly hub: StandInHub;
  /** A tiny model's bytes (set before the first test). */
  readonly model: Buffer;
  /** Another tiny model's bytes, of another seed (set before the first test). */
  readonly other: Buffer;
  /** A new empty folder for a test's cache, removed with the rest after the file's tests. */
  newCacheDir(): string;
}

/**
 * A stand-in hub of `repo` for the test file that calls this at its top level (it adds vitest's
 * beforeAll / afterAll): before the tests it writes two tiny models (tiny-qwen3moe, Q8_0, seeds 1
 * and 2) into a temporary folder and starts the hub; after them it stops the hub and removes the folder.
 */
export function useStandInHub(repo: string): StandInHubFixture {
  const dir = mkdtempSync(join(tmpdir(), "bloomery-hub-"));
  const hub = new StandInHub(repo);
  let model: Buffer | undefined;
  let other: Buffer | undefined;
  beforeAll(async () => {
    await writeSyntheticModel(join(dir, "a.gguf"), { preset: "tiny-qwen3moe", weightType: "Q8_0" });
    await writeSyntheticModel(join(dir, "b.gguf"), { preset: "tiny-qwen3moe", weightType: "Q8_0", seed: 2 });
    model = readFileSync(join(dir, "a.gguf"));
    other = readFileSync(join(dir, "b.gguf"));
    await hub.start();
  });
  afterAll(async () => {
    await hub.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  return {
    hub,
    get model() {
      if (!model) throw new Error("the stand-in hub's models are written in beforeAll");
      return model;
    },
    get other() {
      if (!other) throw new Error("the stand-in hub's models are written in beforeAll");
      return other;
    },
    newCacheDir: () => mkdtempSync(join(dir, "cache-")),
  };
}
