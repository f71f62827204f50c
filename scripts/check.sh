#!/usr/bin/env bash
# Static checks: types, dependency rules, lint, formatting. Run after scripts/with-node.sh has set up Node and packages.
set -euo pipefail
echo "[barnraise] database schemas in step"
node scripts/prisma-schemas.ts --check
echo "[barnraise] typecheck"
tsc -p tsconfig.json
for project in apps/web e2e; do
  if [[ -f "$project/tsconfig.json" ]]; then tsc -p "$project/tsconfig.json"; fi
done
echo "[barnraise] dependency rules (no import cycles, no layer importing upward: .dependency-cruiser.js)"
depcruise --config .dependency-cruiser.js --output-type err packages apps prisma/src
echo "[barnraise] the core runs in a browser (no Node.js built-in on a training node's path: scripts/check-browser-core.ts)"
node scripts/check-browser-core.ts
echo "[barnraise] lint"
eslint --max-warnings 0 .
echo "[barnraise] format"
prettier --check --log-level warn .
