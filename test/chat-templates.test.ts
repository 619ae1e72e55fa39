// The DeepSeek (V3.1, R1, V3.2, V4), GLM, Kimi, MiniMax and Qwen3.5 chat templates (test/chat-templates/, as the models ship them)
// rendered through @huggingface/jinja: tools, tool calls, tool results and reasoning land where
// llama.cpp's chat tests expect them, the format is read from the template, and the assistant
// turns a template renders read back, through that format's parser, as the messages they came from.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import {
  AssistantMessageBuilder,
  ChatOutputParser,
  detectToolCallFormat,
  promptOpensThinking,
} from "../src/chat/output.js";
import type { ToolCallFormat } from "../src/chat/output.js";
import { adaptTemplate } from "../src/chat/template-compat.js";
import { ChatTemplate } from "../src/chat/template.js";
import type { ChatMessage, ChatTool } from "../src/chat/types.js";

const dir = join(dirname(fileURLToPath(import.meta.url)), "chat-templates");
const source = (file: string) => readFileSync(join(dir, file), "utf8");

const weather: ChatTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "The weather in a city",
    parameters: {
      type: "object",
      properties: { city: { type: "string" }, days: { type: "integer" } },
      required: ["city"],
    },
  },
};
const tools = [weather];

/** A turn with reasoning and two calls, their results, and an answer with reasoning. */
const conversation = (ids: [string, string]): ChatMessage[] => [
  { role: "system", content: "Be brief." },
  { role: "user", content: "Weather in Paris and Oslo?" },
  {
    role: "assistant",
    content: "",
    reasoning: "Two cities.",
    toolCalls: [
      { id: ids[0], name: "get_weather", arguments: { city: "Paris", days: 2 } },
      { id: ids[1], name: "get_weather", arguments: { city: "Oslo" } },
    ],
  },
  { role: "tool", content: "Sunny", toolCallId: ids[0], name: "get_weather" },
  { role: "tool", content: "Rain", toolCallId: ids[1], name: "get_weather" },
  { role: "assistant", content: "Paris is sunny, Oslo rainy.", reasoning: "Both answered." },
  { role: "user", content: "Thanks" },
];

const TOKENS = { bosToken: "<BOS>", eosToken: "<EOS>" };

function render(file: string, messages: ChatMessage[], kwargs: Record<string, unknown> = {}, generation = true) {
  return new ChatTemplate(source(file)).render(messages, TOKENS, {
    tools,
    templateKwargs: kwargs,
    addGenerationPrompt: generation,
  });
}

/** What `format`'s parser reads from `text` (an assistant turn as the model writes it). */
function parse(text: string, format: ToolCallFormat, startInReasoning = false) {
  const parser = new ChatOutputParser({ toolCallFormat: format, tools, startInReasoning, newId: () => "call_new" });
  const message = new AssistantMessageBuilder();
  message.add(parser.push(text));
  message.add(parser.finish());
  return message.message;
}

interface Case {
  file: string;
  format: ToolCallFormat;
  /** The ids the template gives the calls (Kimi's count calls; the others keep the message's). */
  ids: [string, string];
  /** Expected pieces of the rendered conversation, in order. */
  pieces: string[];
  /** How the prompt ends (the generation prompt). */
  end: string;
  /** The text that opens an assistant turn, and the one that ends it, in this template. */
  header: string;
  endOfTurn: string;
  /** The template writes past turns as if the prompt had opened the think block (`</think>` without `<think>`). */
  opensThinking?: boolean;
  /** The template writes an assistant message's text or its calls, not both. */
  textOrCalls?: boolean;
}

const CASES: Case[] = [
  {
    file: "deepseek-ai-DeepSeek-V3.1.jinja",
    format: "deepseek-v3.1",
    ids: ["call_a", "call_b"],
    pieces: [
      "<BOS>Be brief.<｜User｜>Weather in Paris and Oslo?<｜Assistant｜><think></think>",
      '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris", "days": 2}<｜tool▁call▁end｜>' +
        '<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Oslo"}<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>',
      "<｜tool▁output▁begin｜>Sunny<｜tool▁output▁end｜><｜tool▁output▁begin｜>Rain<｜tool▁output▁end｜>",
      "Paris is sunny, Oslo rainy.<｜end▁of▁sentence｜><｜User｜>Thanks",
    ],
    end: "<｜User｜>Thanks<｜Assistant｜><think></think>",
    header: "<｜Assistant｜>",
    endOfTurn: "<｜end▁of▁sentence｜>",
  },
  {
    file: "llama-cpp-deepseek-r1.jinja",
    format: "deepseek-r1",
    ids: ["call_a", "call_b"],
    pieces: [
      '"name": "get_weather"',
      "<｜User｜>Weather in Paris and Oslo?",
      '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city": "Paris", "days": 2}\n```<｜tool▁call▁end｜>',
      "<｜tool▁output▁begin｜>Sunny<｜tool▁output▁end｜>",
      "Paris is sunny, Oslo rainy.<｜end▁of▁sentence｜>",
    ],
    end: "<｜Assistant｜><think>\n",
    header: "<｜Assistant｜>",
    textOrCalls: true,
    endOfTurn: "<｜end▁of▁sentence｜>",
  },
  {
    file: "deepseek-ai-DeepSeek-V3.2.jinja",
    format: "deepseek-v3.2",
    ids: ["call_a", "call_b"],
    pieces: [
      "<BOS>Be brief.\n\n## Tools\n\n",
      '<functions>\n{"name": "get_weather"',
      "<｜User｜>Weather in Paris and Oslo?<｜Assistant｜></think>\n\n<｜DSML｜function_calls>\n" +
        '<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n' +
        '<｜DSML｜parameter name="days" string="false">2</｜DSML｜parameter>\n</｜DSML｜invoke>\n' +
        '<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" string="true">Oslo</｜DSML｜parameter>\n' +
        "</｜DSML｜invoke>\n</｜DSML｜function_calls><｜end▁of▁sentence｜>",
      "<function_results>\n<result>Sunny</result>\n<result>Rain</result>\n</function_results>",
      "</think>Paris is sunny, Oslo rainy.<｜end▁of▁sentence｜><｜User｜>Thanks",
    ],
    end: "<｜User｜>Thanks<｜Assistant｜><think></think>",
    header: "<｜Assistant｜>",
    endOfTurn: "<｜end▁of▁sentence｜>",
    opensThinking: true,
  },
  {
    file: "deepseek-ai-DeepSeek-V4.jinja",
    format: "deepseek-v4",
    ids: ["call_a", "call_b"],
    pieces: [
      "<BOS>Be brief.\n\n## Tools\n\n",
      '### Available Tool Schemas\n\n{"name": "get_weather"',
      "<｜User｜>Weather in Paris and Oslo?<｜Assistant｜></think>\n\n<｜DSML｜tool_calls>\n" +
        '<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n' +
        '<｜DSML｜parameter name="days" string="false">2</｜DSML｜parameter>\n</｜DSML｜invoke>\n',
      "</｜DSML｜tool_calls><｜end▁of▁sentence｜>",
      // Tool results are the user's turn.
      "<｜User｜><tool_result>Sunny</tool_result>\n\n<tool_result>Rain</tool_result><｜Assistant｜>",
      "</think>Paris is sunny, Oslo rainy.<｜end▁of▁sentence｜><｜User｜>Thanks",
    ],
    end: "<｜User｜>Thanks<｜Assistant｜></think>",
    header: "<｜Assistant｜>",
    endOfTurn: "<｜end▁of▁sentence｜>",
    opensThinking: true,
  },
  {
    file: "GLM-4.6.jinja",
    format: "glm-4.5",
    ids: ["call_a", "call_b"],
    pieces: [
      "[gMASK]<sop><|system|>\n# Tools",
      '<tools>\n{"type": "function", "function": {"name": "get_weather"',
      "<|user|>\nWeather in Paris and Oslo?<|assistant|>\n<think></think>\n" +
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>\n" +
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n</tool_call><|observation|>",
      "<tool_response>\nSunny\n</tool_response>",
      "<tool_response>\nRain\n</tool_response>",
      // Reasoning before the last user message is dropped.
      "<|assistant|>\n<think></think>\nParis is sunny, Oslo rainy.<|user|>\nThanks",
    ],
    end: "<|user|>\nThanks<|assistant|>",
    header: "<|assistant|>",
    endOfTurn: "",
  },
  {
    file: "GLM-4.7-Flash.jinja",
    format: "glm-4.5",
    ids: ["call_a", "call_b"],
    pieces: [
      "[gMASK]<sop><|system|>",
      "<|user|>Weather in Paris and Oslo?<|assistant|></think>" +
        "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key><arg_value>2</arg_value></tool_call>" +
        "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call><|observation|>",
      "<tool_response>Sunny</tool_response><tool_response>Rain</tool_response>",
      "<|assistant|></think>Paris is sunny, Oslo rainy.<|user|>Thanks",
    ],
    end: "<|user|>Thanks<|assistant|><think>",
    header: "<|assistant|>",
    endOfTurn: "",
    opensThinking: true,
  },
  {
    file: "moonshotai-Kimi-K2.jinja",
    format: "kimi-k2",
    ids: ["functions.get_weather:0", "functions.get_weather:1"],
    pieces: [
      '<|im_system|>tool_declare<|im_middle|>[{"type": "function", "function": {"name": "get_weather"',
      "<|im_system|>system<|im_middle|>Be brief.<|im_end|><|im_user|>user<|im_middle|>Weather in Paris and Oslo?<|im_end|>",
      "<|im_assistant|>assistant<|im_middle|><|tool_calls_section_begin|>" +
        '<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris", "days": 2}<|tool_call_end|>' +
        '<|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>{"city": "Oslo"}<|tool_call_end|>' +
        "<|tool_calls_section_end|><|im_end|>",
      "<|im_system|>tool<|im_middle|>## Return of functions.get_weather:0\\nSunny<|im_end|>",
    ],
    end: "<|im_user|>user<|im_middle|>Thanks<|im_end|><|im_assistant|>assistant<|im_middle|>",
    header: "<|im_assistant|>assistant<|im_middle|>",
    endOfTurn: "<|im_end|>",
  },
  {
    file: "Kimi-K2-Instruct.jinja",
    format: "kimi-k2",
    ids: ["functions.get_weather:0", "functions.get_weather:1"],
    pieces: [
      "<|im_assistant|>assistant<|im_middle|><|tool_calls_section_begin|>" +
        '<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris", "days": 2}<|tool_call_end|>',
      // The results are named by the ids the template queued for the calls, in order.
      "<|im_system|>get_weather<|im_middle|>## Return of functions.get_weather:0\nSunny<|im_end|>",
      "<|im_system|>get_weather<|im_middle|>## Return of functions.get_weather:1\nRain<|im_end|>",
    ],
    end: "<|im_assistant|>assistant<|im_middle|>",
    header: "<|im_assistant|>assistant<|im_middle|>",
    endOfTurn: "<|im_end|>",
  },
  {
    file: "Kimi-K2-Thinking.jinja",
    format: "kimi-k2",
    ids: ["functions.get_weather:0", "functions.get_weather:1"],
    pieces: [
      "<|im_assistant|>assistant<|im_middle|><think></think><|tool_calls_section_begin|>",
      "## Return of functions.get_weather:1\nRain<|im_end|>",
      "<|im_assistant|>assistant<|im_middle|><think></think>Paris is sunny, Oslo rainy.<|im_end|>",
    ],
    end: "<|im_user|>user<|im_middle|>Thanks<|im_end|><|im_assistant|>assistant<|im_middle|>",
    header: "<|im_assistant|>assistant<|im_middle|>",
    endOfTurn: "<|im_end|>",
  },

  {
    file: "MiniMax-M2.jinja",
    format: "minimax-m2",
    ids: ["call_1", "call_2"],
    pieces: [
      "]~b]system\nBe brief.",
      '<tools>\n<tool>{"name": "get_weather"',
      "]~b]user\nWeather in Paris and Oslo?[e~[\n]~b]ai\n",
      '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n<parameter name="days">2</parameter>\n</invoke>\n' +
        '<invoke name="get_weather">\n<parameter name="city">Oslo</parameter>\n</invoke>\n</minimax:tool_call>[e~[\n',
      "]~b]tool\n<response>Sunny</response>\n<response>Rain</response>[e~[\n",
      "]~b]ai\nParis is sunny, Oslo rainy.[e~[\n]~b]user\nThanks[e~[\n",
    ],
    // The prompt opens the think block (see below), but past turns carry one only where they reasoned.
    end: "]~b]user\nThanks[e~[\n]~b]ai\n<think>\n",
    header: "]~b]ai\n",
    endOfTurn: "[e~[",
  },
  {
    file: "Qwen3.5-4B.jinja",
    format: "qwen3-coder",
    ids: ["call_1", "call_2"],
    pieces: [
      '<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n{"type": "function", "function": {"name": "get_weather"',
      "</IMPORTANT>\n\nBe brief.<|im_end|>\n<|im_start|>user\nWeather in Paris and Oslo?<|im_end|>\n",
      // Reasoning before the last user message is dropped.
      "<|im_start|>assistant\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>" +
        "\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call><|im_end|>\n",
      "<|im_start|>user\n<tool_response>\nSunny\n</tool_response>\n<tool_response>\nRain\n</tool_response><|im_end|>\n",
      "<|im_start|>assistant\nParis is sunny, Oslo rainy.<|im_end|>\n<|im_start|>user\nThanks<|im_end|>\n",
    ],
    end: "<|im_start|>user\nThanks<|im_end|>\n<|im_start|>assistant\n<think>\n",
    header: "<|im_start|>assistant\n",
    endOfTurn: "<|im_end|>",
  },
];

describe.each(CASES)("$file", ({ file, format, ids, pieces, end, header, endOfTurn, opensThinking, textOrCalls }) => {
  it(`teaches the ${format} format`, () => {
    expect(detectToolCallFormat(source(file))).toBe(format);
  });

  it("renders tools, tool calls, tool results and reasoning where the model reads them", () => {
    const prompt = render(file, conversation(ids));
    let at = 0;
    for (const piece of pieces) {
      const found = prompt.indexOf(piece, at);
      expect(found, `${JSON.stringify(piece)} after ${at} in ${JSON.stringify(prompt)}`).toBeGreaterThanOrEqual(at);
      at = found + piece.length;
    }
    expect(prompt.endsWith(end), JSON.stringify(prompt.slice(-120))).toBe(true);
  });

  it("renders assistant turns that its format's parser reads back as the messages they were", () => {
    const question: ChatMessage[] = [{ role: "user", content: "Weather in Paris and Oslo?" }];
    const turns: ChatMessage[] = [
      conversation(ids)[2]!,
      { role: "assistant", content: "Paris is sunny.", reasoning: "Easy." },
      {
        role: "assistant",
        content: "Let me check.",
        toolCalls: [{ id: ids[0], name: "get_weather", arguments: { city: "Rome", days: 1 } }],
      },
    ];
    for (const turn of textOrCalls ? turns.slice(0, 2) : turns) {
      const full = render(file, [...question, turn], {}, false);
      let text = full.slice(full.lastIndexOf(header) + header.length);
      if (endOfTurn) text = text.slice(0, text.lastIndexOf(endOfTurn));
      if (opensThinking) text = text.replace(/^<think>/, "");
      const read = parse(text, format, opensThinking);
      expect(read.content, JSON.stringify(text)).toBe(turn.content);
      expect(read.toolCalls, JSON.stringify(text)).toEqual(
        turn.toolCalls?.map((call) => ({ ...call, id: format === "kimi-k2" ? call.id : "call_new" })),
      );
      // Some templates drop the reasoning of past turns; what they keep must read back whole.
      if (read.reasoning !== undefined) expect(read.reasoning).toBe(turn.reasoning);
    }
  });
});

describe("DeepSeek-V4's tool results", () => {
  it("are read in the order of the calls they answer, whatever order they came in", () => {
    const [ask, call, paris, oslo, ...rest] = conversation(["call_a", "call_b"]).slice(1);
    const inOrder = render("deepseek-ai-DeepSeek-V4.jinja", [ask!, call!, paris!, oslo!, ...rest]);
    expect(inOrder).toContain("<｜User｜><tool_result>Sunny</tool_result>\n\n<tool_result>Rain</tool_result>");
    expect(render("deepseek-ai-DeepSeek-V4.jinja", [ask!, call!, oslo!, paris!, ...rest])).toBe(inOrder);
    // DeepSeek-V3.2 keeps the order it is given, as its template and llama.cpp do.
    expect(render("deepseek-ai-DeepSeek-V3.2.jinja", [ask!, call!, oslo!, paris!, ...rest])).toContain(
      "<result>Rain</result>\n<result>Sunny</result>",
    );
  });
});

describe("template thinking switches", () => {
  it("DeepSeek-V3.1 opens the think block when thinking is on, and closes it otherwise", () => {
    const messages: ChatMessage[] = [{ role: "user", content: "Hi" }];
    const on = render("deepseek-ai-DeepSeek-V3.1.jinja", messages, { thinking: true });
    const off = render("deepseek-ai-DeepSeek-V3.1.jinja", messages, { thinking: false });
    expect(on.endsWith("<｜Assistant｜><think>")).toBe(true);
    expect(promptOpensThinking(on)).toBe(true);
    expect(promptOpensThinking(off)).toBe(false);
  });

  it("DeepSeek-V3.2 and V4 open the think block when thinking is on; off, V3.2 closes an empty one and V4 writes </think>", () => {
    const messages: ChatMessage[] = [{ role: "user", content: "Hi" }];
    for (const [file, off] of [
      ["deepseek-ai-DeepSeek-V3.2.jinja", "<｜Assistant｜><think></think>"],
      ["deepseek-ai-DeepSeek-V4.jinja", "<｜Assistant｜></think>"],
    ] as const) {
      const on = render(file, messages, { thinking: true });
      expect(on.endsWith("<｜Assistant｜><think>"), file).toBe(true);
      expect(promptOpensThinking(on)).toBe(true);
      const closed = render(file, messages, { enable_thinking: false });
      expect(closed.endsWith(off), file).toBe(true);
      expect(promptOpensThinking(closed)).toBe(false);
    }
  });

  it("MiniMax-M2 opens the think block in the prompt", () => {
    expect(promptOpensThinking(render("MiniMax-M2.jinja", [{ role: "user", content: "Hi" }]))).toBe(true);
  });

  it("Qwen3.5 opens the think block unless enable_thinking is false, and then closes it empty", () => {
    const messages: ChatMessage[] = [{ role: "user", content: "Hi" }];
    expect(promptOpensThinking(render("Qwen3.5-4B.jinja", messages))).toBe(true);
    const off = render("Qwen3.5-4B.jinja", messages, { enable_thinking: false });
    expect(off.endsWith("<|im_start|>assistant\n<think>\n\n</think>\n\n")).toBe(true);
    expect(promptOpensThinking(off)).toBe(false);
  });

  it("GLM-4.6 closes an empty think block when thinking is off; GLM-4.7 opens it when on", () => {
    const messages: ChatMessage[] = [{ role: "user", content: "Hi" }];
    expect(
      render("GLM-4.6.jinja", messages, { enable_thinking: false }).endsWith("<|assistant|>\n<think></think>"),
    ).toBe(true);
    expect(promptOpensThinking(render("GLM-4.6.jinja", messages))).toBe(false);
    expect(promptOpensThinking(render("GLM-4.7-Flash.jinja", messages))).toBe(true);
    expect(promptOpensThinking(render("GLM-4.7-Flash.jinja", messages, { enable_thinking: false }))).toBe(false);
  });
});

describe("template rewrites for @huggingface/jinja", () => {
  it("renders Kimi-K2's list.append / list.pop queue, and says so", () => {
    for (const file of ["Kimi-K2-Instruct.jinja", "Kimi-K2-Thinking.jinja"]) {
      expect(new ChatTemplate(source(file)).adaptations).toEqual([
        "list.append(x) on a namespace's list, as `set ns.list = ns.list + [x]`",
        "list.pop() on a namespace's list, as an index and a slice",
      ]);
    }
    for (const file of ["moonshotai-Kimi-K2.jinja", "deepseek-ai-DeepSeek-V3.1.jinja", "GLM-4.6.jinja"]) {
      expect(new ChatTemplate(source(file)).adaptations).toEqual([]);
    }
  });

  it("keeps append and pop semantics: in place across loops and macros, first or last out", () => {
    const template = `{%- set ns = namespace(ids=[]) -%}
{%- macro add(x) -%}{%- set _ = ns.ids.append(x) -%}{%- endmacro -%}
{%- for i in range(4) -%}{{ add('a' ~ i) }}{%- endfor -%}
{%- set first = ns.ids.pop(0) -%}{%- set last = ns.ids.pop() -%}
{{ first }} {{ last }} {{ ns.ids | join(',') }}`;
    expect(new ChatTemplate(template).render([], TOKENS)).toBe("a0 a3 a1,a2");
  });

  it("leaves lists that are not a namespace's alone", () => {
    const template = "{% set ids = [] %}{% set _ = ids.append(1) %}";
    expect(adaptTemplate(template)).toEqual({ source: template, changes: [] });
  });
});
