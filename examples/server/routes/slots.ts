// GET /slots and POST /slots/:id?action=save|restore|erase, as llama-server: a slot's context
// (its session's tokens and KV state) saved to and restored from --slot-save-path, or erased.
import { statSync } from "node:fs";
import { join } from "node:path";
import type { FastifyInstance } from "fastify";
import type { ServerContext } from "../context.js";
import { HttpError } from "../errors.js";
import { Fields } from "../fields.js";

/** A file name inside the save folder: no folders, no dot files. */
function checkFilename(name: string): string {
  if (!/^[A-Za-z0-9_][A-Za-z0-9_.-]*$/.test(name) || name.includes("..")) {
    throw new HttpError(400, `'filename' must be a plain file name, not ${JSON.stringify(name)}`);
  }
  return name;
}

export function registerSlots(app: FastifyInstance, context: ServerContext): void {
  app.get("/slots", async () => {
    if (context.config.slotsEndpoint === false)
      throw new HttpError(501, "This server does not support slots endpoint.");
    return context.slots.list().map((slot) => ({
      id: slot.id,
      n_ctx: context.model.info.contextSize,
      is_processing: slot.busy,
      ...(slot.busy ? {} : { n_past: slot.position }),
    }));
  });

  app.post<{ Params: { id: string }; Querystring: { action?: string } }>("/slots/:id", async (request) => {
    const id = Number(request.params.id);
    const action = request.query.action;
    const { slots } = context;
    const started = performance.now();
    const ms = () => performance.now() - started;
    if (action === "erase") {
      return slots.withSlot(id, async (session) => {
        const erased = session.position;
        await session.reset();
        return { id_slot: id, n_erased: erased };
      });
    }
    if (action !== "save" && action !== "restore") {
      throw new HttpError(400, `'action' must be save, restore or erase, not ${JSON.stringify(action ?? null)}`);
    }
    const folder = context.config.slotSavePath;
    if (!folder)
      throw new HttpError(501, "This server does not support slot save and restore: start it with --slot-save-path");
    const f = new Fields(request.body ?? {});
    const given = f.string("filename");
    f.finish();
    if (given === undefined) throw new HttpError(400, "'filename' is required");
    const filename = checkFilename(given);
    const path = join(folder, filename);
    return slots.withSlot(id, async (session) => {
      if (action === "save") {
        await session.save(path);
        const written = statSync(path).size;
        return { id_slot: id, filename, n_saved: session.position, n_written: written, timings: { save_ms: ms() } };
      }
      await session.restore(path);
      return { id_slot: id, filename, n_restored: session.position, timings: { restore_ms: ms() } };
    });
  });
}
