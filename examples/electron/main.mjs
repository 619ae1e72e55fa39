// An Electron main process that runs bloomery (docs/electron.md): the model loads here, never in a
// renderer, and the window gets the load progress and the generated text over IPC.
//   npm install electron bloomery && npx electron examples/electron/main.mjs [model.gguf]
import { createRequire } from "node:module";
import { dirname, join, sep } from "node:path";
import { app, BrowserWindow } from "electron";
import { loadModel } from "bloomery";

// Packed with asar, model files must be unpacked (asarUnpack): the engine maps them with the
// system's own calls, which cannot read inside app.asar.
function defaultModel() {
  const require = createRequire(import.meta.url);
  const manifest = require.resolve("bloomery/package.json");
  const file = join(dirname(manifest), require(manifest).bloomery.defaultModel);
  return file.replace(`app.asar${sep}`, `app.asar.unpacked${sep}`);
}

const page = `<!doctype html><meta charset="utf-8"><title>bloomery</title>
<body style="font:16px system-ui;margin:2em"><progress id="load" max="1" value="0"></progress>
<pre id="out" style="white-space:pre-wrap"></pre><script>
const { ipcRenderer } = require("electron");
ipcRenderer.on("progress", (_, fraction) => (document.getElementById("load").value = fraction));
ipcRenderer.on("text", (_, text) => (document.getElementById("out").textContent += text));
</script></body>`;

await app.whenReady();
const window = new BrowserWindow({
  width: 720,
  height: 480,
  webPreferences: { nodeIntegration: true, contextIsolation: false },
});
await window.loadURL(`data:text/html,${encodeURIComponent(page)}`);
const named = process.argv.find((arg) => arg.endsWith(".gguf"));
const model = await loadModel(named ?? defaultModel(), {
  gpu: false,
  onProgress: (p) => window.webContents.send("progress", p.fraction),
});
app.on("window-all-closed", () => {
  model.dispose();
  app.quit();
});
const prompt = model.applyChatTemplate([{ role: "user", content: "Tell me a fortune." }]);
const run = model.createSession().generate(model.tokenize(prompt, { special: true }), { maxTokens: 128 });
for await (const chunk of run) window.webContents.send("text", chunk.text);
