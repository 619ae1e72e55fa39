/**
 * Checks of what callers pass in, shared by the public API: option objects (no unknown keys),
 * file paths and token ids. Each refuses by name with BloomeryError INVALID_ARGUMENT.
 * @internal
 * @module
 */
import { BloomeryError } from "./errors.js";

/**
 * Refuses `options` unless it is undefined or a plain object whose keys are all in `known`: an
 * option that is misspelled or unsupported is refused, never ignored. `what` names the call.
 */
export function checkOptions(options: unknown, known: readonly string[], what: string): void {
  if (options === undefined) return;
  if (typeof options !== "object" || options === null || Array.isArray(options)) {
    throw new BloomeryError("INVALID_ARGUMENT", `the options of ${what} must be an object`, { options });
  }
  for (const key of Object.keys(options)) {
    if (!known.includes(key)) {
      const list = known.length > 0 ? `; it takes ${known.join(", ")}` : "; it takes none";
      throw new BloomeryError("INVALID_ARGUMENT", `${what} has no option "${key}"${list}`, { option: key });
    }
  }
}

/** The keys of an options interface, checked complete by the compiler: `optionKeys<T>()({ a: true, ... })`. */
export function optionKeys<T>(): (keys: Record<keyof T, true>) => string[] {
  return (keys) => Object.keys(keys);
}

/**
 * A file path for the native side: a non-empty string without NUL bytes (the C library would end
 * the path at the first one, and open another file, as Node's fs refuses too).
 */
export function checkPath(path: unknown, what: string): string {
  if (typeof path !== "string" || path === "") {
    throw new BloomeryError("INVALID_ARGUMENT", `${what}: the path must be a non-empty string`, { path });
  }
  if (path.includes("\0")) {
    throw new BloomeryError("INVALID_ARGUMENT", `${what}: the path contains a NUL byte`, { path });
  }
  return path;
}

/**
 * `tokens` as an Int32Array, each an integer from 0 to vocabSize - 1: a number of another kind
 * (5.9, 2^32 + 5, NaN), a string or null is refused, naming its index, rather than converted
 * to another token.
 */
export function tokenIds(tokens: unknown, vocabSize: number, what: string): Int32Array {
  const list = tokens as ArrayLike<unknown> | null;
  if (typeof list !== "object" || list === null || !Number.isSafeInteger(list.length) || list.length < 0) {
    throw new BloomeryError("INVALID_ARGUMENT", `${what} must be an array of token ids`);
  }
  const out = new Int32Array(list.length);
  for (let i = 0; i < list.length; i++) {
    const id = list[i];
    if (typeof id !== "number" || !Number.isInteger(id) || id < 0 || id >= vocabSize) {
      throw new BloomeryError(
        "INVALID_ARGUMENT",
        `${what}[${i}] is ${typeof id === "string" ? JSON.stringify(id) : String(id)}, not a token id (an integer from 0 to ${vocabSize - 1})`,
        { index: i, token: id },
      );
    }
    out[i] = id;
  }
  return out;
}

/** Duck-typed, as `await` reads a value: anything with a `then` method. */
export function isPromiseLike(value: unknown): value is PromiseLike<unknown> {
  return typeof value === "object" && value !== null && typeof (value as PromiseLike<unknown>).then === "function";
}
