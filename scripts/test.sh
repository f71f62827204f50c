#!/usr/bin/env bash
# The whole test suite: static checks, unit and integration tests, end-to-end tests in a browser.
# Run after scripts/with-node.sh has set up Node and packages (npm test does both).
set -euo pipefail
bash scripts/check.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# The network-namespace tests build home routers with nftables (NAT); ip and tc come with iproute2.
command -v nft >/dev/null || [[ -x /usr/sbin/nft ]] || install_debian_package nftables "the NAT lab tests" || exit 1
# The WebGPU tests run Dawn on Mesa's software rasterizer through EGL (OpenGL ES) when no GPU is here.
for package in libegl1 libegl-mesa0 libgles2; do
  dpkg -s "$package" >/dev/null 2>&1 || install_debian_package "$package" "the WebGPU tests (Mesa's EGL)" || exit 1
done
# An independent safetensors reader in the checkpoint export tests: Python with numpy.
if ! python3 -c 'import numpy' >/dev/null 2>&1; then
  /usr/bin/python3 -c 'import numpy' >/dev/null 2>&1 || install_debian_package python3-numpy "the safetensors reader in the tests" || exit 1
  export BARNRAISE_TEST_PYTHON=/usr/bin/python3
fi
# The reference Prometheus text-format parser (the Python client's, from Debian) reads the scrapes.
/usr/bin/python3 -c 'import prometheus_client.parser' >/dev/null 2>&1 ||
  install_debian_package python3-prometheus-client "the Prometheus scrape parser in the tests" || exit 1
[[ -x "${CHROMIUM_PATH:-/usr/bin/chromium}" ]] || install_debian_package chromium "the browser node tests" || exit 1
echo "[barnraise] unit and integration tests (SQLite and PostgreSQL)"
BARNRAISE_TEST_POSTGRES_URL="$(bash scripts/postgres.sh start)"
export BARNRAISE_TEST_POSTGRES_URL
trap 'bash scripts/postgres.sh stop' EXIT
vitest run
echo "[barnraise] end-to-end tests"
bash scripts/e2e.sh
echo "[barnraise] soak (5 minutes of restarts, re-tokens and kills)"
node scripts/soak/soak.ts --minutes 5
