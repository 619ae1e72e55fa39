// --hf repo[:quant]: a GGUF from the Hugging Face hub, downloaded once into a cache folder and
// served from there, as llama-server's -hf does. The hub's tree API names each file with its size
// and checksum; a download goes to `<file>.partial`, resumes with an HTTP Range, and is renamed into
// place only once its size and checksum match, so a file in the cache is a verified file.
// Nothing the hub (HF_ENDPOINT) sends is trusted: the listing is read up to a limit and checked field
// by field, and a download is counted as it streams and cut at the size the listing gave, so a
// hostile endpoint can neither fill the disk nor crash the server.
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { mkdir, open, readFile, rename, rm, stat, statfs, truncate, writeFile } from "node:fs/promises";
import { homedir } from "node:os";
import { dirname, join } from "node:path";

/** The quantization picked when `--hf` names none, as llama-server's. */
export const DEFAULT_QUANT = "Q4_K_M";

/** The hub stores no file over 50 GB: a listing that says more is not the hub's. */
export const MAX_FILE_BYTES = 64 * 1024 ** 3;

/** The largest file listing read: the hub's for a repo of thousands of files is a few MB. */
export const MAX_LISTING_BYTES = 32 * 1024 ** 2;

export type HubErrorCode =
  /** `--hf` is not `<user>/<model>[:quant]`. */
  | "HUB_BAD_REPO"
  /** The hub could not be reached, or answered with an HTTP error. */
  | "HUB_REQUEST"
  /** The file listing is not what the hub sends: not JSON, too large, or a file with a bad path, size or checksum. */
  | "HUB_BAD_LISTING"
  /** The repo has no file for the quant or name asked for, several, or not every part of a split model. */
  | "HUB_NO_FILE"
  /** The download is longer than the listing says, or says so in its Content-Length. */
  | "HUB_DOWNLOAD_SIZE"
  /** The download broke off before its end: run again to resume it. */
  | "HUB_DOWNLOAD_BROKEN"
  /** The downloaded bytes do not match the listing's checksum. */
  | "HUB_CHECKSUM"
  /** The cache folder's disk has less room than the files need. */
  | "HUB_NO_SPACE"
  /** The cache folder could not be read or written. */
  | "HUB_CACHE"
  /** --offline, and the cache does not hold the model. */
  | "HUB_OFFLINE";

/** A download or resolution that failed: the message names the repo, the file or the HTTP status. */
export class HubError extends Error {
  constructor(
    readonly code: HubErrorCode,
    message: string,
  ) {
    super(message);
  }
}

export interface HubRequest {
  /** `owner/name[:quant]`, as given to `--hf`. */
  repo: string;
  /** `--hf-file`: this file of the repo instead of one picked by quant. */
  file?: string;
  /** `--hf-token`: sent as `Authorization: Bearer`. */
  token?: string;
  /** The hub's address, e.g. https://huggingface.co. */
  endpoint: string;
  /** The cache folder; each repo gets a folder inside it. */
  cacheDir: string;
  /** Told of each download as it starts. */
  log?: (line: string) => void;
  /** Told of each download's bytes as they come: `received` of the file's `size` (a resumed one starts above 0). */
  onProgress?: (file: string, received: number, size: number) => void;
  /** --offline: only the cache; a model it does not hold is refused (HUB_OFFLINE) rather than downloaded. */
  offline?: boolean;
}

/** One file of the repo as the tree API lists it. */
interface HubFile {
  path: string;
  size: number;
  /** `sha256:<hex>` for LFS files, `sha1-blob:<hex>` (git's blob id) for the others. */
  checksum: string;
}

/** What a finished download wrote: the files of one model (several for a split model), verified. */
interface Manifest {
  files: HubFile[];
}

/** Where the hub and the cache are when the environment does not say: llama-server's variables. */
export function hubLocation(env: NodeJS.ProcessEnv): { endpoint: string; cacheDir: string } {
  return {
    endpoint: (env.HF_ENDPOINT || "https://huggingface.co").replace(/\/+$/, ""),
    cacheDir: env.LLAMA_CACHE || join(homedir(), ".cache", "bloomery"),
  };
}

/**
 * The local path of the requested model's (first) file, downloading what the cache lacks. Every failure is a
 * {@link HubError} with its code.
 */
export async function fetchHubModel(request: HubRequest): Promise<string> {
  const { name, quant } = parseRepo(request.repo);
  const folder = join(request.cacheDir, name.replace("/", "_"));
  try {
    const manifestPath = join(folder, `.manifest-${(request.file ?? quant.toUpperCase()).replaceAll("/", "_")}.json`);
    const cached = await readManifest(manifestPath, folder);
    if (cached) return join(folder, cached.files[0]!.path);
    if (request.offline)
      throw new HubError(
        "HUB_OFFLINE",
        `${request.repo}: not in the cache ${request.cacheDir}, and --offline downloads nothing`,
      );

    const files = await listFiles(request, name);
    const chosen = request.file !== undefined ? byName(files, name, request.file) : byQuant(files, name, quant);
    await mkdir(folder, { recursive: true });
    await checkRoom(folder, name, chosen);
    for (const file of chosen) await download(request, name, file, join(folder, file.path));
    await writeFile(manifestPath, JSON.stringify({ files: chosen } satisfies Manifest));
    return join(folder, chosen[0]!.path);
  } catch (error) {
    // The file system's own errors (EACCES, ENOSPC, ...) name the cache rather than escape as they are.
    if (error instanceof HubError || typeof (error as NodeJS.ErrnoException).code !== "string") throw error;
    throw new HubError("HUB_CACHE", `${name}: the cache folder ${folder}: ${(error as Error).message}`);
  }
}

function parseRepo(spec: string): { name: string; quant: string } {
  const [name, quant, ...rest] = spec.split(":");
  if (!/^[\w.-]+\/[\w.-]+$/.test(name!) || rest.length > 0 || quant === "")
    throw new HubError("HUB_BAD_REPO", `--hf must be <user>/<model>[:quant], not ${JSON.stringify(spec)}`);
  return { name: name!, quant: quant ?? DEFAULT_QUANT };
}

/** The cached model when every file the manifest names is in place with its size; no network. */
async function readManifest(path: string, folder: string): Promise<Manifest | undefined> {
  let manifest: Manifest;
  try {
    const files = (JSON.parse(await readFile(path, "utf8")) as { files?: unknown }).files;
    // A manifest someone else wrote is no more trusted than the hub: checked as a listing is.
    if (!Array.isArray(files) || files.length === 0) return undefined;
    manifest = { files: files.map((entry) => checkedFile(entry, "the cache")) };
  } catch {
    return undefined;
  }
  for (const file of manifest.files) {
    const size = await stat(join(folder, file.path)).then(
      (s) => s.size,
      () => -1,
    );
    if (size !== file.size) return undefined;
  }
  return manifest;
}

function headers(request: HubRequest, extra: Record<string, string> = {}): Record<string, string> {
  return request.token ? { authorization: `Bearer ${request.token}`, ...extra } : extra;
}

async function listFiles(request: HubRequest, name: string): Promise<HubFile[]> {
  const url = `${request.endpoint}/api/models/${name}/tree/main?recursive=true`;
  const response = await get(url, headers(request), name);
  if (!response.ok) {
    await response.body?.cancel();
    throw new HubError("HUB_REQUEST", `${name}: listing its files answered HTTP ${response.status} (${url})`);
  }
  const bad = (what: string) => new HubError("HUB_BAD_LISTING", `${name}: the hub's file listing ${what} (${url})`);
  const text = await readCapped(response, MAX_LISTING_BYTES, () =>
    bad(`is larger than ${MAX_LISTING_BYTES} bytes, more than any repo's`),
  );
  let entries: unknown;
  try {
    entries = JSON.parse(text);
  } catch (error) {
    throw bad(`is not JSON: ${(error as Error).message}`);
  }
  if (!Array.isArray(entries)) throw bad("is not an array of files");
  return entries
    .filter(
      (e: unknown) =>
        isRecord(e) && e.type === "file" && typeof e.path === "string" && e.path.toLowerCase().endsWith(".gguf"),
    )
    .map((e) => checkedFile(e, "the hub"));
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * A file of a listing (the hub's tree entry, or a manifest's file) with its path, size and checksum checked: a path
 * the cache can hold, a size from 0 to {@link MAX_FILE_BYTES}, a sha256 or git blob id in hex.
 */
function checkedFile(entry: unknown, source: string): HubFile {
  const refuse = (what: string) => new HubError("HUB_BAD_LISTING", `${source} lists ${what}`);
  if (!isRecord(entry) || typeof entry.path !== "string") throw refuse(`an entry without a path`);
  const path = entry.path;
  if (
    path.split("/").some((part) => part === "" || part === "." || part === "..") ||
    // eslint-disable-next-line no-control-regex
    /[\u0000-\u001f\\]/.test(path)
  )
    throw refuse(`a file the cache cannot hold: ${JSON.stringify(path)}`);
  const size = entry.size;
  if (typeof size !== "number" || !Number.isSafeInteger(size) || size < 0 || size > MAX_FILE_BYTES)
    throw refuse(`${path} with a size of ${JSON.stringify(size)}, not a byte count from 0 to ${MAX_FILE_BYTES}`);
  let checksum: string | undefined;
  if (typeof entry.checksum === "string") checksum = entry.checksum;
  else if (isRecord(entry.lfs) && typeof entry.lfs.oid === "string") checksum = `sha256:${entry.lfs.oid}`;
  else if (typeof entry.oid === "string") checksum = `sha1-blob:${entry.oid}`;
  if (checksum === undefined) throw refuse(`${path} without a checksum`);
  if (!/^(sha256:[0-9a-f]{64}|sha1-blob:[0-9a-f]{40})$/.test(checksum))
    throw refuse(`${path} with a checksum that is not a sha256 or git blob id: ${JSON.stringify(checksum)}`);
  return { path, size, checksum };
}

/** The response's body as text, refused (`tooLarge`) as soon as it passes `limit` bytes. */
async function readCapped(response: Response, limit: number, tooLarge: () => HubError): Promise<string> {
  const chunks: Uint8Array[] = [];
  let bytes = 0;
  try {
    for await (const chunk of response.body ?? []) {
      bytes += chunk.length;
      if (bytes > limit) throw tooLarge();
      chunks.push(chunk);
    }
  } catch (error) {
    if (error instanceof HubError) throw error;
    throw new HubError("HUB_REQUEST", `${response.url}: the answer broke off (${(error as Error).message})`);
  }
  return Buffer.concat(chunks).toString("utf8");
}

/** Refuses a download the cache's disk has no room for (what the files still lack, partial files counted). */
async function checkRoom(folder: string, name: string, files: HubFile[]): Promise<void> {
  let needed = 0;
  for (const file of files) {
    const target = join(folder, file.path);
    if ((await sizeOf(target)) === file.size) continue;
    needed += file.size - Math.min(Math.max(await sizeOf(`${target}.partial`), 0), file.size);
  }
  const disk = await statfs(folder);
  const free = disk.bavail * disk.bsize;
  if (needed > free)
    throw new HubError(
      "HUB_NO_SPACE",
      `${name}: the download needs ${needed} bytes and the disk of ${folder} has ${free} free`,
    );
}

const SPLIT = /-(\d{5})-of-(\d{5})\.gguf$/;

/** The file, and the other parts when it is part of a split model. */
function withParts(files: HubFile[], name: string, first: HubFile): HubFile[] {
  const split = SPLIT.exec(first.path);
  if (!split) return [first];
  const base = first.path.slice(0, split.index);
  const parts = files
    .filter((f) => f.path.startsWith(base) && SPLIT.exec(f.path)?.index === base.length)
    .sort((a, b) => a.path.localeCompare(b.path));
  if (parts.length !== Number(split[2]) || SPLIT.exec(parts[0]!.path)![1] !== "00001")
    throw new HubError(
      "HUB_NO_FILE",
      `${name}: ${first.path} is part of a split model whose ${split[2]} parts the hub does not all list`,
    );
  return parts;
}

function byName(files: HubFile[], name: string, path: string): HubFile[] {
  const file = files.find((f) => f.path === path);
  if (!file) throw new HubError("HUB_NO_FILE", `${name} has no file ${path}; its GGUF files: ${listing(files)}`);
  return withParts(files, name, file);
}

function byQuant(files: HubFile[], name: string, quant: string): HubFile[] {
  // The tag stands alone in the name (IQ4_XS is not Q4_XS); projector files are not models.
  const tag = new RegExp(`(^|[^a-z0-9])${quant.replace(/[^\w]/g, "\\$&")}([^a-z0-9]|$)`, "i");
  const matches = files.filter((f) => tag.test(f.path) && !/mmproj/i.test(f.path));
  const models = new Map<string, HubFile>();
  for (const file of matches) {
    const split = SPLIT.exec(file.path);
    const key = split ? file.path.slice(0, split.index) : file.path;
    if (!split || split[1] === "00001" || !models.has(key)) models.set(key, file);
  }
  if (models.size === 0)
    throw new HubError("HUB_NO_FILE", `${name} has no GGUF file for quant ${quant}; its GGUF files: ${listing(files)}`);
  if (models.size > 1)
    throw new HubError(
      "HUB_NO_FILE",
      `${name}: quant ${quant} is ambiguous, it names ${[...models.keys()].join(", ")}; pick one with --hf-file`,
    );
  const [model] = [...models.values()];
  return withParts(files, name, model!);
}

function listing(files: HubFile[]): string {
  return files.length === 0 ? "(none)" : files.map((f) => f.path).join(", ");
}

async function get(url: string, requestHeaders: Record<string, string>, name: string): Promise<Response> {
  try {
    return await fetch(url, { headers: requestHeaders });
  } catch (error) {
    throw new HubError("HUB_REQUEST", `${name}: ${url}: ${(error as Error).message}`);
  }
}

/** Downloads one file into `target` through `<target>.partial`, resuming it, then verifies it. */
async function download(request: HubRequest, name: string, file: HubFile, target: string): Promise<void> {
  if ((await sizeOf(target)) === file.size && (await checksum(target, file)) === file.checksum) return;
  await mkdir(dirname(target), { recursive: true });
  const partial = `${target}.partial`;
  let have = await sizeOf(partial);
  if (have > file.size) {
    await truncate(partial, 0);
    have = 0;
  }
  if (have < file.size) {
    const url = `${request.endpoint}/${name}/resolve/main/${file.path.split("/").map(encodeURIComponent).join("/")}`;
    request.log?.(`downloading ${name}/${file.path} (${file.size} bytes${have > 0 ? `, resuming at ${have}` : ""})`);
    const response = await get(url, headers(request, have > 0 ? { range: `bytes=${have}-` } : {}), name);
    // 206 continues the partial file; a 200 is the whole file, so the partial starts over.
    const resumed = response.status === 206;
    const refuse = async (code: HubErrorCode, what: string) => {
      await response.body?.cancel();
      return new HubError(code, `${name}/${file.path}: ${what} (${url})`);
    };
    if (!(resumed && have > 0) && response.status !== 200)
      throw await refuse("HUB_REQUEST", `download answered HTTP ${response.status}`);
    if (resumed && !response.headers.get("content-range")?.startsWith(`bytes ${have}-`))
      throw await refuse("HUB_REQUEST", `the hub resumed at another offset than ${have}`);
    const expected = file.size - (resumed ? have : 0);
    const length = response.headers.get("content-length");
    // Content-Length counts the bytes as sent: only an unencoded body's must equal the file's.
    if (length !== null && !response.headers.has("content-encoding") && Number(length) !== expected) {
      if (!resumed) await rm(partial, { force: true });
      throw await refuse("HUB_DOWNLOAD_SIZE", `the download is ${length} bytes, where the listing says ${expected}`);
    }
    const start = resumed ? have : 0;
    await receive(response, partial, resumed, expected, `${name}/${file.path}`, url, (received) =>
      request.onProgress?.(file.path, start + received, file.size),
    );
  }
  const size = await sizeOf(partial);
  const sum = await checksum(partial, file);
  if (size !== file.size || sum !== file.checksum) {
    await rm(partial, { force: true });
    throw new HubError(
      "HUB_CHECKSUM",
      `${name}/${file.path}: the download does not match the hub's listing (${size} bytes, ${sum}; expected ${file.size} bytes, ${file.checksum}); removed it`,
    );
  }
  await rename(partial, target);
}

/**
 * Writes the body to `partial` (appended when `resumed`), counting its bytes as they come: past `expected` it stops
 * reading, removes the partial file and refuses, so no more than the listing's size is ever written.
 */
async function receive(
  response: Response,
  partial: string,
  resumed: boolean,
  expected: number,
  what: string,
  url: string,
  onBytes: (received: number) => void,
): Promise<void> {
  const out = await open(partial, resumed ? "a" : "w");
  let received = 0;
  let oversized = false;
  try {
    for await (const chunk of response.body ?? []) {
      received += chunk.length;
      if (received > expected) {
        oversized = true;
        break;
      }
      await out.write(chunk);
      onBytes(received);
    }
  } catch (error) {
    throw new HubError(
      "HUB_DOWNLOAD_BROKEN",
      `${what}: the download broke off (${(error as Error).message}); run again to resume it`,
    );
  } finally {
    await out.close();
  }
  if (oversized) {
    await rm(partial, { force: true });
    throw new HubError(
      "HUB_DOWNLOAD_SIZE",
      `${what}: the download ran past the ${expected} bytes the listing gives it; stopped it and removed the partial file (${url})`,
    );
  }
}

async function sizeOf(path: string): Promise<number> {
  return stat(path).then(
    (s) => s.size,
    () => -1,
  );
}

/** The file's checksum in the form the hub lists: sha256 for LFS files, git's blob id otherwise. */
async function checksum(path: string, file: HubFile): Promise<string> {
  const sha256 = file.checksum.startsWith("sha256:");
  const hash = createHash(sha256 ? "sha256" : "sha1");
  if (!sha256) hash.update(`blob ${(await stat(path)).size}\0`);
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return `${sha256 ? "sha256" : "sha1-blob"}:${hash.digest("hex")}`;
}
