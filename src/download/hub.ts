// The Hugging Face hub's side of a download: a `user/repo[:quant]` reference, the repo's file listing (the tree API,
// with each file's size and checksum), and the file(s) a quant or a name picks, split models whole. Nothing the hub
// (the endpoint) sends is trusted: the listing is read up to a limit and checked field by field.
import { BloomeryError } from "../errors.js";

/** The quantization picked when a reference names none, as llama-server's `-hf`. */
export const DEFAULT_QUANT = "Q4_K_M";

/** The hub stores no file over 50 GB: a listing that says more is not the hub's. */
export const MAX_FILE_BYTES = 64 * 1024 ** 3;

/** The largest file listing read: the hub's for a repo of thousands of files is a few MB. */
export const MAX_LISTING_BYTES = 32 * 1024 ** 2;

/** One file to download: its path in the repo (and the cache), its size and checksum. */
export interface RemoteFile {
  path: string;
  size: number;
  /**
   * `sha256:<hex>` for LFS files, `sha1-blob:<hex>` (git's blob id) for the others; none for a file from a plain URL
   * whose server gave no sha256 (its size alone is checked).
   */
  checksum?: string;
}

/** Where requests go and what they carry. */
export interface HubAccess {
  endpoint: string;
  token?: string;
  signal?: AbortSignal;
}

/** `user/repo[:quant]` split into the repo and the quant (DEFAULT_QUANT when none is named). */
export function parseRepoReference(reference: string): { repo: string; quant: string } {
  const [repo, quant, ...rest] = reference.split(":");
  if (!isRepoName(repo!) || rest.length > 0 || quant === "")
    throw new BloomeryError(
      "HUB_BAD_REPO",
      `a model on the hub is <user>/<model>[:quant], not ${JSON.stringify(reference)}`,
      { reference },
    );
  return { repo: repo!, quant: quant ?? DEFAULT_QUANT };
}

export function isRepoName(name: string): boolean {
  return /^[\w.-]+\/[\w.-]+$/.test(name);
}

export function authHeaders(access: HubAccess, extra: Record<string, string> = {}): Record<string, string> {
  return access.token ? { authorization: `Bearer ${access.token}`, ...extra } : extra;
}

/** fetch(), its failures (the network's, an abort) as BloomeryErrors. */
export async function request(
  url: string,
  access: HubAccess,
  what: string,
  init: { headers?: Record<string, string>; method?: string } = {},
): Promise<Response> {
  try {
    return await fetch(url, {
      headers: init.headers ?? authHeaders(access),
      ...(init.method ? { method: init.method } : {}),
      ...(access.signal ? { signal: access.signal } : {}),
    });
  } catch (error) {
    throwIfAborted(access.signal, what);
    throw new BloomeryError("HUB_REQUEST", `${what}: ${url}: ${(error as Error).message}`, { url });
  }
}

export function throwIfAborted(signal: AbortSignal | undefined, what: string): void {
  if (signal?.aborted) throw new BloomeryError("ABORTED", `${what}: the download was aborted`);
}

/** The repo's GGUF files, as its tree API lists them. */
export async function listRepoFiles(access: HubAccess, repo: string): Promise<RemoteFile[]> {
  const url = `${access.endpoint}/api/models/${repo}/tree/main?recursive=true`;
  const response = await request(url, access, repo);
  if (!response.ok) {
    await response.body?.cancel();
    throw new BloomeryError("HUB_REQUEST", `${repo}: listing its files answered HTTP ${response.status} (${url})`, {
      status: response.status,
    });
  }
  const bad = (what: string) =>
    new BloomeryError("HUB_BAD_LISTING", `${repo}: the hub's file listing ${what} (${url})`);
  const text = await readCapped(response, MAX_LISTING_BYTES, access.signal, () =>
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

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * A file of a listing (the hub's tree entry, or a cache manifest's file) with its path, size and checksum checked: a
 * path the cache can hold, a size from 0 to {@link MAX_FILE_BYTES}, a sha256 or git blob id in hex.
 */
export function checkedFile(entry: unknown, source: string, checksumRequired = true): RemoteFile {
  const refuse = (what: string) => new BloomeryError("HUB_BAD_LISTING", `${source} lists ${what}`);
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
  if (checksum === undefined) {
    if (checksumRequired) throw refuse(`${path} without a checksum`);
    return { path, size };
  }
  if (!/^(sha256:[0-9a-f]{64}|sha1-blob:[0-9a-f]{40})$/.test(checksum))
    throw refuse(`${path} with a checksum that is not a sha256 or git blob id: ${JSON.stringify(checksum)}`);
  return { path, size, checksum };
}

/** The response's body as text, refused (`tooLarge`) as soon as it passes `limit` bytes. */
async function readCapped(
  response: Response,
  limit: number,
  signal: AbortSignal | undefined,
  tooLarge: () => BloomeryError,
): Promise<string> {
  const chunks: Uint8Array[] = [];
  let bytes = 0;
  try {
    for await (const chunk of response.body ?? []) {
      bytes += chunk.length;
      if (bytes > limit) throw tooLarge();
      chunks.push(chunk);
    }
  } catch (error) {
    if (error instanceof BloomeryError) throw error;
    throwIfAborted(signal, response.url);
    throw new BloomeryError("HUB_REQUEST", `${response.url}: the answer broke off (${(error as Error).message})`);
  }
  return Buffer.concat(chunks).toString("utf8");
}

/** `-00001-of-00003.gguf`: one part of a split model, as llama.cpp's gguf-split names them. */
export const SPLIT = /-(\d{5})-of-(\d{5})\.gguf$/;

/** The file, and the other parts when it is part of a split model. */
function withParts(files: RemoteFile[], repo: string, first: RemoteFile): RemoteFile[] {
  const split = SPLIT.exec(first.path);
  if (!split) return [first];
  const base = first.path.slice(0, split.index);
  const parts = files
    .filter((f) => f.path.startsWith(base) && SPLIT.exec(f.path)?.index === base.length)
    .sort((a, b) => a.path.localeCompare(b.path));
  if (parts.length !== Number(split[2]) || SPLIT.exec(parts[0]!.path)![1] !== "00001")
    throw new BloomeryError(
      "HUB_NO_FILE",
      `${repo}: ${first.path} is part of a split model whose ${split[2]} parts the hub does not all list`,
    );
  return parts;
}

/** The repo's file `path` (all its parts, when split). */
export function pickByName(files: RemoteFile[], repo: string, path: string): RemoteFile[] {
  const file = files.find((f) => f.path === path);
  if (!file) throw new BloomeryError("HUB_NO_FILE", `${repo} has no file ${path}; its GGUF files: ${listing(files)}`);
  return withParts(files, repo, file);
}

/** The repo's one model of `quant` (all its parts, when split). */
export function pickByQuant(files: RemoteFile[], repo: string, quant: string): RemoteFile[] {
  // The tag stands alone in the name (IQ4_XS is not Q4_XS); projector files are not models.
  const tag = new RegExp(`(^|[^a-z0-9])${quant.replace(/[^\w]/g, "\\$&")}([^a-z0-9]|$)`, "i");
  const matches = files.filter((f) => tag.test(f.path) && !/mmproj/i.test(f.path));
  const models = new Map<string, RemoteFile>();
  for (const file of matches) {
    const split = SPLIT.exec(file.path);
    const key = split ? file.path.slice(0, split.index) : file.path;
    if (!split || split[1] === "00001" || !models.has(key)) models.set(key, file);
  }
  if (models.size === 0)
    throw new BloomeryError(
      "HUB_NO_FILE",
      `${repo} has no GGUF file for quant ${quant}; its GGUF files: ${listing(files)}`,
    );
  if (models.size > 1)
    throw new BloomeryError(
      "HUB_NO_FILE",
      `${repo}: quant ${quant} is ambiguous, it names ${[...models.keys()].join(", ")}; pick one by its file name`,
    );
  const [model] = [...models.values()];
  return withParts(files, repo, model!);
}

function listing(files: RemoteFile[]): string {
  return files.length === 0 ? "(none)" : files.map((f) => f.path).join(", ");
}
