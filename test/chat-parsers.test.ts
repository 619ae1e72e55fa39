// The chat output parsers (src/chat/): each case is fed whole, split at every point into two
// pieces, and one character at a time; every way must give the same text, reasoning and calls.
import { describe, expect, it } from "vitest";
import {
  AssistantMessageBuilder,
  ChatOutputParser,
  detectToolCallFormat,
  forcedCallPrefix,
  promptOpensThinking,
  type ChatOutputOptions,
  type ToolCallFormat,
} from "../src/chat/output.js";
import { schemaAdmitsString } from "../src/chat/tool-call-values.js";
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

  it("reads Qwen3.5's reasoning, which the prompt opened, ended by </think> or by a call", () => {
    const call = "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>";
    const expected = {
      role: "assistant",
      content: "",
      reasoning: "I'm\nthinking",
      toolCalls: [{ id: "call_0", name: "get_weather", arguments: { city: "Oslo" } }],
    };
    const reasoning = { ...options, startInReasoning: true };
    expect(parseEverySplit(`I'm\nthinking\n</think>\n\n${call}`, reasoning)).toEqual(expected);
    expect(parseEverySplit(`I'm\nthinking\n${call}`, reasoning)).toEqual(expected);
    // A value's own trailing newline is kept: only the one before the close tag is layout.
    const code =
      "<tool_call>\n<function=get_weather>\n<parameter=city>\n  x\n\n</parameter>\n</function>\n</tool_call>";
    expect(parseEverySplit(code, options).toolCalls?.[0]?.arguments).toEqual({ city: "  x\n" });
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

describe("GLM-4.5 / 4.6 / 4.7 tool calls", () => {
  const options: ChatOutputOptions = { toolCallFormat: "glm-4.5", tools: [weather] };

  it("parses calls with and without newlines, values typed by the schema, and calls without arguments", () => {
    const input =
      "<think>Need it.</think>\nChecking.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>New York</arg_value>\n" +
      '<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n<arg_key>units</arg_key>\n<arg_value>{"temp": "C"}</arg_value>\n</tool_call>' +
      "<tool_call>get_weather<arg_key>city</arg_key><arg_value>42</arg_value></tool_call>\n<tool_call>get_weather</tool_call>";
    expect(parseEverySplit(input, options)).toEqual({
      role: "assistant",
      content: "Checking.",
      reasoning: "Need it.",
      toolCalls: [
        { id: "call_0", name: "get_weather", arguments: { city: "New York", days: 3, units: { temp: "C" } } },
        { id: "call_1", name: "get_weather", arguments: { city: "42" } },
        { id: "call_2", name: "get_weather", arguments: {} },
      ],
    });
  });

  it("reads a value whose schema is not a string as JSON, and as text when it is not JSON", () => {
    const call =
      "<tool_call>f<arg_key>n</arg_key><arg_value>[1, 2]</arg_value><arg_key>w</arg_key><arg_value>two words</arg_value></tool_call>";
    expect(parseEverySplit(call, options).toolCalls?.[0]?.arguments).toEqual({ n: [1, 2], w: "two words" });
  });

  it("gives a malformed call back as text", () => {
    for (const bad of [
      "<tool_call>get weather<arg_key>city</arg_key><arg_value>x</arg_value></tool_call>",
      "<tool_call>get_weather<arg_key>city</arg_key>oops<arg_value>x</arg_value></tool_call>",
      "<tool_call>get_weather<arg_key>city</arg_key><arg_value>x</arg_value> stray</tool_call>",
      "<tool_call>\n</tool_call>",
    ]) {
      expect(parseEverySplit(`a ${bad}`, options)).toEqual({ role: "assistant", content: `a ${bad}` });
    }
  });
});

describe("DeepSeek tool calls", () => {
  const v31: ChatOutputOptions = { toolCallFormat: "deepseek-v3.1" };
  const r1: ChatOutputOptions = { toolCallFormat: "deepseek-r1" };
  const section = (...calls: string[]) =>
    `<｜tool▁calls▁begin｜>${calls.map((c) => `<｜tool▁call▁begin｜>${c}<｜tool▁call▁end｜>`).join("")}<｜tool▁calls▁end｜>`;

  it("parses V3.1's section of calls after reasoning the prompt opened, as llama.cpp's tests write them", () => {
    const input =
      "REASONING</think>CONTENT" +
      section('get_time<｜tool▁sep｜>{"city": "Paris"}', 'get_weather<｜tool▁sep｜>{"city": "Paris"}');
    expect(parseEverySplit(input, { ...v31, startInReasoning: true })).toEqual({
      role: "assistant",
      content: "CONTENT",
      reasoning: "REASONING",
      toolCalls: [
        { id: "call_0", name: "get_time", arguments: { city: "Paris" } },
        { id: "call_1", name: "get_weather", arguments: { city: "Paris" } },
      ],
    });
  });

  it("parses R1's fenced calls, with or without a newline before the closing fence", () => {
    const input =
      "</think>" +
      section(
        'function<｜tool▁sep｜>special_function\n```json\n{"arg1": 1}```',
        "function<｜tool▁sep｜>f\n```json\n{}\n```",
      );
    expect(parseEverySplit(input, { ...r1, startInReasoning: true })).toEqual({
      role: "assistant",
      content: "",
      toolCalls: [
        { id: "call_0", name: "special_function", arguments: { arg1: 1 } },
        { id: "call_1", name: "f", arguments: {} },
      ],
    });
  });

  it("gives a section with any malformed call, or one left open, back as text", () => {
    for (const [bad, options] of [
      [section('get_time<｜tool▁sep｜>{"city": "Paris"}', "get_time<｜tool▁sep｜>[1]"), v31],
      [section('get time<｜tool▁sep｜>{"city": "Paris"}'), v31],
      [section('function<｜tool▁sep｜>f\n{"a": 1}'), r1],
      [
        section('get_time<｜tool▁sep｜>{"city": "Paris"}').replace("<｜tool▁calls▁end｜>", "x<｜tool▁calls▁end｜>"),
        v31,
      ],
    ] as const) {
      const message = parseEverySplit(`Hi ${bad}`, options);
      expect(message.toolCalls, bad).toBeUndefined();
      expect(message.content).toBe(`Hi ${bad}`);
    }
    const open =
      '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜>';
    expect(parseEverySplit(open, v31)).toEqual({ role: "assistant", content: open });
  });
});

describe("Kimi-K2 tool calls", () => {
  const options: ChatOutputOptions = { toolCallFormat: "kimi-k2" };
  const call = (id: string, args: string) =>
    `<|tool_call_begin|>${id}<|tool_call_argument_begin|>${args}<|tool_call_end|>`;
  const section = (...calls: string[]) => `<|tool_calls_section_begin|>${calls.join("")}<|tool_calls_section_end|>`;

  it("keeps the model's own call ids", () => {
    const input =
      "<think>I need two functions</think>Hello" +
      section(
        call("functions.special_function:0", '{"arg1": 1}'),
        call("functions.python:1", '{"code": "print(\'hey\')"}'),
      );
    expect(parseEverySplit(input, options)).toEqual({
      role: "assistant",
      content: "Hello",
      reasoning: "I need two functions",
      toolCalls: [
        { id: "functions.special_function:0", name: "special_function", arguments: { arg1: 1 } },
        { id: "functions.python:1", name: "python", arguments: { code: "print('hey')" } },
      ],
    });
  });

  it("ends reasoning that the model did not close where its calls begin", () => {
    const input = "<think>I need to call it" + section(call("functions.f:0", "{}"));
    expect(parseEverySplit(input, options)).toEqual({
      role: "assistant",
      content: "",
      reasoning: "I need to call it",
      toolCalls: [{ id: "functions.f:0", name: "f", arguments: {} }],
    });
  });

  it("gives a call with a malformed id or arguments back as text", () => {
    for (const bad of [
      section(call("get_weather:0", "{}")),
      section(call("functions.f:x", "{}")),
      section(call("functions.f:0", "{oops}")),
      section(call("functions.f:0", "{}") + "text"),
    ]) {
      expect(parseEverySplit(bad, options)).toEqual({ role: "assistant", content: bad });
    }
  });
});

describe("MiniMax-M2 tool calls", () => {
  const options: ChatOutputOptions = { toolCallFormat: "minimax-m2", tools: [weather], startInReasoning: true };
  const invoke = (name: string, params: [string, string][]) =>
    `<invoke name="${name}">\n${params.map(([k, v]) => `<parameter name="${k}">${v}</parameter>\n`).join("")}</invoke>\n`;
  const section = (...calls: string[]) => `<minimax:tool_call>\n${calls.join("")}</minimax:tool_call>`;

  it("reads the reasoning the prompt opened, the answer, and a section of calls typed by the schema", () => {
    const input =
      "Two cities.\n</think>\n\nChecking." +
      section(
        invoke("get_weather", [
          ["city", "Paris"],
          ["days", "2"],
        ]),
        invoke("get_weather", [["city", "42"]]),
      );
    const message = parseEverySplit(input, options);
    expect(message.reasoning).toBe("Two cities.");
    expect(message.content).toBe("Checking.");
    expect(message.toolCalls?.map(({ name, arguments: args }) => ({ name, args }))).toEqual([
      { name: "get_weather", args: { city: "Paris", days: 2 } },
      // The schema makes city a string: "42" stays text.
      { name: "get_weather", args: { city: "42" } },
    ]);
  });

  it("reads a call without parameters", () => {
    const message = parseEverySplit("\n</think>\n\n" + section(invoke("empty_args", [])), options);
    expect(message.toolCalls?.map(({ name, arguments: args }) => ({ name, args }))).toEqual([
      { name: "empty_args", args: {} },
    ]);
  });

  it("gives a malformed section back as text", () => {
    for (const bad of [
      section('<invoke name="f">\n<parameter name="a">1</parameter>\ntext</invoke>\n'),
      section('<invoke name="f">\n<parameter name="a">1</parameter>\n'),
      section("<invoke>\n</invoke>\n"),
      section(invoke("f", []) + "text"),
    ]) {
      const message = parseEverySplit(`</think>Hi ${bad}`, options);
      expect(message.toolCalls, bad).toBeUndefined();
      expect(message.content).toBe(`Hi ${bad}`);
    }
  });
});

describe("DSML tool calls (DeepSeek-V3.2, DeepSeek-V4)", () => {
  const param = (key: string, value: string, isString: boolean) =>
    `<｜DSML｜parameter name="${key}" string="${isString}">${value}</｜DSML｜parameter>\n`;
  const invoke = (name: string, ...params: string[]) =>
    `<｜DSML｜invoke name="${name}">\n${params.join("")}</｜DSML｜invoke>\n`;
  const section = (block: string, ...calls: string[]) => `<｜DSML｜${block}>\n${calls.join("")}</｜DSML｜${block}>`;
  const calls = (message: AssistantMessage) => message.toolCalls?.map(({ name, arguments: args }) => ({ name, args }));

  it("reads the reasoning, the answer before the calls, and each value as its string attribute types it", () => {
    for (const [format, block] of [
      ["deepseek-v3.2", "function_calls"],
      ["deepseek-v4", "tool_calls"],
    ] as const) {
      const input =
        "Thinking about it</think>Let me call the function.\n\n" +
        section(
          block,
          invoke("get_weather", param("city", "Paris", true), param("days", "2", false)),
          // The call states its types: "42" as a string stays text, JSON values are parsed.
          invoke(
            "get_weather",
            param("city", "42", true),
            param("units", '{"scale": "C", "round": [1, -14.5]}', false),
          ),
          invoke("toggle", param("enabled", "true", false), param("ref", "-14", false), param("note", "3.14", true)),
        );
      const message = parseEverySplit(input, { toolCallFormat: format, tools: [weather], startInReasoning: true });
      expect(message.reasoning, format).toBe("Thinking about it");
      expect(message.content, format).toBe("Let me call the function.");
      expect(calls(message), format).toEqual([
        { name: "get_weather", args: { city: "Paris", days: 2 } },
        { name: "get_weather", args: { city: "42", units: { scale: "C", round: [1, -14.5] } } },
        { name: "toggle", args: { enabled: true, ref: -14, note: "3.14" } },
      ]);
    }
  });

  it("ends the reasoning where a section of calls opens inside the think block", () => {
    const input = "Let me check" + section("function_calls", invoke("get_weather", param("city", "Tokyo", true)));
    const message = parseEverySplit(input, {
      toolCallFormat: "deepseek-v3.2",
      tools: [weather],
      startInReasoning: true,
    });
    expect(message.reasoning).toBe("Let me check");
    expect(message.content).toBe("");
    expect(calls(message)).toEqual([{ name: "get_weather", args: { city: "Tokyo" } }]);
  });

  it("gives a malformed section, or the other version's section, back as text", () => {
    for (const bad of [
      section("function_calls", invoke("f", param("a", "1", false)) + "text"),
      section(
        "function_calls",
        '<｜DSML｜invoke name="f">\n<｜DSML｜parameter name="a">1</｜DSML｜parameter>\n</｜DSML｜invoke>\n',
      ),
      section("function_calls", '<｜DSML｜invoke name="f">\n' + param("a", "1", false)),
    ]) {
      const message = parseEverySplit(`</think>Hi ${bad}`, {
        toolCallFormat: "deepseek-v3.2",
        tools: [weather],
        startInReasoning: true,
      });
      expect(message.toolCalls, bad).toBeUndefined();
      expect(message.content).toBe(`Hi ${bad}`);
    }
    const v4 = section("tool_calls", invoke("get_weather", param("city", "Rome", true)));
    const read = parseEverySplit(v4, { toolCallFormat: "deepseek-v3.2", tools: [weather] });
    expect(read.toolCalls).toBeUndefined();
    expect(read.content).toBe(v4);
  });
});

describe("forced calls", () => {
  it("the opening each format's prompt ends with, and the model's rest, read as the forced call", () => {
    const cases: [ToolCallFormat, string][] = [
      ["hermes", '{"city": "Rome"}}\n</tool_call>'],
      ["qwen3-coder", "<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call>"],
      ["llama3", '{"city": "Rome"}}'],
      ["glm-4.5", "\n<arg_key>city</arg_key>\n<arg_value>Rome</arg_value>\n</tool_call>"],
      ["deepseek-v3.1", '{"city": "Rome"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'],
      ["deepseek-r1", '{"city": "Rome"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'],
      ["kimi-k2", '0<|tool_call_argument_begin|>{"city": "Rome"}<|tool_call_end|><|tool_calls_section_end|>'],
      ["minimax-m2", '<parameter name="city">Rome</parameter>\n</invoke>\n</minimax:tool_call>'],
      [
        "deepseek-v3.2",
        '<｜DSML｜parameter name="city" string="true">Rome</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>',
      ],
      [
        "deepseek-v4",
        '<｜DSML｜parameter name="city" string="true">Rome</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>',
      ],
    ];
    for (const [format, rest] of cases) {
      for (const opensThinking of [false, true]) {
        const prefix = forcedCallPrefix(format, { name: "get_weather" }, opensThinking);
        const message = parseEverySplit(prefix + rest, {
          toolCallFormat: format,
          tools: [weather],
          startInReasoning: opensThinking,
        });
        expect(message.content, `${format}: ${prefix + rest}`).toBe("");
        expect(message.toolCalls?.map(({ name, arguments: args }) => ({ name, args }))).toEqual([
          { name: "get_weather", args: { city: "Rome" } },
        ]);
      }
    }
  });
});

describe("argument types", () => {
  it("a schema admits a string as llama.cpp decides it", () => {
    expect(schemaAdmitsString({ type: "string" })).toBe(true);
    expect(schemaAdmitsString({ type: ["null", "string"] })).toBe(true);
    expect(schemaAdmitsString({ anyOf: [{ type: "integer" }, { type: "string" }] })).toBe(true);
    expect(schemaAdmitsString({ allOf: [{ type: "string" }, { minLength: 1, type: "string" }] })).toBe(true);
    expect(schemaAdmitsString({ enum: ["a", "b"] })).toBe(true);
    expect(schemaAdmitsString({ const: "x" })).toBe(true);
    expect(schemaAdmitsString({ type: "integer" })).toBe(false);
    expect(schemaAdmitsString({ enum: ["a", 1] })).toBe(false);
    expect(schemaAdmitsString({})).toBe(false);
    expect(schemaAdmitsString(undefined)).toBe(false);
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
