import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel, type GenerateChunk, type GenerateOptions, type Model } from "../src/index.js";
import { StopStrings } from "../src/sampling.js";

// Stop strings: matched on the detokenized text, found when they span several chunks, and never
// emitted, not even in part. The greedy answer of the default model (text that does not change)
// gives stop strings that cross token boundaries.
const MODEL = "models/bloomery-tiny-moe-Q8_0.gguf";
let model: Model;
let prompt: string;
let greedyText: string;
let greedyPieces: string[];
let greedyStop: string;

beforeAll(async () => {
  model = await loadModel(MODEL, { threads: 2, contextSize: 256 });
  prompt = model.applyChatTemplate([{ role: "user", content: "What is a river?" }]);
  const run = await collect({ maxTokens: 40 });
  greedyText = run.text;
  greedyPieces = run.chunks.map((c) => c.text);
  greedyStop = run.result.stopReason;
});

afterAll(() => model?.dispose());

async function collect(options: GenerateOptions) {
  const run = model.createSession().generate(prompt, options);
  const chunks: GenerateChunk[] = [];
  for await (const chunk of run) chunks.push(chunk);
  return { chunks, text: chunks.map((c) => c.text).join(""), result: await run.result };
}

describe("stop strings in generation", () => {
  it("end generation at a stop string that spans tokens and ends inside one, without emitting it", async () => {
    // "A river is a large area ...": the stop string spans " is", " a" and the start of " large".
    expect(greedyPieces.slice(0, 5)).toEqual(["A", " river", " is", " a", " large"]);
    const stop = " is a lar";
    const run = await collect({ maxTokens: 40, stop });
    expect(run.result.stopReason).toBe("stop");
    expect(run.text).toBe("A river");
    expect(run.result.text).toBe("A river");
    // The tokens that made up the stop string came out, with no text.
    expect(run.result.tokens).toHaveLength(5);
    expect(run.chunks.map((c) => c.text)).toEqual(["A", " river", "", "", ""]);
  });

  it("release held-back text when it turns out not to be a stop string", async () => {
    // " river" starts both stops, but neither follows: nothing is lost or reordered.
    const run = await collect({ maxTokens: 40, stop: [" river!", " is a small"] });
    expect(run.result.stopReason).toBe(greedyStop);
    expect(run.text).toBe(greedyText);
    expect(run.result.text).toBe(greedyText);
    // Held back while it could still begin " is a small", " is" came out with " large".
    const isAt = run.chunks.findIndex((c) => c.text.includes(" is"));
    expect(run.chunks[isAt]!.text).toBe(" is a large");
  });

  it("stop at the earliest of several stop strings", async () => {
    const run = await collect({ maxTokens: 40, stop: ["stream", "large area"] });
    expect(run.result.stopReason).toBe("stop");
    expect(run.text).toBe("A river is a ");
  });
});

describe("StopStrings", () => {
  it("holds back the longest tail that begins a stop string, and finds one split over pieces", () => {
    const stops = new StopStrings(["</end>", "STOP"]);
    expect(stops.push("hello </")).toEqual({ text: "hello ", stopped: false });
    expect(stops.push("e")).toEqual({ text: "", stopped: false });
    expect(stops.push("x")).toEqual({ text: "</ex", stopped: false });
    expect(stops.push("ST")).toEqual({ text: "", stopped: false });
    expect(stops.push("OP and more")).toEqual({ text: "", stopped: true });
    // Two stop strings completed by one piece: the one that starts first wins.
    expect(new StopStrings(["STOP", "</end>"]).push("a STOP b </end>")).toEqual({ text: "a ", stopped: true });
    const tail = new StopStrings("abc");
    expect(tail.push("xxab")).toEqual({ text: "xx", stopped: false });
    expect(tail.flush()).toBe("ab");
    expect(new StopStrings(undefined).push("abc")).toEqual({ text: "abc", stopped: false });
  });
});
