# Sourced by scripts/test and scripts/demo: installs Debian packages, waiting for another apt
# or dpkg (unattended-upgrades, a second set-up script, cloud-init) to finish instead of failing.
#
# `-o DPkg::Lock::Timeout` makes apt wait for the dpkg locks (/var/lib/dpkg/lock-frontend,
# /var/lib/dpkg/lock) only. `apt-get update` takes /var/lib/apt/lists/lock, and the download step
# /var/cache/apt/archives/lock, without waiting (seen with apt 2.6.1, Debian 12: "Could not get
# lock …/lists/lock. It is held by process …" at once, timeout or not), so apt_get also retries a
# command that failed on a lock, until the same deadline.

# How long to wait for another package manager, in seconds.
APT_LOCK_WAIT=${APT_LOCK_WAIT:-600}

# Runs `apt-get ARGS…` as root, waiting up to APT_LOCK_WAIT seconds for apt's and dpkg's locks.
apt_get() {
  local sudo="" deadline=$((SECONDS + APT_LOCK_WAIT)) out said=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  while :; do
    # C locale: the lock message is matched below.
    if out=$($sudo env LC_ALL=C DEBIAN_FRONTEND=noninteractive \
      apt-get -o DPkg::Lock::Timeout="$APT_LOCK_WAIT" "$@" 2>&1); then
      # Warnings and notices only: dpkg's progress lines are noise here.
      grep -E '^(W|N): ' <<<"$out" >&2 || true
      return 0
    fi
    if ! grep -q 'Could not get lock' <<<"$out" || [ "$SECONDS" -ge "$deadline" ]; then
      printf '%s\n' "$out" >&2
      echo "apt-get $* failed (see above)." >&2
      return 1
    fi
    if [ -z "$said" ]; then
      echo "Another package manager holds apt's lock; waiting up to ${APT_LOCK_WAIT}s:" >&2
      grep 'Could not get lock' <<<"$out" >&2 || true
      said=1
    fi
    sleep 5
  done
}

# Refreshes the package lists and installs PACKAGES…, quietly.
apt_install() {
  echo "installing ${*} (apt-get)" >&2
  apt_get update -qq
  apt_get install -y -qq "$@"
}
