// Installs the package as a user would, and checks it (CI runs it after the tests):
//   node tools/install-check.mjs [--tarball bloomery-0.1.0.tgz] [--electron] [--keep]
// Packs the package (npm pack: prepack puts prebuilds/linux-x64 in it, from build/Release/ as
// `npm ci` built it), installs the tarball in a fresh directory with a PATH holding only node, npm
// and sh (no compiler, make or python), and checks that the install used the prebuild and built
// nothing, took under 60 s, left the package under 100 MB, and that the installed package loads
// its default model and generates text, also from a copy under resources/app.asar.unpacked (where an Electron
// app keeps it). With --electron it then runs @electron/rebuild on the app, which must keep the prebuild.
// Prints each figure. Dependencies come from npm's cache
// (npm ci filled it) when they are there.
import { execFileSync, spawnSync } from "node:child_process";
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const say = (line) => console.log(`install-check: ${line}`);
const LIMIT_SECONDS = 60;
const LIMIT_BYTES = 100e6;

const ELECTRON_REBUILD = "@electron/rebuild@3.6.0";
const ELECTRON_VERSION = "33.2.0";

const { values } = parseArgs({
  options: { tarball: { type: "string" }, keep: { type: "boolean" }, electron: { type: "boolean" } },
});
const work = mkdtempSync(join(tmpdir(), "bloomery-install-"));
let failed = false;
const fail = (line) => {
  say(`FAIL: ${line}`);
  failed = true;
};

/** Bytes under `path`, links not followed. */
function du(path) {
  const st = statSync(path, { throwIfNoEntry: false });
  if (!st) return 0;
  if (!st.isDirectory()) return st.size;
  return readdirSync(path).reduce((sum, entry) => sum + du(join(path, entry)), 0);
}

const mb = (bytes) => `${(bytes / 1e6).toFixed(1)} MB`;

function pack() {
  if (values.tarball) return values.tarball;
  // The lifecycle scripts run first, on their own, so that what they print (tsup colours its
  // output where CI sets FORCE_COLOR) never mixes with the JSON npm pack writes to stdout.
  say("npm run build:ts and prepack (packs prebuilds/), then npm pack");
  for (const script of ["build:ts", "prepack"]) execFileSync("npm", ["run", script], { cwd: root, stdio: ["ignore", "inherit", "inherit"] });
  const out = execFileSync("npm", ["pack", "--ignore-scripts", "--pack-destination", work, "--json"], {
    cwd: root,
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
  });
  const [info] = JSON.parse(out);
  const prebuilds = info.files.filter((f) => f.path.startsWith("prebuilds/"));
  for (const f of prebuilds) say(`  ${f.path}: ${mb(f.size)}`);
  if (!prebuilds.some((f) => f.path.startsWith("prebuilds/linux-x64/"))) fail("the tarball has no prebuilds/linux-x64");
  if (info.files.some((f) => f.path.startsWith("native/tests/"))) fail("the tarball ships native/tests");
  for (const page of ["index.html", "app.js", "plots.js", "style.css"]) {
    if (!info.files.some((f) => f.path === `examples/server/webui/${page}`))
      fail(`the tarball lacks the web page's ${page}`);
  }
  say(`tarball ${info.filename}: ${mb(info.size)} packed, ${mb(info.unpackedSize)} unpacked`);
  return join(work, info.filename);
}

/** A folder holding only node, npm and sh (npm runs scripts with it), for a PATH on which no compiler, make or python can be found. */
function bareBin() {
  const bin = join(work, "bin");
  mkdirSync(bin);
  symlinkSync(process.execPath, join(bin, "node"));
  symlinkSync("/bin/sh", join(bin, "sh"));
  const npm = execFileSync("sh", ["-c", "command -v npm"], { encoding: "utf8" }).trim();
  symlinkSync(npm, join(bin, "npm"));
  return bin;
}

const tarball = pack();
const app = join(work, "app");
mkdirSync(app);
writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
const env = { ...process.env, PATH: bareBin() };
for (const key of ["CC", "CXX", "CUDA_PATH", "CUDA_HOME", "npm_config_node_gyp"]) delete env[key];
const compilers = spawnSync("/bin/sh", ["-c", "command -v g++ || command -v c++ || command -v make"], { env });
if (compilers.status === 0) fail("the bare PATH still finds a compiler or make");

say(`npm install ${tarball} in ${app}, PATH=${env.PATH} (no compiler)`);
const started = Date.now();
const install = spawnSync(
  "npm",
  ["install", tarball, "--prefer-offline", "--no-audit", "--no-fund", "--foreground-scripts"],
  {
    cwd: app,
    env,
    encoding: "utf8",
  },
);
const seconds = (Date.now() - started) / 1000;
process.stdout.write(install.stdout);
process.stderr.write(install.stderr);
say(`install took ${seconds.toFixed(1)} s (limit ${LIMIT_SECONDS} s)`);
if (install.status !== 0) fail(`npm install exited ${install.status}`);
if (!/using the prebuilt addon prebuilds\/linux-x64\//.test(install.stdout))
  fail("the install did not say it used the prebuild");
if (seconds > LIMIT_SECONDS) fail(`the install took more than ${LIMIT_SECONDS} s`);

const installed = join(app, "node_modules", "bloomery");
if (statSync(join(installed, "build"), { throwIfNoEntry: false }))
  fail("the install left a build/ folder (it compiled)");
const own = du(installed);
const all = du(join(app, "node_modules"));
say(
  `installed size: bloomery ${mb(own)} (default model included), node_modules in all ${mb(all)} (limit ${mb(LIMIT_BYTES)} for bloomery)`,
);
if (own > LIMIT_BYTES) fail(`the installed package is over ${mb(LIMIT_BYTES)}`);

// What a user's first script does: the default model, a few greedy tokens.
writeFileSync(
  join(app, "generate.mjs"),
  [
    'import { createRequire } from "node:module";',
    'import { dirname, join } from "node:path";',
    'import { loadModel } from "bloomery";',
    "const require = createRequire(import.meta.url);",
    'const pkg = require("bloomery/package.json");',
    'const modelPath = join(dirname(require.resolve("bloomery/package.json")), pkg.bloomery.defaultModel);',
    "const model = await loadModel(modelPath, { gpu: false, threads: 1 });",
    'const run = model.createSession().generate(model.tokenize("Once upon a time"), { maxTokens: 16, temperature: 0 });',
    'let text = "";',
    "for await (const chunk of run) text += chunk.text;",
    "const result = await run.result;",
    "console.log(JSON.stringify({ text, stopReason: result.stopReason }));",
    "model.dispose();",
  ].join("\n"),
);
const generate = spawnSync(process.execPath, ["generate.mjs"], { cwd: app, env, encoding: "utf8", timeout: 120_000 });
process.stderr.write(generate.stderr);
if (generate.status !== 0) fail(`generating from the installed package exited ${generate.status}`);
else {
  const out = JSON.parse(generate.stdout.trim().split("\n").pop());
  say(`generated ${JSON.stringify(out.text)} (${out.stopReason})`);
  if (out.text.trim().length === 0) fail("the generation is empty");
}

// Without a usable prebuild and without a toolchain, the install step must name what to install and fail.
const bare = join(work, "no-prebuild");
cpSync(installed, bare, { recursive: true });
rmSync(join(bare, "prebuilds"), { recursive: true, force: true });
const refused = spawnSync(process.execPath, [join(bare, "tools", "build", "install.mjs")], {
  cwd: bare,
  env,
  encoding: "utf8",
});
const refusal = `${refused.stdout}${refused.stderr}`.trim();
say(`without a prebuild and a compiler the install step exits ${refused.status}: ${JSON.stringify(refusal)}`);
if (refused.status === 0 || !/cannot build: this machine lacks a C\+\+20 compiler .*make.*python3/.test(refusal))
  fail("the install step without a prebuild and a toolchain did not name what to install");

// Electron. An app packed with asar keeps bloomery's *.node and models in app.asar.unpacked (docs/electron.md):
// the package there must resolve its prebuild and read its model from that path.
const unpacked = join(work, "resources", "app.asar.unpacked");
mkdirSync(unpacked, { recursive: true });
cpSync(join(app, "node_modules"), join(unpacked, "node_modules"), { recursive: true, verbatimSymlinks: true });
cpSync(join(app, "generate.mjs"), join(unpacked, "generate.mjs"));
writeFileSync(join(unpacked, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
const where = spawnSync(
  process.execPath,
  [
    "-e",
    'console.log(require("node-gyp-build").path(require("path").dirname(require.resolve("bloomery/package.json"))))',
  ],
  { cwd: unpacked, env, encoding: "utf8" },
);
const resolved = where.stdout.trim();
say(`from app.asar.unpacked, node-gyp-build resolves ${resolved || where.stderr.trim()}`);
if (resolved !== join(unpacked, "node_modules", "bloomery", "prebuilds", "linux-x64", "node.napi.node"))
  fail("node-gyp-build did not resolve the prebuild inside app.asar.unpacked");
const fromUnpacked = spawnSync(process.execPath, ["generate.mjs"], {
  cwd: unpacked,
  env,
  encoding: "utf8",
  timeout: 120_000,
});
if (fromUnpacked.status !== 0)
  fail(`generating from app.asar.unpacked exited ${fromUnpacked.status}: ${fromUnpacked.stderr}`);

// @electron/rebuild, which Electron Forge and electron-builder run, must keep the prebuild rather than compile (no
// compiler is on PATH: a compile would fail). 3.6 is the newest release whose dependencies all come from the npm
// registry (later ones fetch their node-gyp fork from a git host).
if (values.electron) {
  say(`npm install ${ELECTRON_REBUILD}`);
  const add = spawnSync("npm", ["install", ELECTRON_REBUILD, "--prefer-offline", "--no-audit", "--no-fund"], {
    cwd: app,
    env,
    encoding: "utf8",
  });
  if (add.status !== 0) fail(`npm install ${ELECTRON_REBUILD} exited ${add.status}: ${add.stderr}`);
  else {
    const rebuild = spawnSync(
      join(app, "node_modules", ".bin", "electron-rebuild"),
      ["--version", ELECTRON_VERSION, "--module-dir", app, "--only", "bloomery"],
      { cwd: app, env: { ...env, DEBUG: "electron-rebuild" }, encoding: "utf8", timeout: 300_000 },
    );
    const log = `${rebuild.stdout}${rebuild.stderr}`;
    const kept = /Found prebuilt Node-API module/.test(log);
    say(
      `electron-rebuild --version ${ELECTRON_VERSION}: exit ${rebuild.status}, ${kept ? "kept the prebuild" : "did not keep the prebuild"}`,
    );
    if (rebuild.status !== 0 || !kept) fail(`electron-rebuild did not keep the prebuild:\n${log.slice(-2000)}`);
    const release = join(installed, "build", "Release");
    const built = existsSync(release) ? readdirSync(release).filter((name) => name.endsWith(".node")) : [];
    if (built.length > 0) fail(`electron-rebuild compiled ${built.join(", ")}`);
    const after = spawnSync(process.execPath, ["generate.mjs"], { cwd: app, env, encoding: "utf8", timeout: 120_000 });
    if (after.status !== 0) fail(`after electron-rebuild, generating exited ${after.status}: ${after.stderr}`);
  }
}

if (values.keep) say(`kept ${work}`);
else rmSync(work, { recursive: true, force: true });
say(failed ? "failed" : "passed");
process.exitCode = failed ? 1 : 0;
