/**
 * The shapes a chat is made of: messages, tool definitions, tool calls, and the deltas the
 * output parsers produce while the model's text streams in.
 * @module
 */

/** A tool call the model made, its arguments parsed from the model's JSON (or XML) text. */
export interface ToolCall {
  /** An id for the call (`call_` and random letters), for the tool message that answers it. */
  id: string;
  /** The function the model calls. */
  name: string;
  /** The function's arguments. */
  arguments: Record<string, unknown>;
}

/** A function the model may call, as OpenAI's API describes one: passed to the chat template as `tools`. */
export interface ChatTool {
  type: "function";
  function: {
    name: string;
    description?: string;
    /** A JSON schema of the arguments object. */
    parameters?: Record<string, unknown>;
  };
}

/** One message of a conversation. */
export interface ChatMessage {
  role: "system" | "user" | "assistant" | "tool" | (string & {});
  /** The message's text (may be empty for an assistant message that only calls tools). */
  content: string;
  /** An assistant message's reasoning text (given to the template as `reasoning_content`). */
  reasoning?: string;
  /** The tool calls of an assistant message (given to the template as OpenAI's `tool_calls`). */
  toolCalls?: readonly ToolCall[];
  /** A tool message: the id of the call it answers (`tool_call_id`). */
  toolCallId?: string;
  /** A tool message: the name of the function that answered (`name`). */
  name?: string;
}

/** What an output parser makes of a piece of the model's text. */
export interface ChatDelta {
  /** Answer text. */
  text: string;
  /** Reasoning text (inside the think block). */
  reasoning: string;
  /** Tool calls completed in this piece. */
  toolCalls: ToolCall[];
}

/** A streaming parser of the model's text: pieces in, deltas out; nothing is lost or reordered. */
export interface OutputParser {
  push(text: string): ChatDelta;
  /** The end of the stream: what was held back comes out (a call left open comes back as text). */
  finish(): ChatDelta;
}

/** The tool-call parsers' output: answer text and completed calls. */
export interface ToolCallDelta {
  text: string;
  toolCalls: ToolCall[];
}

/** A streaming tool-call parser; text that is not a well-formed call is returned as text. */
export interface ToolCallParser {
  push(text: string): ToolCallDelta;
  finish(): ToolCallDelta;
}

/** Makes the id of a new tool call. */
export type ToolCallIds = () => string;
