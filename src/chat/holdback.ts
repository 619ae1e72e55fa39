/**
 * Helpers for streaming parsers that must hold back text which could begin a tag until the
 * next piece tells whether it does.
 * @module
 */
/** Length of the longest suffix of `text` that is a proper prefix of `tag` (0 when none). */
export function partialTagLength(text: string, tag: string): number {
  for (let n = Math.min(text.length, tag.length - 1); n > 0; n--) {
    if (text.endsWith(tag.slice(0, n))) return n;
  }
  return 0;
}

/** Length of the run of whitespace that ends `text`. */
export function trailingSpaceLength(text: string): number {
  return text.length - text.trimEnd().length;
}
