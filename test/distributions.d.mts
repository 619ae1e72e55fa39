// Types of test/distributions.mjs.
export const TIE_MARGIN: number;
export function sameTop(best: number, candidateBest: number): boolean;
export function walkTokens(bos: number, vocabSize: number, count: number): number[];
