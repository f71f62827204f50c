# Helpers shared by the scripts in this folder. Source it: . "$(dirname "${BASH_SOURCE[0]}")/common.sh"

log() { printf '[barnraise] %s\n' "$*" >&2; }

# install_debian_package PACKAGE WHY: installs a Debian package with apt-get when running as root,
# or explains how to install it and fails.
install_debian_package() {
  local package="$1" why="$2"
  if [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    log "installing Debian's $package package, needed for $why"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$package" >/dev/null
  else
    log "Debian's $package package is needed for $why. Install it with:  sudo apt-get install -y $package"
    return 1
  fi
}

# with_deadline SECONDS WHAT COMMAND...: runs a step that must end by itself (a migration, a build)
# and fails with a message naming WHAT when it has not ended within SECONDS (it is then stopped:
# SIGTERM, SIGKILL 10 s later), instead of hanging without a word.
with_deadline() {
  local limit="$1" what="$2" status=0
  shift 2
  # In the foreground: a Ctrl-C reaches the step as it would without the deadline.
  timeout --foreground --kill-after=10 "$limit" "$@" || status=$?
  if ((status == 124 || status == 137)); then
    log "$what did not finish within $limit s; stopped it (is another program holding the data directory?)"
  fi
  return "$status"
}

# wait_until SECONDS WHAT COMMAND...: runs COMMAND every half second until it succeeds (returns 0),
# saying every 10 s that it is still waiting for WHAT and for how long. Returns 1 when SECONDS pass
# first, and 2 at once when COMMAND returns 2 (what it waits for can no longer happen).
wait_until() {
  local limit="$1" what="$2"
  shift 2
  local started=$SECONDS note_at=10 status waited
  while :; do
    status=0
    "$@" || status=$?
    if ((status == 0 || status == 2)); then return "$status"; fi
    waited=$((SECONDS - started))
    if ((waited >= limit)); then return 1; fi
    if ((waited >= note_at)); then
      log "still waiting for $what ($waited s of $limit s)"
      note_at=$((note_at + 10))
    fi
    sleep 0.5
  done
}
