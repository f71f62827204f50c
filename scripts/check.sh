#!/usr/bin/env bash
# Static checks: types, lint, formatting. Run after scripts/with-node.sh has set up Node and packages.
set -euo pipefail
echo "[barnraise] database schemas in step"
node scripts/prisma-schemas.ts --check
echo "[barnraise] typecheck"
tsc -p tsconfig.json
for project in apps/web e2e; do
  if [[ -f "$project/tsconfig.json" ]]; then tsc -p "$project/tsconfig.json"; fi
done
echo "[barnraise] lint"
eslint --max-warnings 0 .
echo "[barnraise] format"
prettier --check --log-level warn .
