// Inline SVG plots for the live view: the plan's grid of experts per layer, line charts over time, bar charts.
const SVG = "http://www.w3.org/2000/svg";
const TIER_COLORS = { gpu: "var(--gpu)", host: "var(--host)", disk: "var(--disk)" };

function el(name, attributes = {}, parent) {
  const node = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, String(value));
  parent?.appendChild(node);
  return node;
}

/**
 * The offload plan as a grid: a row per layer (`data-layer`), a cell per routed expert colored by the tier it is on
 * now, brighter the more the router picked it (the decaying routing counts), and each row's counts per tier.
 */
export function drawPlan(container, plan, routing, experts) {
  container.replaceChildren();
  if (!plan) {
    const p = document.createElement("p");
    p.className = "muted";
    p.textContent = "A dense model: no routed experts to place.";
    container.append(p);
    return;
  }
  const labelWidth = 34;
  const countsWidth = 110;
  const cell = Math.max(2, Math.min(14, Math.floor(900 / experts)));
  const rowHeight = Math.max(6, Math.min(14, cell));
  const width = labelWidth + experts * cell + countsWidth;
  const height = plan.layers.length * (rowHeight + 2) + 4;
  const svg = el("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "offload plan" }, container);
  // A model of few experts keeps small cells rather than stretching them over the page.
  svg.style.maxWidth = `${width * 1.6}px`;
  plan.layers.forEach((layer, index) => {
    const y = 2 + index * (rowHeight + 2);
    const row = el("g", { class: "layer", "data-layer": index }, svg);
    const tiers = {};
    for (const tier of ["gpu", "host", "disk"]) for (const e of layer[tier]) tiers[e] = tier;
    const counts = routing?.[index] ?? [];
    const hottest = Math.max(1e-9, ...counts);
    el("title", {}, row).textContent =
      `layer ${index}: ${layer.gpu.length} on the GPU, ${layer.host.length} in host RAM, ${layer.disk.length} on disk` +
      (plan.reasons[index] ? ` (${plan.reasons[index]})` : "");
    el("text", { x: 2, y: y + rowHeight - 1 }, row).textContent = `L${index}`;
    for (let e = 0; e < experts; e++) {
      const heat = counts.length ? (counts[e] ?? 0) / hottest : 0;
      el(
        "rect",
        {
          x: labelWidth + e * cell,
          y,
          width: Math.max(1, cell - 1),
          height: rowHeight,
          fill: TIER_COLORS[tiers[e] ?? "host"],
          "fill-opacity": (0.3 + 0.7 * heat).toFixed(2),
          "data-tier": tiers[e] ?? "host",
        },
        row,
      );
    }
    el("text", { x: labelWidth + experts * cell + 6, y: y + rowHeight - 1 }, row).textContent =
      `${layer.gpu.length} / ${layer.host.length} / ${layer.disk.length}`;
  });
}

/** Lines over time: `series` of `{ name, color, points: [{ t, v }] }` (v null leaves a gap), the last `seconds`. */
export function drawLines(svg, series, { seconds = 120, max, format = (v) => v.toFixed(1) } = {}) {
  svg.replaceChildren();
  const [width, height, pad] = [400, 160, 14];
  const now = Date.now();
  const values = series.flatMap((s) => s.points.map((p) => p.v)).filter((v) => v !== null);
  const top = max ?? Math.max(1e-9, ...values) * 1.1;
  const x = (t) => width - ((now - t) / (seconds * 1000)) * width;
  const y = (v) => height - pad - (v / top) * (height - 2 * pad);
  el("line", { x1: 0, x2: width, y1: y(0), y2: y(0), stroke: "#3a404b" }, svg);
  el("text", { x: 2, y: pad - 3 }, svg).textContent = format(top);
  el("text", { x: 2, y: height - 2 }, svg).textContent = `${seconds} s ago`;
  series.forEach((s, i) => {
    let path = "";
    let pen = "M";
    for (const p of s.points) {
      if (p.v === null) {
        pen = "M";
        continue;
      }
      path += `${pen}${x(p.t).toFixed(1)},${y(p.v).toFixed(1)} `;
      pen = "L";
    }
    if (path) el("path", { d: path, fill: "none", stroke: s.color, "stroke-width": 2, "data-series": s.name }, svg);
    const last = s.points.filter((p) => p.v !== null).at(-1);
    el("text", { x: width - 4, y: pad - 3 + i * 11, "text-anchor": "end", fill: s.color }, svg).textContent =
      `${s.name}${last ? `: ${format(last.v)}` : ""}`;
  });
}

/** One bar per value (e.g. per layer). */
export function drawBars(svg, values, color) {
  svg.replaceChildren();
  const [width, height, pad] = [400, 160, 14];
  const top = Math.max(1, ...values);
  const w = width / Math.max(1, values.length);
  values.forEach((v, i) => {
    const h = (v / top) * (height - 2 * pad);
    const bar = el(
      "rect",
      { x: i * w + 0.5, y: height - pad - h, width: Math.max(1, w - 1), height: h, fill: color },
      svg,
    );
    el("title", {}, bar).textContent = `layer ${i}: ${v}`;
  });
  el("text", { x: 2, y: pad - 3 }, svg).textContent = String(top);
  el("text", { x: 2, y: height - 2 }, svg).textContent = "layer 0";
  el("text", { x: width - 2, y: height - 2, "text-anchor": "end" }, svg).textContent = `layer ${values.length - 1}`;
}
