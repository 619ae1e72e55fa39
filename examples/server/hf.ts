// --hf repo[:quant]: a GGUF from the Hugging Face hub, downloaded once into a cache folder and
// served from there, as llama-server's -hf does. The hub's tree API names each file with its size
// and checksum; a download goes to `<file>.partial`, resumes with an HTTP Range, and is renamed into
// place only once its size and checksum match, so a file in the cache is a verified file.
import { createHash } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { mkdir, readFile, rename, rm, stat, truncate, writeFile } from "node:fs/promises";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";

/** The quantization picked when `--hf` names none, as llama-server's. */
export const DEFAULT_QUANT = "Q4_K_M";

/** A download or resolution that failed: the message names the repo, the file or the HTTP status. */
export class HubError extends Error {}

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

/** The local path of the requested model's (first) file, downloading what the cache lacks. */
export async function fetchHubModel(request: HubRequest): Promise<string> {
  const { name, quant } = parseRepo(request.repo);
  const folder = join(request.cacheDir, name.replace("/", "_"));
  const manifestPath = join(folder, `.manifest-${(request.file ?? quant.toUpperCase()).replaceAll("/", "_")}.json`);
  const cached = await readManifest(manifestPath, folder);
  if (cached) return join(folder, cached.files[0]!.path);

  const files = await listFiles(request, name);
  const chosen = request.file !== undefined ? byName(files, name, request.file) : byQuant(files, name, quant);
  for (const file of chosen) await download(request, name, file, join(folder, file.path));
  await writeFile(manifestPath, JSON.stringify({ files: chosen } satisfies Manifest));
  return join(folder, chosen[0]!.path);
}

function parseRepo(spec: string): { name: string; quant: string } {
  const [name, quant, ...rest] = spec.split(":");
  if (!/^[\w.-]+\/[\w.-]+$/.test(name!) || rest.length > 0 || quant === "")
    throw new HubError(`--hf must be <user>/<model>[:quant], not ${JSON.stringify(spec)}`);
  return { name: name!, quant: quant ?? DEFAULT_QUANT };
}

/** The cached model when every file the manifest names is in place with its size; no network. */
async function readManifest(path: string, folder: string): Promise<Manifest | undefined> {
  let manifest: Manifest;
  try {
    manifest = JSON.parse(await readFile(path, "utf8")) as Manifest;
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
  if (!response.ok) throw new HubError(`${name}: listing its files answered HTTP ${response.status} (${url})`);
  const entries = (await response.json()) as {
    type?: string;
    path?: unknown;
    size?: unknown;
    oid?: unknown;
    lfs?: { oid?: unknown };
  }[];
  if (!Array.isArray(entries)) throw new HubError(`${name}: the hub's file list is not an array (${url})`);
  return entries
    .filter((e) => e.type === "file" && typeof e.path === "string" && e.path.endsWith(".gguf"))
    .map((e) => {
      const path = e.path as string;
      if (path.split("/").some((part) => part === ".." || part === "") || typeof e.size !== "number")
        throw new HubError(`${name}: the hub lists a file the cache cannot hold: ${JSON.stringify(path)}`);
      const checksum =
        typeof e.lfs?.oid === "string"
          ? `sha256:${e.lfs.oid}`
          : typeof e.oid === "string"
            ? `sha1-blob:${e.oid}`
            : undefined;
      if (!checksum) throw new HubError(`${name}: the hub lists ${path} without a checksum`);
      return { path, size: e.size, checksum };
    });
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
      `${name}: ${first.path} is part of a split model whose ${split[2]} parts the hub does not all list`,
    );
  return parts;
}

function byName(files: HubFile[], name: string, path: string): HubFile[] {
  const file = files.find((f) => f.path === path);
  if (!file) throw new HubError(`${name} has no file ${path}; its GGUF files: ${listing(files)}`);
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
    throw new HubError(`${name} has no GGUF file for quant ${quant}; its GGUF files: ${listing(files)}`);
  if (models.size > 1)
    throw new HubError(
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
    throw new HubError(`${name}: ${url}: ${(error as Error).message}`);
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
    if (!(resumed && have > 0) && response.status !== 200)
      throw new HubError(`${name}/${file.path}: download answered HTTP ${response.status} (${url})`);
    if (resumed && !response.headers.get("content-range")?.startsWith(`bytes ${have}-`))
      throw new HubError(`${name}/${file.path}: the hub resumed at another offset than ${have} (${url})`);
    if (!response.body) throw new HubError(`${name}/${file.path}: the download has no body (${url})`);
    try {
      await pipeline(
        Readable.fromWeb(response.body as never),
        createWriteStream(partial, { flags: resumed ? "a" : "w" }),
      );
    } catch (error) {
      throw new HubError(
        `${name}/${file.path}: the download broke off (${(error as Error).message}); run again to resume it`,
      );
    }
  }
  const size = await sizeOf(partial);
  const sum = await checksum(partial, file);
  if (size !== file.size || sum !== file.checksum) {
    await rm(partial, { force: true });
    throw new HubError(
      `${name}/${file.path}: the download does not match the hub's listing (${size} bytes, ${sum}; expected ${file.size} bytes, ${file.checksum}); removed it`,
    );
  }
  await rename(partial, target);
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
