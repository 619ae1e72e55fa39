// llama-server's endpoints that bloomery-serve does not serve, each refused by name with the reason: LoRA adapters
// (none can be loaded: --lora is refused).
import type { FastifyInstance } from "fastify";
import { HttpError } from "../errors.js";

export function registerUnsupported(app: FastifyInstance): void {
  // No adapter is loaded (bloomery's expert kernels run the quantized weights as they are): the list is empty.
  app.get("/lora-adapters", async () => []);
  app.post("/lora-adapters", async () => {
    throw new HttpError(400, "no LoRA adapter is loaded: bloomery-serve does not take --lora");
  });
}
