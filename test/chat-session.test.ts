// Session.chat end to end on the engine: the prompt from the chat template, the model's text
// parsed into reasoning and tool calls. The tiny models do not call tools by themselves: the
// tool-call test makes the engine write one with public sampling options (a logit bias ranks the
// call's tokens, a presence penalty over a short window moves on to the next one).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BloomeryError, loadModel, type ChatTool, type Model } from "../src/index.js";
import { writeSyntheticModel } from "../tools/synth/synth.js";
import { defaultModelPath } from "../tools/default-model.js";
import { forceText } from "./chat-helpers.js";

const dir = mkdtempSync(join(tmpdir(), "bloomery-chat-"));
const synthPath = join(dir, "tiny-qwen3moe.gguf");
let tiny: Model;
let synth: Model;

beforeAll(async () => {
  await writeSyntheticModel(synthPath, { preset: "tiny-qwen3moe", weightType: "Q8_0" });
  tiny = await loadModel(defaultModelPath(), { threads: 2 });
  synth = await loadModel(synthPath, { threads: 2 });
});

afterAll(() => {
  tiny?.dispose();
  synth?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

const weather: ChatTool = {
  type: "function",
  function: { name: "get_weather", description: "The weather in a city", parameters: { type: "object" } },
};
const question = [{ role: "user", content: "What is a river?" }];

describe("Session.chat", () => {
  it("without tools, answers what generate answers over the chat template", async () => {
    const session = tiny.createSession();
    const expected = (await session.generate(tiny.applyChatTemplate(question), { maxTokens: 24 }).result).text;
    // chat() starts from an empty context itself: the generation above stays in the session until then.
    const run = session.chat(question, { maxTokens: 24 });
    let streamed = "";
    for await (const chunk of run) {
      streamed += chunk.text;
      expect(chunk.reasoning).toBeUndefined();
    }
    const result = await run.result;
    expect(result.message).toEqual({ role: "assistant", content: expected });
    expect(streamed).toBe(expected);
    expect(result.text).toBe(expected);
    session.dispose();
  });

  it("reads the answer as reasoning when the template opens the think block in the prompt", async () => {
    const template = `${tiny.info.chatTemplate!}{%- if add_generation_prompt -%}{{- '<think>\\n' -}}{%- endif -%}`;
    const thinking = await loadModel(defaultModelPath(), { threads: 2, chatTemplate: template });
    try {
      const session = thinking.createSession();
      const raw = (await session.generate(thinking.applyChatTemplate(question), { maxTokens: 16 }).result).text;
      await session.reset();
      const run = session.chat(question, { maxTokens: 16 });
      let reasoning = "";
      for await (const chunk of run) reasoning += chunk.reasoning ?? "";
      expect(raw).not.toContain("</think>");
      expect(reasoning).toBe(raw.trim());
      expect((await run.result).message).toEqual({ role: "assistant", content: "", reasoning: raw.trim() });
    } finally {
      thinking.dispose();
    }
  });

  it("parses a tool call the engine writes, streamed as one whole call", async () => {
    const session = synth.createSession();
    const run = session.chat([{ role: "user", content: "Weather in Paris?" }], {
      tools: [weather],
      toolChoice: { name: "get_weather" },
      toolCallFormat: "qwen3-coder",
      ...forceText(synth, "</function></tool_call>"),
    });
    const calls = [];
    for await (const chunk of run) if (chunk.toolCalls) calls.push(...chunk.toolCalls);
    const result = await run.result;
    expect(result.text).toBe("<tool_call>\n<function=get_weather>\n</function></tool_call>");
    expect(result.message.content).toBe("");
    expect(result.message.toolCalls).toEqual([
      { id: expect.stringMatching(/^call_\w{24}$/), name: "get_weather", arguments: {} },
    ]);
    expect(calls).toEqual(result.message.toolCalls);
    session.dispose();
  });

  it("stops after the first call when parallel calls are off", async () => {
    const session = synth.createSession();
    const forced = forceText(synth, "</function></tool_call>");
    const options = {
      tools: [weather],
      toolChoice: { name: "get_weather" },
      toolCallFormat: "qwen3-coder" as const,
      ...forced,
      maxTokens: forced.maxTokens + 4,
    };
    const messages = [{ role: "user", content: "Weather?" }];
    const one = await session.chat(messages, { ...options, parallelToolCalls: false }).result;
    const all = await session.chat(messages, options).result;
    expect(one.message.toolCalls).toHaveLength(1);
    expect(one.stopReason).toBe("stop");
    expect(one.text).toBe("<tool_call>\n<function=get_weather>\n</function></tool_call>");
    // Without the limit the answer ends where the forced call's grammar does, at the end of the call.
    expect(all.stopReason).toBe("eos");
    expect(all.text).toBe(one.text);
    expect(all.message.toolCalls).toMatchObject([{ name: "get_weather", arguments: {} }]);
    session.dispose();
  });

  it("gives a forced call the model does not finish back as text", async () => {
    const session = tiny.createSession();
    const result = await session.chat(question, { tools: [weather], toolChoice: "required", maxTokens: 8 }).result;
    expect(result.message.toolCalls).toBeUndefined();
    expect(result.message.content.startsWith('<tool_call>\n{"name": "')).toBe(true);
    expect(result.message.content).toBe(result.text);
    session.dispose();
  });

  it("refuses a tool choice that names no offered tool", () => {
    const session = tiny.createSession();
    const refuse = (options: object) => {
      try {
        session.chat(question, options);
      } catch (error) {
        return (error as BloomeryError).code;
      }
      return "accepted";
    };
    expect(refuse({ tools: [weather], toolChoice: { name: "nope" } })).toBe("INVALID_ARGUMENT");
    expect(refuse({ toolChoice: "required" })).toBe("INVALID_ARGUMENT");
    expect(refuse({ tools: [weather], toolChoice: "sometimes" })).toBe("INVALID_ARGUMENT");
    session.dispose();
  });

  it("settles its result with the text so far when the consumer leaves the loop", async () => {
    const session = tiny.createSession();
    const run = session.chat(question, { maxTokens: 30 });
    let text = "";
    for await (const chunk of run) {
      text += chunk.text;
      if (chunk.tokens.length > 0 && text.length > 5) break;
    }
    const result = await run.result;
    expect(result.stopReason).toBe("abort");
    expect(result.message.content.startsWith(text)).toBe(true);
    session.dispose();
  });
});
