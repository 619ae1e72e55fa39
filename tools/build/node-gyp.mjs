// How to run node-gyp: the one npm runs scripts with (npm_config_node_gyp), else the one bundled
// with the npm beside this Node.js, else node-gyp on PATH. Outside npm, the headers installed with
// this Node.js (<prefix>/include/node) stand in for npm's nodedir setting, so that node-gyp need not
// download them.
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";

export function nodeGyp(env = process.env) {
  const prefix = join(dirname(process.execPath), "..");
  const bundled = join(prefix, "lib", "node_modules", "npm", "node_modules", "node-gyp", "bin", "node-gyp.js");
  const script = env.npm_config_node_gyp ?? (existsSync(bundled) ? bundled : undefined);
  const headers = existsSync(join(prefix, "include", "node", "node_api.h"));
  return {
    command: script ? process.execPath : "node-gyp",
    args: script ? [script] : [],
    env: env.npm_config_nodedir || !headers ? env : { ...env, npm_config_nodedir: prefix },
  };
}
