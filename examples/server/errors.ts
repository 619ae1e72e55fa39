// Errors as llama-server sends them: {"error":{"code","message","type"}} with the HTTP status,
// so that clients written against llama-server (and the OpenAI SDKs) read them unchanged.
import type { FastifyError, FastifyReply, FastifyRequest } from "fastify";
import { BloomeryError } from "../../src/index.js";

const TYPES: Record<number, string> = {
  400: "invalid_request_error",
  401: "authentication_error",
  403: "permission_error",
  404: "not_found_error",
  413: "invalid_request_error",
  415: "invalid_request_error",
  501: "not_supported_error",
  503: "unavailable_error",
};

/** An error the server answers with `status`; `extra` adds fields beside code, message and type. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type: string = TYPES[status] ?? "server_error",
    readonly extra: Record<string, unknown> = {},
  ) {
    super(message);
  }
}

/** A 400 naming the request field that is wrong. */
export function badField(field: string, message: string): HttpError {
  return new HttpError(400, `'${field}' ${message}`);
}

export function errorBody(error: HttpError): { error: Record<string, unknown> } {
  return { error: { code: error.status, message: error.message, type: error.type, ...error.extra } };
}

/** The engine's refusals that a request caused: answered with 400 and the engine's message. */
const REQUEST_ERRORS = new Set<string>([
  "INVALID_ARGUMENT",
  "CHAT_TEMPLATE",
  "CHAT_TEMPLATE_TOO_COMPLEX",
  "CONTEXT_TOO_LONG",
  "GRAMMAR_INVALID",
  "GRAMMAR_TOO_COMPLEX",
  "JSON_SCHEMA_UNSUPPORTED",
  "JSON_SCHEMA_TOO_COMPLEX",
  "STATE_BAD_FILE",
  "STATE_MODEL_MISMATCH",
  "STATE_UNSUPPORTED_VERSION",
]);

/** Any thrown value as the HttpError to answer with. */
export function toHttpError(error: unknown): HttpError {
  if (error instanceof HttpError) return error;
  if (error instanceof BloomeryError) {
    if (REQUEST_ERRORS.has(error.code)) {
      return new HttpError(400, error.message);
    }
    if (error.code === "FILE_NOT_FOUND") return new HttpError(404, error.message);
    return new HttpError(500, `${error.code}: ${error.message}`);
  }
  // Fastify's own errors (bad content, body too large, ...) carry the status to send.
  const status = (error as FastifyError).statusCode;
  if (typeof status === "number" && status >= 400 && status < 500)
    return new HttpError(status, (error as Error).message);
  return new HttpError(500, error instanceof Error ? error.message : String(error));
}

export function sendError(reply: FastifyReply, error: unknown, request?: FastifyRequest): FastifyReply {
  const http = toHttpError(error);
  if (http.status >= 500) request?.log.error(error);
  return reply.code(http.status).type("application/json").send(errorBody(http));
}
