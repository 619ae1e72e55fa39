// Packs the built addons into prebuilds/ (npm pack runs it as `prepack`), in the layout
// node-gyp-build and @electron/rebuild read (prebuild-name.mjs):
//   linux-x64    build/Release/bloomery.node: CPU kernels (scalar, AVX2, AVX-512) and CUDA, as
//                `npm ci` or `npm run build:native` built it (else built here, with every core)
//   linux-arm64  build-arm64/: the cross-compiled CPU build (tools/build/arm64.mjs; built here when absent)
// Each is stripped; the x64 one must load, and carry CUDA unless BLOOMERY_CUDA=0 says a CPU-only
// package is meant. BLOOMERY_PREBUILD_ARCHS="x64" packs x64 alone (default "x64,arm64").
// package.json keeps prebuildify in devDependencies: @electron/rebuild keeps a package's
// prebuilds (instead of compiling it) only for packages that list it there.
import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, rmSync, statSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { arm64Addon, crossPrefix } from "./arm64.mjs";
import { prebuildPath } from "./prebuild-name.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const say = (line) => console.log(`bloomery prebuild: ${line}`);
const archs = (process.env.BLOOMERY_PREBUILD_ARCHS ?? "x64,arm64").split(",").map((a) => a.trim());

function run(cmd, args) {
  const result = spawnSync(cmd, args, { cwd: root, stdio: "inherit" });
  if (result.status !== 0) {
    say(`${cmd} ${args.join(" ")} failed`);
    process.exit(1);
  }
}

const sources = {
  x64: {
    addon: join(root, "build", "Release", "bloomery.node"),
    build: () => run(process.execPath, ["tools/build/install.mjs", "--force", "--no-tests"]),
    strip: "strip",
  },
  arm64: {
    addon: arm64Addon,
    build: () => run(process.execPath, ["tools/build/arm64.mjs"]),
    strip: `${crossPrefix}strip`,
  },
};

/** What the x64 addon reports of itself, loaded in a child process. */
function describe(file) {
  const probe = spawnSync(
    process.execPath,
    ["-e", "const a = require(process.argv[1]); console.log(JSON.stringify(a.getSystemInfo().cuda))", file],
    { encoding: "utf8" },
  );
  if (probe.status !== 0) {
    say(`${relative(root, file)} does not load: ${probe.stderr.trim()}`);
    process.exit(1);
  }
  return JSON.parse(probe.stdout);
}

rmSync(join(root, "prebuilds"), { recursive: true, force: true });
for (const arch of archs) {
  const source = sources[arch];
  if (!source) {
    say(`BLOOMERY_PREBUILD_ARCHS names "${arch}"; expected x64 and/or arm64`);
    process.exit(1);
  }
  if (!existsSync(source.addon)) {
    say(`${relative(root, source.addon)} is missing: building it`);
    source.build();
  }
  const target = prebuildPath(root, "linux", arch);
  mkdirSync(dirname(target), { recursive: true });
  copyFileSync(source.addon, target);
  run(source.strip, ["--strip-unneeded", target]);
  if (arch === "x64") {
    const cuda = describe(target);
    if (!cuda.compiled && process.env.BLOOMERY_CUDA !== "0") {
      say(
        `${relative(root, source.addon)} was built without CUDA: build it with nvcc present, or set ` +
          "BLOOMERY_CUDA=0 to pack a CPU-only package on purpose",
      );
      process.exit(1);
    }
  }
  say(`${relative(root, target)}: ${(statSync(target).size / 1e6).toFixed(1)} MB`);
}
