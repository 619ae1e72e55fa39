// Tools and tool choice from OpenAI's and Anthropic's request shapes, as Session.chat's options.
import type { ChatOptions, ChatTool } from "../../src/index.js";
import { Fields, type JsonObject } from "./fields.js";

export type ToolOptions = Pick<ChatOptions, "tools" | "toolChoice" | "parallelToolCalls">;

/** OpenAI's `tools` (functions), `tool_choice` and `parallel_tool_calls`. */
export function readOpenAiTools(f: Fields): ToolOptions {
  const out: ToolOptions = {};
  const tools = f.array("tools");
  if (tools) {
    out.tools = tools.map((tool, i) => {
      const t = new Fields(tool, `tools[${i}].`);
      if (t.string("type") !== "function") throw t.bad("type", 'must be "function"');
      const fn = new Fields(t.object("function") ?? {}, `tools[${i}].function.`);
      // Strict schemas are a promise of constrained output, which bloomery-serve cannot make for tools yet.
      fn.unsupported("strict", (v) => v === false);
      const chatTool = functionTool(fn, "parameters");
      t.finish();
      return chatTool;
    });
  }
  const choice = f.raw("tool_choice");
  if (choice === "auto" || choice === "none" || choice === "required") out.toolChoice = choice;
  else if (choice !== undefined) {
    const c = new Fields(choice, "tool_choice.");
    if (c.string("type") !== "function") throw c.bad("type", 'must be "function"');
    const fn = new Fields(c.object("function") ?? {}, "tool_choice.function.");
    const name = fn.string("name");
    if (!name) throw fn.bad("name", "must be a non-empty string");
    fn.finish();
    c.finish();
    out.toolChoice = { name };
  }
  const parallel = f.boolean("parallel_tool_calls");
  if (parallel !== undefined) out.parallelToolCalls = parallel;
  return out;
}

/** Anthropic's `tools` (custom tools with an `input_schema`) and `tool_choice`. */
export function readAnthropicTools(f: Fields): ToolOptions {
  const out: ToolOptions = {};
  const tools = f.array("tools");
  if (tools) {
    out.tools = tools.map((tool, i) => {
      const t = new Fields(tool, `tools[${i}].`);
      const type = t.string("type");
      // Anthropic's server tools (web search, code execution, ...) run on Anthropic's side.
      if (type !== undefined && type !== "custom") throw t.bad("type", `${JSON.stringify(type)} is not supported`);
      t.raw("cache_control");
      return functionTool(t, "input_schema");
    });
  }
  const choice = f.object("tool_choice");
  if (choice) {
    const c = new Fields(choice, "tool_choice.");
    const type = c.string("type");
    if (type === "tool") {
      const name = c.string("name");
      if (!name) throw c.bad("name", "must be a non-empty string");
      out.toolChoice = { name };
    } else if (type === "auto" || type === "none") out.toolChoice = type;
    else if (type === "any") out.toolChoice = "required";
    else throw c.bad("type", 'must be "auto", "any", "tool" or "none"');
    if (c.boolean("disable_parallel_tool_use")) out.parallelToolCalls = false;
    c.finish();
  }
  return out;
}

/** A function's name, description and schema (under `schemaField`), from `f`, which it finishes. */
function functionTool(f: Fields, schemaField: string): ChatTool {
  const name = f.string("name");
  if (!name) throw f.bad("name", "must be a non-empty string");
  const description = f.string("description");
  const parameters: JsonObject | undefined = f.object(schemaField);
  f.finish();
  const fn: ChatTool["function"] = { name };
  if (description !== undefined) fn.description = description;
  if (parameters !== undefined) fn.parameters = parameters;
  return { type: "function", function: fn };
}
