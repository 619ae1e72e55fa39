#!/bin/bash
# On the GPU machine: unpack the staged app once into /root/dev (it stays while the machine is
# warm), then run the steps given as one shell string, each at most once per machine:
#   T0=$(date +%s) LIMIT=570 bash .device/steps.sh 'use main; step famA 200 node bench/families.mjs ...'
# `use NAME` makes app/variants/bloomery-NAME.node the addon that loads; `step NAME SECONDS CMD...`
# runs CMD in the app (with Node.js on PATH; $OUT is the call's, so give each step that writes the
# same file names its own: env OUT=$OUT/NAME) under a timeout, its output in $OUT/NAME.txt, and is
# skipped where fewer than SECONDS are left of LIMIT or where it passed before. A later call
# finds /root/dev as this one left it: pass `bash /root/dev/steps.sh` then, without carrying
# .device again, or a stale .device (ignored paths stay between calls) replaces nothing here.
set -u
T0=${T0:-$(date +%s)}
LIMIT=${LIMIT:-570}
DEV=/root/dev
STATE=/root/dev-state
mkdir -p "$STATE" "$OUT"
log() { echo "[$(($(date +%s) - T0))s] $*" | tee -a "$OUT/log.txt"; }
left() { echo $((LIMIT - ($(date +%s) - T0))); }
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -e "$DEV/app/package.json" ]; then
  mkdir -p "$DEV" && cp "$here/node.xz" "$here/on-device.sh" "$here/steps.sh" "$DEV/" &&
    tar -xJf "$here/app.tar.xz" -C "$DEV" || { log "could not unpack $here"; exit 1; }
  cp "$DEV/app/build/Release/bloomery.node" "$DEV/app/variants/bloomery-staged.node"
  log "unpacked into $DEV"
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a "$OUT/log.txt"
use() {
  cp "$DEV/app/variants/bloomery-$1.node" "$DEV/app/build/Release/bloomery.node" && log "addon: $1 ($(md5sum < "$DEV/app/build/Release/bloomery.node" | cut -c1-8))"
}
step() {
  local name=$1 seconds=$2
  shift 2
  [ -e "$STATE/$name.done" ] && { log "$name: passed before"; return 0; }
  [ "$(left)" -lt "$seconds" ] && { log "$name: skipped ($(left) s left, needs $seconds)"; return 1; }
  log "$name: start"
  timeout "$seconds" bash "$DEV/on-device.sh" "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  tail -12 "$OUT/$name.txt"
  log "$name: rc $rc"
  [ $rc -eq 0 ] && touch "$STATE/$name.done"
  return $rc
}
eval "$1"
log "end, $(left) s left"
