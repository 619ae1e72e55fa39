// CORS as llama-server answers it: any origin may call (the request's Origin is echoed back), and
// a preflight OPTIONS request on any path is answered before the API key check.
import type { FastifyInstance } from "fastify";

export function registerCors(app: FastifyInstance): void {
  app.addHook("onRequest", async (request, reply) => {
    reply.header("Access-Control-Allow-Origin", request.headers.origin ?? "*");
    if (request.method !== "OPTIONS") return;
    reply.header("Access-Control-Allow-Credentials", "true");
    reply.header("Access-Control-Allow-Methods", "GET, POST");
    reply.header("Access-Control-Allow-Headers", "*");
    return reply.code(200).type("text/html").send("");
  });
  // The hook answers every preflight; the route only makes fastify accept the method on any path.
  app.options("*", async () => "");
}
