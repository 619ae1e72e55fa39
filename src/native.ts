/**
 * The one place that loads the native addon (prebuilds/ or build/, through node-gyp-build).
 * Everything else asks {@link native} for it, so a missing or broken build fails in one
 * clear way.
 * @internal
 * @module
 */
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { BloomeryError, fromNativeError } from "./errors.js";
import type { RawGgufInfo } from "./gguf/types.js";
import type { SystemInfo, GgmlTypeInfo } from "./system.js";

/** The functions the addon exports (native/addon). */
export interface NativeAddon {
  getSystemInfo(): SystemInfo;
  ggmlTypes(): GgmlTypeInfo[];
  readGgufInfo(path: string): Promise<RawGgufInfo>;
}

let addon: NativeAddon | undefined;

/** The package root: src/ and dist/ both sit one level below it. */
export function packageRoot(): string {
  return join(dirname(fileURLToPath(import.meta.url)), "..");
}

export function native(): NativeAddon {
  if (addon) return addon;
  const require = createRequire(import.meta.url);
  try {
    const load = require("node-gyp-build") as (dir: string) => unknown;
    addon = load(packageRoot()) as NativeAddon;
  } catch (error) {
    throw new BloomeryError(
      "NATIVE_LOAD",
      `bloomery's native addon could not be loaded (${(error as Error).message}); run \`npm run build:native\``,
      { root: packageRoot() },
      { cause: error },
    );
  }
  return addon;
}

/** Calls into the addon, turning native errors into BloomeryError. */
export function callNative<T>(fn: (addon: NativeAddon) => T): T {
  const a = native();
  try {
    return fn(a);
  } catch (error) {
    throw fromNativeError(error);
  }
}

/** The async variant of {@link callNative}. */
export async function callNativeAsync<T>(fn: (addon: NativeAddon) => Promise<T>): Promise<T> {
  const a = native();
  try {
    return await fn(a);
  } catch (error) {
    throw fromNativeError(error);
  }
}
