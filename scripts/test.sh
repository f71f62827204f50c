#!/usr/bin/env bash
# The whole test suite: static checks, unit and integration tests, end-to-end tests in a browser.
# Run after scripts/with-node.sh has set up Node and packages (npm test does both).
set -euo pipefail
bash scripts/check.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# The network-namespace tests build home routers with nftables (NAT); ip and tc come with iproute2.
command -v nft >/dev/null || [[ -x /usr/sbin/nft ]] || install_debian_package nftables "the NAT lab tests" || exit 1
echo "[barnraise] unit and integration tests (SQLite and PostgreSQL)"
BARNRAISE_TEST_POSTGRES_URL="$(bash scripts/postgres.sh start)"
export BARNRAISE_TEST_POSTGRES_URL
trap 'bash scripts/postgres.sh stop' EXIT
vitest run
echo "[barnraise] end-to-end tests"
bash scripts/e2e.sh
