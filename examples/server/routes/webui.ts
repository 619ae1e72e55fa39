// The web page (on unless --no-ui / --no-webui, as llama-server's): GET / serves a chat page and a live view of where
// the model runs, its files shipped in the package (examples/server/webui/, no CDN: it works offline). The page
// and its files are public, as llama-server's are, and load while the model does; GET /webui/live, the live view's
// data, is an API route like the others (the page sends the key its settings hold). It reads only the SDK: the
// model's plan, its stats, its routing counts and its `residency` events.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { FastifyInstance } from "fastify";
import type { Model, OffloadPlan, ResidencyMove } from "../../../src/index.js";
import { packageRoot } from "../../../src/native.js";
import type { ServerContext } from "../context.js";

/** The page's files, by the path they are served at. */
const FILES: Record<string, { file: string; type: string }> = {
  "/": { file: "index.html", type: "text/html; charset=utf-8" },
  "/index.html": { file: "index.html", type: "text/html; charset=utf-8" },
  "/webui/app.js": { file: "app.js", type: "text/javascript; charset=utf-8" },
  "/webui/plots.js": { file: "plots.js", type: "text/javascript; charset=utf-8" },
  "/webui/style.css": { file: "style.css", type: "text/css; charset=utf-8" },
};

/** Paths served without an API key and while the model loads. */
export const WEBUI_PATHS: ReadonlySet<string> = new Set(Object.keys(FILES));

/** How many of the latest expert moves /webui/live lists. */
const RECENT_MOVES = 32;

/** Where the model's experts are now: the load's plan with every move since applied, and the moves per layer. */
class LivePlacement {
  readonly layers: { gpu: number[]; host: number[]; disk: number[] }[];
  readonly movesPerLayer: number[];
  readonly recent: (ResidencyMove & { at: number })[] = [];

  constructor(model: Model, plan: OffloadPlan) {
    this.layers = plan.layers.map((layer) => ({
      gpu: [...layer.gpu],
      host: [...layer.host],
      disk: [...(layer.disk ?? [])],
    }));
    this.movesPerLayer = new Array<number>(plan.layers.length).fill(0);
    model.on("residency", ({ moves }) => {
      for (const move of moves) {
        const layer = this.layers[move.layer]!;
        layer.gpu = layer.gpu.map((e) => (e === move.evicted ? move.seated : e));
        layer.host = layer.host.map((e) => (e === move.seated ? move.evicted : e));
        this.movesPerLayer[move.layer]! += 1;
        this.recent.push({ ...move, at: Date.now() });
      }
      this.recent.splice(0, Math.max(0, this.recent.length - RECENT_MOVES));
    });
  }
}

export function registerWebui(app: FastifyInstance, context: ServerContext): void {
  const folder = join(packageRoot(), "examples", "server", "webui");
  const bodies = new Map(Object.entries(FILES).map(([path, { file }]) => [path, readFileSync(join(folder, file))]));
  for (const [path, { type }] of Object.entries(FILES)) {
    app.get(path, async (_request, reply) =>
      reply.type(type).header("cache-control", "no-cache").send(bodies.get(path)),
    );
  }

  // Every move follows a request (a generation's steps): watching from the first request on sees them all.
  const placements = new WeakMap<Model, LivePlacement>();
  const placementOf = (model: Model): LivePlacement | undefined => {
    if (!model.plan) return undefined;
    let placement = placements.get(model);
    if (!placement) {
      placement = new LivePlacement(model, model.plan);
      placements.set(model, placement);
    }
    return placement;
  };
  app.addHook("onRequest", async () => {
    if (context.loaded) placementOf(context.model);
  });

  app.get("/webui/live", async () => {
    const model = context.model;
    const { plan, info } = model;
    const placement = placementOf(model);
    const routing = info.experts > 0 ? model.routingProfile().counts : null;
    return {
      time: Date.now(),
      model: {
        name: context.modelName,
        architecture: info.architecture,
        layers: info.layers,
        experts: info.experts,
        expertsUsed: info.expertsUsed,
        contextSize: info.contextSize,
        parallel: info.parallel,
        threads: info.threads,
        gpu: info.gpu,
        bytes: info.bytes,
        quantMix: info.quantMix,
      },
      plan: plan && {
        layers: placement!.layers,
        reasons: plan.layers.map((layer) => layer.reason),
        bytes: plan.bytes,
      },
      movesPerLayer: placement?.movesPerLayer ?? null,
      recentMoves: placement?.recent ?? [],
      routing,
      stats: model.stats(),
    };
  });
}
