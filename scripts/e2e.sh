#!/usr/bin/env bash
# Runs the Playwright end-to-end tests against a production build of the web app.
#
#   bash scripts/e2e.sh [playwright test args...]
#
# Run it after scripts/with-node.sh has set up Node.js and the dependencies (`npm test` does both and
# runs this last).
#
# Needs Chromium at $CHROMIUM_PATH (default /usr/bin/chromium, Debian's `chromium` package). When it is
# missing and this runs as root on a system with apt-get, it is installed.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
chromium="${CHROMIUM_PATH:-/usr/bin/chromium}"
export NEXT_TELEMETRY_DISABLED=1

log() { printf '[barnraise] %s\n' "$*" >&2; }

if [[ ! -x "$chromium" ]]; then
  if [[ "$chromium" == /usr/bin/chromium && "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    log "Chromium is missing; installing Debian's chromium package"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
  else
    log "the e2e tests need Chromium at $chromium, and it is not there."
    log "On Debian or Ubuntu, install it with:  sudo apt-get install -y chromium"
    log "or point CHROMIUM_PATH at an existing Chromium or Chrome binary."
    exit 1
  fi
fi

cd "$root"
log "building the web app"
npm run build --silent -w @barnraise/web

log "running the Playwright tests"
exec playwright test -c e2e/playwright.config.ts "$@"
