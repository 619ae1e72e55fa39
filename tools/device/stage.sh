#!/bin/bash
# Here: stage .device/ for an A/B on the GPU machine. The app (dist, bench, test/device and the
# addon in build/Release) goes as one xz archive, with each named addon build beside it under
# app/variants/ (never in build/Release: node-gyp-build loads the first .node file it finds
# there, whatever its name, so a variant left beside bloomery.node may be the one that runs).
#   tools/device/stage.sh [NAME=path/to/bloomery.node ...]
# e.g. tools/device/stage.sh main=/tmp/main.node tie=build/Release/bloomery.node
# The working tree travels too: move models/*.gguf out for the call (they and the app together
# pass the 64 MiB a call takes).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
bash ../shared/device/stage.sh dist build/Release/bloomery.node test/device test/distributions.mjs bench ||
  [ -d .device/app ] # its size check counts the app before it is packed
rm -rf .device/app/bench/results .device/app/bench/traces
mkdir -p .device/app/variants
for pair in "$@"; do
  name=${pair%%=*} file=${pair#*=}
  [[ $name =~ ^[A-Za-z0-9_-]+$ && -f $file ]] || { echo "bad variant $pair (NAME=existing file)"; exit 1; }
  cp "$file" ".device/app/variants/bloomery-$name.node"
done
cp "$(dirname "$0")/steps.sh" .device/steps.sh
(cd .device && tar -c app | xz -T2 -6 > app.tar.xz && rm -rf app)
size=$(du -sm .device | cut -f1)
echo "staged .device/: ${size} MiB"
[ "$size" -le 62 ] || { echo "too large for a call (64 MiB with the tree)"; exit 1; }
