/**
 * Kimi-K2's tool calls: a section of calls between its special tokens,
 * `<|tool_calls_section_begin|>` (`<|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>{json}<|tool_call_end|>`)+
 * `<|tool_calls_section_end|>`. The call's id is the model's own, `functions.NAME:INDEX`: Kimi's
 * templates name the tool results by it.
 * @module
 */
import { argumentsFromJson } from "./tool-call-values.js";
import { sectionOfCalls, type BlockCall, type BlockTags, type ToolCallBlock } from "./tagged-tool-calls.js";

export const KIMI_SECTION: BlockTags = { open: "<|tool_calls_section_begin|>", close: "<|tool_calls_section_end|>" };
export const KIMI_CALL_BEGIN = "<|tool_call_begin|>";
export const KIMI_ARGUMENTS_BEGIN = "<|tool_call_argument_begin|>";
export const KIMI_CALL_END = "<|tool_call_end|>";

const CALL_ID = /^functions\.([^\s<>|]+):(\d+)$/;

function readCall(body: string): BlockCall | undefined {
  const at = body.indexOf(KIMI_ARGUMENTS_BEGIN);
  if (at < 0) return undefined;
  const id = body.slice(0, at).trim();
  const match = CALL_ID.exec(id);
  const args = argumentsFromJson(body.slice(at + KIMI_ARGUMENTS_BEGIN.length));
  return match && args ? { id, name: match[1]!, arguments: args } : undefined;
}

/** A section of calls. */
export const parseKimiSection: ToolCallBlock = sectionOfCalls(KIMI_CALL_BEGIN, KIMI_CALL_END, readCall);
