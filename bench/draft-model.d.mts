// Types of bench/draft-model.mjs.
export function writeDraftModel(source: string, path: string, expertsUsed?: number): Promise<string>;
