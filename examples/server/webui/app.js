// bloomery-serve's page: a streamed chat over /v1/chat/completions (reasoning and tool calls shown as they come),
// the model's settings (/props), and a live view of where the model runs (/webui/live, polled each second).
import { drawBars, drawLines, drawPlan } from "./plots.js";

const $ = (selector) => document.querySelector(selector);
const SETTINGS_KEY = "bloomery.settings";
const DEFAULTS = { system: "", temperature: "", top_p: "", top_k: "", max_tokens: "512", tools: "", apiKey: "" };

const settings = { ...DEFAULTS, ...JSON.parse(localStorage.getItem(SETTINGS_KEY) ?? "{}") };
const history = [];
let running;

function headers() {
  return {
    "content-type": "application/json",
    ...(settings.apiKey ? { authorization: `Bearer ${settings.apiKey}` } : {}),
  };
}

async function getJson(path) {
  const response = await fetch(path, { headers: headers() });
  const body = await response.json();
  if (!response.ok) throw new Error(body?.error?.message ?? `HTTP ${response.status}`);
  return body;
}

// Tabs.
for (const button of document.querySelectorAll("nav button")) {
  button.addEventListener("click", () => {
    for (const other of document.querySelectorAll("nav button")) other.classList.toggle("active", other === button);
    for (const tab of document.querySelectorAll(".tab")) tab.classList.toggle("active", tab.id === button.dataset.tab);
  });
}

// Settings: kept in the browser's storage.
const form = $("#settings-form");
for (const [name, value] of Object.entries(settings)) if (form.elements[name]) form.elements[name].value = value;
form.addEventListener("input", () => {
  for (const name of Object.keys(DEFAULTS)) settings[name] = form.elements[name].value;
  localStorage.setItem(SETTINGS_KEY, JSON.stringify(settings));
});

async function showProps() {
  try {
    const props = await getJson("/props");
    $("#model-name").textContent = props.model_alias;
    const params = props.default_generation_settings.params;
    const rows = {
      model: props.model_path,
      "context per slot": `${props.default_generation_settings.n_ctx} tokens`,
      slots: props.total_slots,
      "default temperature": params.temperature,
      "default top-k / top-p / min-p": `${params.top_k} / ${params.top_p} / ${params.min_p}`,
      n_predict: params.n_predict,
    };
    $("#props").replaceChildren(
      ...Object.entries(rows).flatMap(([key, value]) => {
        const dt = document.createElement("dt");
        const dd = document.createElement("dd");
        dt.textContent = key;
        dd.textContent = String(value);
        return [dt, dd];
      }),
    );
    for (const name of ["temperature", "top_k", "top_p"]) form.elements[name].placeholder = String(params[name]);
  } catch (error) {
    $("#model-name").textContent = error.message;
    setTimeout(showProps, 1000);
  }
}

// The chat.
function bubble(role) {
  const div = document.createElement("div");
  div.className = `message ${role}`;
  $("#messages").append(div);
  return div;
}

function requestBody() {
  const body = { messages: [], stream: true };
  if (settings.system.trim()) body.messages.push({ role: "system", content: settings.system });
  body.messages.push(...history);
  for (const name of ["temperature", "top_p", "top_k", "max_tokens"]) {
    if (settings[name] !== "") body[name] = Number(settings[name]);
  }
  if (settings.tools.trim()) body.tools = JSON.parse(settings.tools);
  return body;
}

/** The events of a server-sent-events stream, as parsed JSON (stops at [DONE]). */
async function* events(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data === "[DONE]") return;
        yield JSON.parse(data);
      }
    }
  }
}

async function ask(question) {
  history.push({ role: "user", content: question });
  bubble("user").textContent = question;
  const out = bubble("assistant");
  out.dataset.state = "streaming";
  const reasoning = document.createElement("div");
  reasoning.className = "reasoning";
  reasoning.hidden = true;
  const content = document.createElement("div");
  content.className = "content";
  out.append(reasoning, content);
  const calls = [];
  const stop = new AbortController();
  running = stop;
  $("#send").disabled = true;
  $("#stop").disabled = false;
  const started = performance.now();
  let pieces = 0;
  try {
    const response = await fetch("/v1/chat/completions", {
      method: "POST",
      headers: headers(),
      body: JSON.stringify(requestBody()),
      signal: stop.signal,
    });
    if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      throw new Error(body?.error?.message ?? `HTTP ${response.status}`);
    }
    for await (const chunk of events(response)) {
      if (chunk.error) throw new Error(chunk.error.message ?? JSON.stringify(chunk.error));
      const delta = chunk.choices?.[0]?.delta ?? {};
      if (delta.reasoning_content) {
        reasoning.hidden = false;
        reasoning.textContent += delta.reasoning_content;
      }
      if (delta.content) content.textContent += delta.content;
      for (const call of delta.tool_calls ?? []) {
        let shown = calls[call.index];
        if (!shown) {
          shown = calls[call.index] = { name: "", arguments: "", node: document.createElement("div") };
          shown.node.className = "tool-call";
          out.append(shown.node);
        }
        shown.name += call.function?.name ?? "";
        shown.arguments += call.function?.arguments ?? "";
        shown.node.textContent = `tool call: ${shown.name}(${shown.arguments})`;
      }
      pieces += 1;
      const timings = chunk.timings;
      $("#speed").textContent = timings?.predicted_per_second
        ? `${timings.predicted_per_second.toFixed(1)} tokens/s`
        : `${((pieces * 1000) / (performance.now() - started)).toFixed(1)} chunks/s`;
      $("#messages").lastElementChild?.scrollIntoView({ block: "end" });
    }
    history.push({ role: "assistant", content: content.textContent });
  } catch (error) {
    if (error.name !== "AbortError") {
      const note = document.createElement("div");
      note.className = "error";
      note.textContent = error.message;
      out.append(note);
    }
    history.push({ role: "assistant", content: content.textContent });
  } finally {
    out.dataset.state = "done";
    running = undefined;
    $("#send").disabled = false;
    $("#stop").disabled = true;
  }
}

$("#ask").addEventListener("submit", (event) => {
  event.preventDefault();
  const question = $("#question").value.trim();
  if (!question || running) return;
  $("#question").value = "";
  void ask(question);
});
$("#question").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey) {
    event.preventDefault();
    $("#ask").requestSubmit();
  }
});
$("#stop").addEventListener("click", () => running?.abort());
$("#clear").addEventListener("click", () => {
  history.length = 0;
  $("#messages").replaceChildren();
});

// The live view: each poll's counters, differenced into rates over time.
const samples = [];
const WINDOW_SECONDS = 120;

function card(label, value) {
  const div = document.createElement("div");
  div.className = "card";
  const b = document.createElement("b");
  b.textContent = value;
  div.append(b, label);
  return div;
}

function gib(bytes) {
  return `${(bytes / 1024 ** 3).toFixed(bytes < 1024 ** 3 ? 3 : 1)} GiB`;
}

function showLive(live) {
  const { model, stats, plan } = live;
  samples.push({ t: live.time, stats });
  while (samples.length > 2 && samples[0].t < live.time - WINDOW_SECONDS * 1000) samples.shift();
  const residency = stats.residency;
  $("#summary").replaceChildren(
    card("architecture", model.architecture),
    card("layers × experts", `${model.layers} × ${model.experts} (${model.expertsUsed} used)`),
    card("runs on", model.gpu ? "GPU + CPU" : "CPU"),
    card("weights", gib(model.bytes)),
    card("decode tokens/s", stats.decodeTokensPerSecond.toFixed(1)),
    card("prompt tokens/s", stats.promptTokensPerSecond.toFixed(1)),
    card("GPU hit rate", `${(residency.gpuHitRate * 100).toFixed(1)} %`),
    card("expert moves", String(residency.moves)),
  );
  drawPlan($("#plan"), plan, live.routing, model.experts);

  const rate = (pick) =>
    samples.slice(1).map((s, i) => {
      const before = samples[i];
      const seconds = (s.t - before.t) / 1000;
      return { t: s.t, v: seconds > 0 ? (pick(s.stats) - pick(before.stats)) / seconds : null };
    });
  drawLines($("#plot-speed"), [
    { name: "decode", color: "var(--accent)", points: rate((s) => s.decodeTokens) },
    { name: "prompt", color: "var(--host)", points: rate((s) => s.promptTokens) },
  ]);
  const hits = samples.slice(1).map((s, i) => {
    const [a, b] = [samples[i].stats.residency, s.stats.residency];
    const calls = b.gpuCalls + b.hostCalls + b.diskCalls - (a.gpuCalls + a.hostCalls + a.diskCalls);
    return { t: s.t, v: calls > 0 ? ((b.gpuCalls - a.gpuCalls) / calls) * 100 : null };
  });
  drawLines($("#plot-hits"), [{ name: "GPU %", color: "var(--gpu)", points: hits }], {
    max: 100,
    format: (v) => `${v.toFixed(0)}%`,
  });
  drawLines($("#plot-moves"), [{ name: "moves/s", color: "var(--disk)", points: rate((s) => s.residency.moves) }]);
  drawBars($("#plot-layer-moves"), live.movesPerLayer ?? [], "var(--disk)");
}

async function poll() {
  try {
    showLive(await getJson("/webui/live"));
    $("#live-error").hidden = true;
  } catch (error) {
    $("#live-error").hidden = false;
    $("#live-error").textContent = `The live view could not be read: ${error.message}`;
  }
  setTimeout(poll, 1000);
}

void showProps();
void poll();
