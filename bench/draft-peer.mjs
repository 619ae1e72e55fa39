// The peer's half of bench/draft.mjs --peer, in a process of its own (as bench/cpu.mjs runs each
// engine): llama.cpp through node-llama-cpp's CPU build, decoding greedily from the same token ids
// without a token predictor and with the one that matches the case's draft source
// (InputLookupTokenPredictor for n-gram drafts, DraftSequenceTokenPredictor over the same draft
// model file), one after the other, each as many tokens as bloomery generated. Prints one JSON line.
//
//   node bench/draft-peer.mjs '{"model":…,"draftModel":…,"threads":1,"ids":[…],"count":64,"source":"ngram"}'
import { performance } from "node:perf_hooks";
import { DraftSequenceTokenPredictor, getLlama, InputLookupTokenPredictor, LlamaLogLevel } from "node-llama-cpp";

const job = JSON.parse(process.argv[2]);
if (!["ngram", "model"].includes(job.source)) throw new Error(`no peer for draft source ${job.source}`);
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: job.model });
const draftModel = job.source === "model" ? await llama.loadModel({ modelPath: job.draftModel }) : undefined;
const contextSize = job.ids.length + job.count + 64;

async function decode(predicted) {
  const context = await model.createContext({ contextSize, threads: job.threads });
  const draftContext =
    predicted && draftModel ? await draftModel.createContext({ contextSize, threads: job.threads }) : undefined;
  const tokenPredictor = !predicted
    ? undefined
    : draftContext
      ? new DraftSequenceTokenPredictor(draftContext.getSequence())
      : new InputLookupTokenPredictor();
  // The input-lookup predictor drafts from the tokens it is given as the input, as LlamaChat gives it the prompt.
  if (tokenPredictor instanceof InputLookupTokenPredictor) tokenPredictor.updateInputTokens(job.ids);
  const sequence = context.getSequence(tokenPredictor ? { tokenPredictor } : {});
  const tokens = [];
  let first = 0;
  for await (const token of sequence.evaluate(job.ids, { temperature: 0, yieldEogToken: true })) {
    if (tokens.length === 0) first = performance.now();
    tokens.push(token);
    if (tokens.length >= job.count) break;
  }
  const seconds = (performance.now() - first) / 1000;
  const { validated, refuted } = sequence.tokenPredictions;
  await context.dispose();
  await draftContext?.dispose();
  return { tokens, rate: (tokens.length - 1) / seconds, drafted: validated + refuted, kept: validated };
}

const none = await decode(false);
const drafts = await decode(true);
process.stdout.write(`${JSON.stringify({ none, drafts })}\n`);
await draftModel?.dispose();
await model.dispose();
await llama.dispose();
