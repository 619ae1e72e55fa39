/**
 * The shape generate() and chat() return: chunks to iterate once, and `.result`, which runs the
 * stream to its end when nobody iterates it.
 * @module
 * @internal
 */
import { BloomeryError } from "./errors.js";

/** `iterator`'s chunks (iterable once) with `result`; `what` names the call in the error. */
export function iterableWithResult<C, R>(
  iterator: AsyncIterator<C>,
  result: Promise<R>,
  what: string,
): AsyncIterable<C> & { readonly result: Promise<R> } {
  let started = false;
  return {
    [Symbol.asyncIterator]() {
      if (started) throw new BloomeryError("INVALID_ARGUMENT", `a ${what} result can be iterated once`);
      started = true;
      return iterator;
    },
    get result() {
      if (!started) {
        started = true;
        void (async () => {
          for await (const chunk of { [Symbol.asyncIterator]: () => iterator }) void chunk;
        })().catch(() => {});
      }
      return result;
    },
  };
}
