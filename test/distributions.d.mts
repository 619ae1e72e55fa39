// Types of test/distributions.mjs.
export const TIE_MARGIN: number;
export function sameTop(best: number, candidateBest: number): boolean;
export function agreementBar(floorTop1: number, floorKl: number): { top1: number; kl: number };
export function walkTokens(bos: number, vocabSize: number, count: number): number[];
