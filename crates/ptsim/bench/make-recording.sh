#!/usr/bin/env bash
# Builds the benchmark recording: a simulated Intel PT perf.data of bench/workload.c with
# at least 10 M branches, plus its ground truth. Usage: make-recording.sh OUTDIR [ROUNDS]
set -euo pipefail
out=${1:?usage: make-recording.sh OUTDIR [ROUNDS]}
rounds=${2:-48}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
mkdir -p "$out"
cc -O2 -g -o "$out/workload" "$here/workload.c"
(cd "$root" && cargo build --release -q -p ptsim -p ptsim-plugin)
target=${CARGO_TARGET_DIR:-$root/target}
PTSIM_PLUGIN="$target/release/libptsim_plugin.so" "$target/release/ptsim" run -o "$out/perf.data" -- "$out/workload" "$rounds"
