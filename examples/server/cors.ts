// CORS as llama-server answers it: the request's Origin is echoed back when it is allowed (any origin, unless
// --cors-origins lists them), and a preflight OPTIONS request on any path is answered before the API key check.
import type { FastifyInstance } from "fastify";
import { headerAsSpelled } from "./responses.js";

const LOCAL_HOSTS = new Set(["localhost", "127.0.0.1", "[::1]"]);

/** Whether `origin` may call: any, or one of `allowed` ("localhost": an origin on this machine's addresses). */
function allowed(origin: string, allowed: readonly string[] | undefined): boolean {
  if (!allowed) return true;
  let host: string | undefined;
  try {
    host = new URL(origin).hostname;
  } catch {
    host = undefined;
  }
  return allowed.some(
    (entry) => entry === origin || (entry === "localhost" && host !== undefined && LOCAL_HOSTS.has(host)),
  );
}

export function registerCors(app: FastifyInstance, origins?: readonly string[]): void {
  app.addHook("onRequest", async (request, reply) => {
    const origin = request.headers.origin;
    if (origin === undefined) {
      if (!origins) headerAsSpelled(reply, "Access-Control-Allow-Origin", "*");
    } else if (allowed(origin, origins)) {
      headerAsSpelled(reply, "Access-Control-Allow-Origin", origin);
    }
    if (request.method !== "OPTIONS") return;
    headerAsSpelled(reply, "Access-Control-Allow-Credentials", "true");
    headerAsSpelled(reply, "Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
    headerAsSpelled(reply, "Access-Control-Allow-Headers", "*");
    return reply.code(200).type("text/html").send("");
  });
  // The hook answers every preflight; the route only makes fastify accept the method on any path.
  app.options("*", async () => "");
}
