// Where a platform's prebuilt addon lives in the package: prebuildify's layout, which both
// node-gyp-build (at run time) and @electron/rebuild (to keep it instead of compiling) read:
// prebuilds/<platform>-<arch>/node.napi[.armv8].node, a Node-API build for node and Electron alike.
import { join } from "node:path";

export function prebuildPath(root, platform, arch) {
  const tags = arch === "arm64" ? "node.napi.armv8.node" : "node.napi.node";
  return join(root, "prebuilds", `${platform}-${arch}`, tags);
}
