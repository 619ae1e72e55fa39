// The chat output parsers (src/chat/): each case is fed whole, split at every point into two
// pieces, and one character at a time; every way must give the same text, reasoning and calls.
import { describe, expect, it } from "vitest";
import {
  AssistantMessageBuilder,
  ChatOutputParser,
  detectToolCallFormat,
  promptOpensThinking,
  type ChatOutputOptions,
} from "../src/chat/output.js";
import { BUILTIN_TEMPLATES } from "../src/chat/builtin-templates.js";
import type { AssistantMessage } from "../src/chat/output.js";
import type { ChatTool } from "../src/chat/types.js";

function parse(pieces: string[], options: ChatOutputOptions): AssistantMessage {
  let n = 0;
  const parser = new ChatOutputParser({ newId: () => `call_${n++}`, ...options });
  const message = new AssistantMessageBuilder();
  for (const piece of pieces) message.add(parser.push(piece));
  message.add(parser.finish());
  return message.message;
}

/** The message for `input`, asserting it is the same however the input is split. */
function parseEverySplit(input: string, options: ChatOutputOptions = {}): AssistantMessage {
  const whole = parse([input], options);
  for (let i = 0; i <= input.length; i++) {
    expect(parse([input.slice(0, i), input.slice(i)], options), `split at ${i}`).toEqual(whole);
  }
  expect(parse([...input], options), "one character at a time").toEqual(whole);
  return whole;
}

const weather: ChatTool = {
  type: "function",
  function: {
    name: "get_weather",
    parameters: {
      type: "object",
      properties: { city: { type: "string" }, days: { type: "integer" }, units: { type: "object" } },
    },
  },
};

describe("reasoning", () => {
  it("splits a think block from the answer, trimming the whitespace around it", () => {
    expect(parseEverySplit("<think>\nLet me see: 2+2.\n</think>\n\nIt is 4.")).toEqual({
      role: "assistant",
      content: "It is 4.",
      reasoning: "Let me see: 2+2.",
    });
  });

  it("reads reasoning from the start when the prompt opened the block", () => {
    expect(parseEverySplit("thinking < hard\n</think>\nanswer", { startInReasoning: true })).toEqual({
      role: "assistant",
      content: "answer",
      reasoning: "thinking < hard",
    });
  });

  it("keeps a block that never closes as reasoning, and an empty block as nothing", () => {
    expect(parseEverySplit("<think>still going </thi")).toEqual({
      role: "assistant",
      content: "",
      reasoning: "still going </thi",
    });
    expect(parseEverySplit("<think>\n\n</think>\n\nHi")).toEqual({ role: "assistant", content: "Hi" });
  });

  it("leaves think tags in the text when they do not open the answer, or when parsing is off", () => {
    expect(parseEverySplit("So <think>x</think> y")).toEqual({ role: "assistant", content: "So <think>x</think> y" });
    expect(parseEverySplit("<think>x</think>y", { parseReasoning: false })).toEqual({
      role: "assistant",
      content: "<think>x</think>y",
    });
    expect(parseEverySplit("  <thin")).toEqual({ role: "assistant", content: "  <thin" });
  });

  it("sees a prompt that leaves the think block open", () => {
    expect(promptOpensThinking("<|im_start|>assistant\n<think>\n")).toBe(true);
    expect(promptOpensThinking("<|im_start|>assistant\n<think>\n\n</think>\n\n")).toBe(false);
    expect(promptOpensThinking("<think>old</think><|im_start|>assistant\n")).toBe(false);
  });
});

describe("Hermes / Qwen3 tool calls", () => {
  const options: ChatOutputOptions = { toolCallFormat: "hermes" };

  it("parses calls, with reasoning before them and text around them", () => {
    const input =
      '<think>I need the weather.</think>\n\nChecking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>\n' +
      '<tool_call>\n{"name": "get_weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}\n</tool_call>';
    expect(parseEverySplit(input, options)).toEqual({
      role: "assistant",
      content: "Checking.",
      reasoning: "I need the weather.",
      toolCalls: [
        { id: "call_0", name: "get_weather", arguments: { city: "Paris", days: 2 } },
        { id: "call_1", name: "get_weather", arguments: { city: "Oslo" } },
      ],
    });
  });

  it("gives a malformed or unfinished call back as text, whitespace and tags included", () => {
    expect(parseEverySplit('a \n<tool_call>{"name": 3}</tool_call> b', options)).toEqual({
      role: "assistant",
      content: 'a \n<tool_call>{"name": 3}</tool_call> b',
    });
    expect(parseEverySplit('x <tool_call>{"name": "f", "argu', options)).toEqual({
      role: "assistant",
      content: 'x <tool_call>{"name": "f", "argu',
    });
    expect(parseEverySplit("<tool_call>not json</tool_call>", options).content).toBe("<tool_call>not json</tool_call>");
    expect(parseEverySplit("ends with <tool_", options).content).toBe("ends with <tool_");
  });

  it("leaves tool-call tags alone without a tool-call format", () => {
    const input = '<tool_call>{"name": "f", "arguments": {}}</tool_call>';
    expect(parseEverySplit(input)).toEqual({ role: "assistant", content: input });
  });
});

describe("Qwen3-Coder XML tool calls", () => {
  const options: ChatOutputOptions = { toolCallFormat: "qwen3-coder", tools: [weather] };

  it("parses parameters, typed by the tool's schema", () => {
    const input =
      "Sure.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n<parameter=days>\n3\n</parameter>\n" +
      '<parameter=units>\n{"temp": "C"}\n</parameter>\n</function>\n</tool_call>';
    expect(parseEverySplit(input, options)).toEqual({
      role: "assistant",
      content: "Sure.",
      toolCalls: [
        { id: "call_0", name: "get_weather", arguments: { city: "New York", days: 3, units: { temp: "C" } } },
      ],
    });
  });

  it("keeps a string parameter that looks like JSON a string, and refuses stray text in a call", () => {
    const call = "<tool_call><function=get_weather><parameter=city>42</parameter></function></tool_call>";
    expect(parseEverySplit(call, options).toolCalls?.[0]?.arguments).toEqual({ city: "42" });
    const stray = "<tool_call><function=get_weather>oops<parameter=city>x</parameter></function></tool_call>";
    expect(parseEverySplit(stray, options)).toEqual({ role: "assistant", content: stray });
  });
});

describe("Llama 3 JSON tool calls", () => {
  const options: ChatOutputOptions = { toolCallFormat: "llama3" };

  it("parses an answer that is a call, or calls after the python tag", () => {
    expect(
      parseEverySplit('{"type": "function", "name": "get_weather", "parameters": {"city": "Lima {x}"}}', options),
    ).toEqual({
      role: "assistant",
      content: "",
      toolCalls: [{ id: "call_0", name: "get_weather", arguments: { city: "Lima {x}" } }],
    });
    expect(
      parseEverySplit(
        '<|python_tag|>{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"q": "\\"}"}}',
        options,
      ).toolCalls,
    ).toEqual([
      { id: "call_0", name: "a", arguments: {} },
      { id: "call_1", name: "b", arguments: { q: '"}' } },
    ]);
  });

  it("keeps JSON that is not a call, prose, and an unfinished object as text", () => {
    expect(parseEverySplit('{"answer": 4} done', options)).toEqual({
      role: "assistant",
      content: '{"answer": 4} done',
    });
    expect(parseEverySplit("The weather {is} fine.", options).content).toBe("The weather {is} fine.");
    expect(parseEverySplit('<|python_tag|>{"name": "a", "param', options).content).toBe(
      '<|python_tag|>{"name": "a", "param',
    );
    expect(parseEverySplit("<|python_tag|>search()", options).content).toBe("<|python_tag|>search()");
  });
});

describe("format detection", () => {
  it("reads the format from the template's text", () => {
    expect(detectToolCallFormat("... <tool_call>\\n<function=x>\\n<parameter=y> ...")).toBe("qwen3-coder");
    expect(detectToolCallFormat("... <tool_call>{...}</tool_call> ...")).toBe("hermes");
    expect(detectToolCallFormat("<|start_header_id|>ipython<|end_header_id|> ... <|python_tag|>")).toBe("llama3");
    expect(detectToolCallFormat(BUILTIN_TEMPLATES.chatml)).toBe("hermes");
  });
});
