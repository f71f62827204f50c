#!/usr/bin/env bash
# Runs the Playwright end-to-end tests against a production build of the web app.
#
#   bash scripts/e2e.sh [playwright test args...]
#
# Run it after scripts/with-node.sh has set up Node.js and the dependencies (`npm test` does both and
# runs this last).
#
# Playwright's global setup (e2e/global-setup.ts) starts a local OIDC provider and then the platform
# on a fresh data directory with a migrated SQLite database. E2E_RUN_ID, set here once per run, seeds
# the secrets that the platform and the tests share (e2e/support/run-env.ts).
#
# Needs Chromium at $CHROMIUM_PATH (default /usr/bin/chromium, Debian's `chromium` package). When it is
# missing and this runs as root on a system with apt-get, it is installed.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
chromium="${CHROMIUM_PATH:-/usr/bin/chromium}"
export NEXT_TELEMETRY_DISABLED=1

. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

if [[ ! -x "$chromium" ]]; then
  if [[ "$chromium" != /usr/bin/chromium ]]; then
    log "CHROMIUM_PATH is $chromium, and there is no program there"
    exit 1
  fi
  install_debian_package chromium "the browser tests" || {
    log "or point CHROMIUM_PATH at an existing Chromium or Chrome binary."
    exit 1
  }
fi

# The several-instances story puts two platforms behind Debian's HAProxy.
[[ -x /usr/sbin/haproxy ]] || install_debian_package haproxy "the several-instances test (a reverse proxy)" || exit 1

cd "$root"
log "building the web app (skipped while its sources are unchanged)"
node scripts/build-web.ts

E2E_RUN_ID="$(node -e 'process.stdout.write(require("node:crypto").randomUUID())')"
export E2E_RUN_ID

log "running the Playwright tests"
exec playwright test -c e2e/playwright.config.ts "$@"
