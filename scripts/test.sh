#!/usr/bin/env bash
# The whole test suite: static checks, unit and integration tests, end-to-end tests in a browser.
# Run after scripts/with-node.sh has set up Node and packages (npm test does both).
set -euo pipefail
bash scripts/check.sh
echo "[barnraise] unit and integration tests"
vitest run
echo "[barnraise] end-to-end tests"
bash scripts/e2e.sh
