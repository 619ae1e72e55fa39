/**
 * {@link downloadModel}: a GGUF model from the Hugging Face hub (`user/repo[:quant]`) or a URL, downloaded once into a
 * cache folder (`LLAMA_CACHE`) and read from there, as llama-server's `-hf` and `-mu` do. Downloads resume after a
 * cut, are checked against the hub's sha256, and take every part of a split model.
 * @module
 */
import { existsSync } from "node:fs";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import { BloomeryError } from "./errors.js";
import {
  checkedFile,
  isRecord,
  isRepoName,
  listRepoFiles,
  parseRepoReference,
  pickByName,
  pickByQuant,
  request,
  SPLIT,
  type HubAccess,
  type RemoteFile,
} from "./download/hub.js";
import { checkRoom, downloadFile, sizeOf } from "./download/transfer.js";
import { checkOptions, optionKeys } from "./validate.js";

/** Options of {@link downloadModel}. */
export interface DownloadModelOptions {
  /** The repo's file to download (a path in the repo), instead of the one the reference's quant picks. */
  file?: string;
  /** The hub's access token, sent as `Authorization: Bearer` (default: the `HF_TOKEN` environment variable). */
  token?: string;
  /** The hub's address (default: `HF_ENDPOINT`, else https://huggingface.co). */
  endpoint?: string;
  /**
   * The cache folder (default: `LLAMA_CACHE`, else `~/.cache/bloomery`). A repo's files go to `<user>_<repo>/` inside
   * it, by their path in the repo; a URL's file by its name.
   */
  cacheDir?: string;
  /** Only the cache: a model it does not hold is refused (HUB_OFFLINE) rather than downloaded. */
  offline?: boolean;
  /** Called as the bytes come, many times per file. An error it throws stops the download. */
  onProgress?: (progress: DownloadProgress) => void;
  /** Aborting it stops the download (ABORTED); what it got stays as `<file>.partial`, for the next call to resume. */
  signal?: AbortSignal;
}

/** How far {@link downloadModel} is with one file. */
export interface DownloadProgress {
  /** The file's path in the repo (or its name, from a URL). */
  file: string;
  /** Which file: 1-based, of `parts` (several for a split model). */
  part: number;
  parts: number;
  /** Bytes of this file on disk so far (a resumed download starts above 0), growing to `totalBytes`. */
  bytes: number;
  totalBytes: number;
}

const DOWNLOAD_OPTIONS = optionKeys<DownloadModelOptions>()({
  file: true,
  token: true,
  endpoint: true,
  cacheDir: true,
  offline: true,
  onProgress: true,
  signal: true,
});

/** What a finished download wrote: the files of one model (several for a split model), verified; a URL's too. */
interface Manifest {
  url?: string;
  files: RemoteFile[];
}

/** A planned download: where each file comes from and goes. */
interface Plan {
  /** The URL asked for (none for a repo's files). */
  url?: string;
  files: { file: RemoteFile; url: string; target: string }[];
}

/**
 * Whether `reference` names a model to download rather than a file: an http(s) URL, or `user/repo[:quant]` where no
 * such file exists (a name ending in `.gguf` is always a file).
 */
export function isModelReference(reference: string): boolean {
  if (/^https?:\/\//i.test(reference)) return true;
  if (reference.toLowerCase().endsWith(".gguf") || existsSync(reference)) return false;
  return isRepoName(reference.split(":")[0]!) && reference.split(":").length <= 2;
}

/**
 * The local path of a model's (first) file, downloading what the cache lacks. `reference` is `user/repo[:quant]` (the
 * repo's one GGUF file of that quant, Q4_K_M when none is named; `file` picks one by name) or an http(s) URL of a GGUF
 * file (a hub `resolve/main` URL is read as its repo and file). A file of a split model (`-00001-of-00003.gguf`)
 * brings every part. A download goes to `<file>.partial`, resumes with an HTTP Range, and is renamed into place
 * only once its size and checksum (the hub's LFS sha256; a URL's `x-linked-etag`) match; a file in the cache is
 * read without a request.
 *
 * Throws BloomeryError HUB_BAD_REPO, HUB_REQUEST (unreachable, or an HTTP error), HUB_BAD_LISTING, HUB_NO_FILE,
 * HUB_DOWNLOAD_SIZE, HUB_DOWNLOAD_BROKEN (a cut: call again to resume), HUB_CHECKSUM (the partial file is removed),
 * HUB_NO_SPACE, HUB_CACHE, HUB_OFFLINE, ABORTED, INVALID_ARGUMENT.
 */
export async function downloadModel(reference: string, options: DownloadModelOptions = {}): Promise<string> {
  if (typeof reference !== "string")
    throw new BloomeryError("INVALID_ARGUMENT", "downloadModel() takes a user/repo[:quant] reference or a URL");
  checkOptions(options, DOWNLOAD_OPTIONS, "downloadModel()");
  const env = process.env;
  const access: HubAccess = {
    endpoint: (options.endpoint ?? (env.HF_ENDPOINT || "https://huggingface.co")).replace(/\/+$/, ""),
    ...((options.token ?? env.HF_TOKEN) ? { token: options.token ?? env.HF_TOKEN } : {}),
    ...(options.signal ? { signal: options.signal } : {}),
  };
  const cacheDir = options.cacheDir ?? (env.LLAMA_CACHE || join(homedir(), ".cache", "bloomery"));
  const source = hubSource(reference, access.endpoint, options.file);
  const what = source.repo ?? reference;
  const folder = source.repo ? join(cacheDir, source.repo.replace("/", "_")) : cacheDir;
  try {
    const manifest = source.repo
      ? join(folder, `.manifest-${(source.file ?? source.quant.toUpperCase()).replaceAll("/", "_")}.json`)
      : join(folder, `${urlFileName(reference)}.json`);
    const cached = await readManifest(manifest, folder, source.repo ? undefined : reference);
    if (cached) return join(folder, cached.files[0]!.path);
    if (options.offline)
      throw new BloomeryError("HUB_OFFLINE", `${what}: not in the cache ${cacheDir}, and offline downloads nothing`);
    access.signal?.throwIfAborted();
    const plan = source.repo
      ? await repoPlan(access, source.repo, source.file, source.quant, folder)
      : await urlPlan(access, reference, folder);
    await mkdir(folder, { recursive: true });
    await checkRoom(
      folder,
      what,
      plan.files.map(({ file, target }) => ({ target, size: file.size })),
    );
    for (const [i, { file, url, target }] of plan.files.entries()) {
      await downloadFile(access, url, file, target, `${what}/${file.path}`, (bytes, totalBytes) =>
        options.onProgress?.({ file: file.path, part: i + 1, parts: plan.files.length, bytes, totalBytes }),
      );
    }
    const written: Manifest = { ...(plan.url ? { url: plan.url } : {}), files: plan.files.map((f) => f.file) };
    await writeFile(manifest, JSON.stringify(written));
    return plan.files[0]!.target;
  } catch (error) {
    if (error instanceof BloomeryError) throw error;
    if (options.signal?.aborted) throw new BloomeryError("ABORTED", `${what}: the download was aborted`);
    // The file system's own errors (EACCES, ENOSPC, ...) name the cache rather than escape as they are.
    if (typeof (error as NodeJS.ErrnoException).code !== "string") throw error;
    throw new BloomeryError("HUB_CACHE", `${what}: the cache folder ${folder}: ${(error as Error).message}`, {
      cause: error,
    });
  }
}

/** The repo a reference names: `user/repo[:quant]`, or a hub URL `<endpoint>/user/repo/resolve/main/<file>`. */
function hubSource(
  reference: string,
  endpoint: string,
  file: string | undefined,
): { repo?: string; quant: string; file?: string } {
  if (/^https?:\/\//i.test(reference)) {
    if (file !== undefined)
      throw new BloomeryError("INVALID_ARGUMENT", "downloadModel(): `file` picks a repo's file; a URL names its own");
    const prefix = `${endpoint}/`;
    const hub = reference.startsWith(prefix)
      ? /^([\w.-]+\/[\w.-]+)\/resolve\/main\/([^?#]+)$/.exec(reference.slice(prefix.length))
      : null;
    if (!hub) return { quant: "" };
    return { repo: hub[1]!, quant: "", file: decodeURIComponent(hub[2]!) };
  }
  const { repo, quant } = parseRepoReference(reference);
  return { repo, quant, ...(file !== undefined ? { file } : {}) };
}

async function repoPlan(
  access: HubAccess,
  repo: string,
  file: string | undefined,
  quant: string,
  folder: string,
): Promise<Plan> {
  const listed = await listRepoFiles(access, repo);
  const chosen = file !== undefined ? pickByName(listed, repo, file) : pickByQuant(listed, repo, quant);
  return {
    files: chosen.map((f) => ({
      file: f,
      url: `${access.endpoint}/${repo}/resolve/main/${f.path.split("/").map(encodeURIComponent).join("/")}`,
      target: join(folder, f.path),
    })),
  };
}

/** The file name a URL's file is cached under: the last part of its path. */
function urlFileName(url: string): string {
  let name: string;
  try {
    name = decodeURIComponent(new URL(url).pathname.split("/").pop() ?? "");
  } catch {
    name = "";
  }
  if (name === "" || name === "." || name === ".." || /[\\/]/.test(name))
    throw new BloomeryError("HUB_BAD_REPO", `${url} does not end in a file name to cache it under`, { url });
  return name;
}

/**
 * A URL's file (and, for the first part of a split model, the URLs of the others), each sized and checksummed by a
 * HEAD request: `x-linked-size` / `x-linked-etag` where the server sends them (the hub's LFS size and sha256),
 * else Content-Length and no checksum.
 */
async function urlPlan(access: HubAccess, url: string, folder: string): Promise<Plan> {
  const name = urlFileName(url);
  const split = SPLIT.exec(name);
  const count = split && split[1] === "00001" ? Number(split[2]) : 1;
  const urls = Array.from({ length: count }, (_, i) =>
    i === 0 ? url : url.replace(/-00001-of-(\d{5})\.gguf/, `-${String(i + 1).padStart(5, "0")}-of-$1.gguf`),
  );
  const files: Plan["files"] = [];
  for (const partUrl of urls) {
    const path = urlFileName(partUrl);
    const response = await request(partUrl, access, path, { method: "HEAD" });
    if (!response.ok)
      throw new BloomeryError("HUB_REQUEST", `${path}: HEAD ${partUrl} answered HTTP ${response.status}`, {
        status: response.status,
      });
    const etag = /^(?:W\/)?"?([0-9a-f]{64})"?$/.exec(response.headers.get("x-linked-etag") ?? "");
    const size = Number(response.headers.get("x-linked-size") ?? response.headers.get("content-length") ?? NaN);
    const file = checkedFile(
      { path, size, ...(etag ? { checksum: `sha256:${etag[1]}` } : {}) },
      `${partUrl}'s HEAD`,
      false,
    );
    files.push({ file, url: partUrl, target: join(folder, path) });
  }
  return { url, files };
}

/** The cached model when every file the manifest names is in place with its size; no network. */
async function readManifest(path: string, folder: string, url: string | undefined): Promise<Manifest | undefined> {
  let manifest: Manifest;
  try {
    const parsed: unknown = JSON.parse(await readFile(path, "utf8"));
    // A manifest someone else wrote is no more trusted than the hub: checked as a listing is.
    if (!isRecord(parsed) || !Array.isArray(parsed.files) || parsed.files.length === 0) return undefined;
    if (url !== undefined && parsed.url !== url) return undefined;
    manifest = { files: parsed.files.map((entry) => checkedFile(entry, "the cache", url === undefined)) };
  } catch {
    return undefined;
  }
  for (const file of manifest.files) {
    if ((await sizeOf(join(folder, file.path))) !== file.size) return undefined;
  }
  return manifest;
}
