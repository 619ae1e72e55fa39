// gpt-oss's harmony format: its template (llama.cpp's copy of the model's, rendered through
// @huggingface/jinja) with reasoning_effort and past reasoning and calls, and the output parser:
// the analysis channel as reasoning, the final channel as the answer, commentary calls (the
// recipient in the channel's header or the role's) as tool calls, streamed in pieces of any size.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import {
  AssistantMessageBuilder,
  ChatOutputParser,
  detectToolCallFormat,
  forcedCallPrefix,
  formatMarkers,
} from "../src/chat/output.js";
import { ChatTemplate } from "../src/chat/template.js";
import type { ChatMessage, ChatTool } from "../src/chat/types.js";

const template = readFileSync(
  join(dirname(fileURLToPath(import.meta.url)), "chat-templates", "openai-gpt-oss-120b.jinja"),
  "utf8",
);
const TOKENS = { bosToken: "<|startoftext|>", eosToken: "<|return|>" };

const weather: ChatTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "The weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
};

/** The message the parser makes of `pieces`, pushed one after another. */
function parse(pieces: string[], parseReasoning = true) {
  const parser = new ChatOutputParser({ toolCallFormat: "harmony", parseReasoning, newId: () => "call_new" });
  const message = new AssistantMessageBuilder();
  for (const piece of pieces) message.add(parser.push(piece));
  message.add(parser.finish());
  return message.message;
}

/** The message of `text` must not depend on how it is split: whole, per character, and in two at every point. */
function parseEverySplit(text: string, parseReasoning = true) {
  const whole = parse([text], parseReasoning);
  expect(parse([...text], parseReasoning)).toEqual(whole);
  for (let i = 1; i < text.length; i++) {
    expect(parse([text.slice(0, i), text.slice(i)], parseReasoning), `split at ${i}`).toEqual(whole);
  }
  return whole;
}

describe("harmony output", () => {
  it("splits the analysis channel into reasoning and the final channel into the answer", () => {
    const text = "<|channel|>analysis<|message|>User greets.<|end|><|start|>assistant<|channel|>final<|message|>Hello!";
    expect(parseEverySplit(text)).toEqual({ role: "assistant", content: "Hello!", reasoning: "User greets." });
    // A message the model did not end with <|end|> ends at the next one's <|start|>.
    const unended = "<|channel|>analysis<|message|>Hm<|start|>assistant<|channel|>final<|message|>Hi";
    expect(parseEverySplit(unended)).toEqual({ role: "assistant", content: "Hi", reasoning: "Hm" });
  });

  it("reads a call whose recipient is in the channel's header, or in the role's", () => {
    const analysis = "<|channel|>analysis<|message|>Need weather.<|end|>";
    for (const call of [
      '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Rome"}',
      '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Rome"}',
    ]) {
      expect(parseEverySplit(analysis + call)).toEqual({
        role: "assistant",
        content: "",
        reasoning: "Need weather.",
        toolCalls: [{ id: "call_new", name: "get_weather", arguments: { city: "Rome" } }],
      });
    }
    // The turn's first message, right after the prompt's `<|start|>assistant`, with the recipient in the role's header.
    expect(parseEverySplit(' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Rome"}')).toEqual({
      role: "assistant",
      content: "",
      toolCalls: [{ id: "call_new", name: "get_weather", arguments: { city: "Rome" } }],
    });
    // Text that only begins like a recipient is answer text.
    expect(parseEverySplit(" to be sure")).toEqual({ role: "assistant", content: " to be sure" });
  });

  it("shows a preamble (commentary to no one) as answer text, and text before any header", () => {
    const preamble =
      "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>final<|message|> Done";
    expect(parseEverySplit(preamble)).toEqual({ role: "assistant", content: "Checking. Done" });
    expect(parseEverySplit("Just text, no channel")).toEqual({ role: "assistant", content: "Just text, no channel" });
  });

  it("gives back a call whose arguments are not a JSON object as the text it was", () => {
    const call = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{oops";
    expect(parseEverySplit(call)).toEqual({ role: "assistant", content: call });
  });

  it("leaves the analysis in the answer with parseReasoning false", () => {
    const text = "<|channel|>analysis<|message|>Hmm.<|end|><|start|>assistant<|channel|>final<|message|>Hi";
    expect(parseEverySplit(text, false)).toEqual({ role: "assistant", content: "Hmm.Hi" });
  });

  it("reads a forced call's opening and the model's rest of it", () => {
    const prefix = forcedCallPrefix("harmony", { name: "get_weather" }, false);
    expect(parse([prefix, '{"city": "Oslo"}']).toolCalls).toEqual([
      { id: "call_new", name: "get_weather", arguments: { city: "Oslo" } },
    ]);
    const any = forcedCallPrefix("harmony", "required", false);
    expect(parse([any, 'get_weather <|constrain|>json<|message|>{"city": "Oslo"}']).toolCalls).toHaveLength(1);
  });
});

describe("gpt-oss's template", () => {
  const chat = new ChatTemplate(template);

  it("speaks harmony, whose control tokens a chat shows", () => {
    expect(detectToolCallFormat(template)).toBe("harmony");
    expect(formatMarkers("harmony")).toEqual(
      expect.arrayContaining(["<|channel|>", "<|message|>", "<|end|>", "<|start|>", "<|constrain|>"]),
    );
  });

  it("takes reasoning_effort from the template variables", () => {
    const messages: ChatMessage[] = [{ role: "user", content: "Hi" }];
    expect(chat.render(messages, TOKENS)).toContain("Reasoning: medium");
    expect(chat.render(messages, TOKENS, { templateKwargs: { reasoning_effort: "high" } })).toContain(
      "Reasoning: high",
    );
    expect(chat.render(messages, TOKENS).endsWith("<|start|>assistant")).toBe(true);
  });

  it("renders a past turn's reasoning and call as harmony, which reads back as that turn", () => {
    const call = { id: "call_1", name: "get_weather", arguments: { city: "Rome" } };
    const messages: ChatMessage[] = [
      { role: "user", content: "Weather in Rome?" },
      { role: "assistant", content: "", reasoning: "Need weather.", toolCalls: [call] },
      { role: "tool", content: "Sunny", toolCallId: "call_1", name: "get_weather" },
    ];
    const prompt = chat.render(messages, TOKENS, { tools: [weather] });
    const turn = prompt.slice(prompt.indexOf("<|start|>assistant") + "<|start|>assistant".length);
    const written = turn.slice(0, turn.indexOf("<|call|>"));
    expect(written).toContain("<|channel|>analysis<|message|>Need weather.<|end|>");
    expect(parse([written])).toEqual({
      role: "assistant",
      content: "",
      reasoning: "Need weather.",
      toolCalls: [{ ...call, id: "call_new" }],
    });
  });
});
