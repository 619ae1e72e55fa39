// One file's download into the cache: written to `<file>.partial`, resumed with an HTTP Range after a cut, counted
// as it streams and cut at the size the listing gave (a hostile endpoint can neither fill the disk nor crash the
// process), and renamed into place only once its size and checksum match: a file in the cache is a verified file.
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { mkdir, open, rename, rm, stat, statfs, truncate } from "node:fs/promises";
import { dirname } from "node:path";
import { BloomeryError, type BloomeryErrorCode } from "../errors.js";
import { authHeaders, request, throwIfAborted, type HubAccess, type RemoteFile } from "./hub.js";

/** The bytes of one file so far: `bytes` of `totalBytes` (a resumed download starts above 0). */
export type BytesReceived = (bytes: number, totalBytes: number) => void;

/**
 * Downloads `url` into `target` through `<target>.partial`, resuming it, then verifies it against `file`'s size and
 * checksum (when it has one). `what` names the file in messages.
 */
export async function downloadFile(
  access: HubAccess,
  url: string,
  file: RemoteFile,
  target: string,
  what: string,
  onBytes: BytesReceived,
): Promise<void> {
  if ((await sizeOf(target)) === file.size && (await verifies(target, file))) return;
  await mkdir(dirname(target), { recursive: true });
  const partial = `${target}.partial`;
  let have = await sizeOf(partial);
  if (have > file.size) {
    await truncate(partial, 0);
    have = 0;
  }
  if (have < file.size) {
    const response = await request(url, access, what, {
      headers: authHeaders(access, have > 0 ? { range: `bytes=${have}-` } : {}),
    });
    // 206 continues the partial file; a 200 is the whole file, so the partial starts over.
    const resumed = response.status === 206;
    const refuse = async (code: BloomeryErrorCode, message: string) => {
      await response.body?.cancel();
      return new BloomeryError(code, `${what}: ${message} (${url})`, { url });
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
    onBytes(start, file.size);
    await receive(response, partial, resumed, expected, what, url, access.signal, (received) =>
      onBytes(start + received, file.size),
    );
  }
  const size = await sizeOf(partial);
  const sum = file.checksum === undefined ? undefined : await checksum(partial, file.checksum);
  if (size !== file.size || sum !== file.checksum) {
    await rm(partial, { force: true });
    throw new BloomeryError(
      "HUB_CHECKSUM",
      `${what}: the download does not match the hub's listing (${size} bytes, ${sum ?? "no checksum"}; ` +
        `expected ${file.size} bytes, ${file.checksum ?? "no checksum"}); removed it`,
      { url },
    );
  }
  await rename(partial, target);
}

/**
 * Writes the body to `partial` (appended when `resumed`), counting its bytes as they come: past `expected` it stops
 * reading, removes the partial file and refuses, so no more than the listing's size is ever written. A cut or an
 * abort keeps the partial file for the next run to resume.
 */
async function receive(
  response: Response,
  partial: string,
  resumed: boolean,
  expected: number,
  what: string,
  url: string,
  signal: AbortSignal | undefined,
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
    throwIfAborted(signal, what);
    throw new BloomeryError(
      "HUB_DOWNLOAD_BROKEN",
      `${what}: the download broke off (${(error as Error).message}); run again to resume it`,
      { url },
    );
  } finally {
    await out.close();
  }
  if (oversized) {
    await rm(partial, { force: true });
    throw new BloomeryError(
      "HUB_DOWNLOAD_SIZE",
      `${what}: the download ran past the ${expected} bytes the listing gives it; stopped it and removed the partial file (${url})`,
      { url },
    );
  }
  throwIfAborted(signal, what);
}

/** Refuses a download the cache's disk has no room for (what the files still lack, partial files counted). */
export async function checkRoom(
  folder: string,
  what: string,
  files: { target: string; size: number }[],
): Promise<void> {
  let needed = 0;
  for (const file of files) {
    if ((await sizeOf(file.target)) === file.size) continue;
    needed += file.size - Math.min(Math.max(await sizeOf(`${file.target}.partial`), 0), file.size);
  }
  const disk = await statfs(folder);
  const free = disk.bavail * disk.bsize;
  if (needed > free)
    throw new BloomeryError(
      "HUB_NO_SPACE",
      `${what}: the download needs ${needed} bytes and the disk of ${folder} has ${free} free`,
      { needed, free },
    );
}

export async function sizeOf(path: string): Promise<number> {
  return stat(path).then(
    (s) => s.size,
    () => -1,
  );
}

async function verifies(path: string, file: RemoteFile): Promise<boolean> {
  return file.checksum === undefined || (await checksum(path, file.checksum)) === file.checksum;
}

/** The file's checksum in the form `expected` has: sha256 for LFS files, git's blob id otherwise. */
async function checksum(path: string, expected: string): Promise<string> {
  const sha256 = expected.startsWith("sha256:");
  const hash = createHash(sha256 ? "sha256" : "sha1");
  if (!sha256) hash.update(`blob ${(await stat(path)).size}\0`);
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return `${sha256 ? "sha256" : "sha1-blob"}:${hash.digest("hex")}`;
}
