/**
 * Counter-based random numbers: word `i` of a stream is a hash of (key, i), so any byte range
 * of a tensor can be produced on its own, and the output does not depend on how the writer
 * cuts the tensor into chunks.
 * @module
 */

/** Mixes a 32-bit value into a well-distributed one (the murmur3 finalizer constants). */
export function mix32(x: number): number {
  x ^= x >>> 16;
  x = Math.imul(x, 0x7feb352d);
  x ^= x >>> 15;
  x = Math.imul(x, 0x846ca68b);
  x ^= x >>> 16;
  return x >>> 0;
}

/** The key of an independent stream, derived from a seed and any number of labels (tensor index, layer...). */
export function streamKey(seed: number, ...labels: number[]): number {
  let k = mix32((seed >>> 0) ^ 0x5bd1e995);
  for (const label of labels) k = mix32((k + Math.imul(label >>> 0, 0x9e3779b9)) >>> 0);
  return k;
}

/** Word `index` of stream `key` (a splitmix-style counter hash). */
export function wordAt(key: number, index: number): number {
  // Fold the part of the index above 32 bits into the key, so streams longer than 16 GiB do not repeat.
  const high = Math.floor(index / 0x1_0000_0000);
  const k = high === 0 ? key : mix32((key ^ Math.imul(high, 0x85ebca6b)) >>> 0);
  return mix32((Math.imul(index >>> 0, 0x9e3779b9) + k) >>> 0);
}

/** Fills `out` with words `first`, `first + 1`, ... of stream `key`. */
export function fillWords(out: Uint32Array, key: number, first: number): void {
  const n = out.length;
  let i = 0;
  while (i < n) {
    // Within one 2^32-word span the folded key is constant: hash straight from the counter.
    const index = first + i;
    const span = Math.min(n - i, 0x1_0000_0000 - (index % 0x1_0000_0000));
    const high = Math.floor(index / 0x1_0000_0000);
    const k = high === 0 ? key : mix32((key ^ Math.imul(high, 0x85ebca6b)) >>> 0);
    let c = Math.imul(index >>> 0, 0x9e3779b9) + k;
    for (const end = i + span; i < end; i++) {
      let x = c >>> 0;
      x ^= x >>> 16;
      x = Math.imul(x, 0x7feb352d);
      x ^= x >>> 15;
      x = Math.imul(x, 0x846ca68b);
      x ^= x >>> 16;
      out[i] = x;
      c = (c + 0x9e3779b9) | 0;
    }
  }
}
