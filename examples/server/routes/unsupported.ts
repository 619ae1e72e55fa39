// llama-server's endpoints that bloomery-serve does not serve, each refused by name with the reason: embeddings and
// reranking (not served yet), and LoRA adapters (none can be loaded: --lora is refused).
import type { FastifyInstance } from "fastify";
import { HttpError } from "../errors.js";

const NOT_YET: Record<string, string> = {
  embeddings: "bloomery-serve does not serve embeddings yet",
  rerank: "bloomery-serve does not rerank yet",
};

export function registerUnsupported(app: FastifyInstance): void {
  for (const path of ["/embedding", "/embeddings", "/v1/embeddings"]) {
    app.post(path, async () => {
      throw new HttpError(501, NOT_YET.embeddings!);
    });
  }
  for (const path of ["/rerank", "/reranking", "/v1/rerank", "/v1/reranking"]) {
    app.post(path, async () => {
      throw new HttpError(501, NOT_YET.rerank!);
    });
  }
  // No adapter is loaded (bloomery's expert kernels run the quantized weights as they are): the list is empty.
  app.get("/lora-adapters", async () => []);
  app.post("/lora-adapters", async () => {
    throw new HttpError(400, "no LoRA adapter is loaded: bloomery-serve does not take --lora");
  });
}
