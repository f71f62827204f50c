// One lint configuration for the whole repository: type-aware, with the promise rules on.
import js from "@eslint/js";
import prettier from "eslint-config-prettier";
import tseslint from "typescript-eslint";

export default tseslint.config(
  {
    ignores: [
      "**/node_modules/",
      "**/.next/",
      ".tools/",
      "prisma/generated/",
      "**/dist/",
      "**/next-env.d.ts",
      "**/test-results/",
      "**/playwright-report/",
      // The programs and the tab's worker the platform serves, built by scripts/build-programs.ts.
      "apps/web/.programs/",
    ],
  },
  js.configs.recommended,
  tseslint.configs.strictTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      "@typescript-eslint/no-floating-promises": "error",
      "@typescript-eslint/no-misused-promises": "error",
      "@typescript-eslint/await-thenable": "error",
      "@typescript-eslint/require-await": "error",
      "@typescript-eslint/restrict-template-expressions": ["error", { allowNumber: true }],
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      "no-console": "error",
    },
  },
  {
    files: ["**/*.js"],
    extends: [tseslint.configs.disableTypeChecked],
  },
  {
    files: ["bench/**", "scripts/**"],
    rules: { "no-console": "off" },
  },
  {
    // The core a training node needs runs in a browser too (scripts/check-browser-core.ts bundles it
    // and refuses Node.js imports); these are the Node.js globals a bundler cannot see.
    files: [
      "packages/protocol/src/**",
      "packages/swarm/src/**",
      "packages/models/src/**",
      "packages/volunteer/src/**",
      "apps/web/src/tab/**",
    ],
    ignores: [
      "packages/protocol/src/node.ts",
      "packages/protocol/src/*.node.ts",
      "packages/swarm/src/node/**",
      "packages/models/src/node/**",
    ],
    rules: {
      "no-restricted-globals": [
        "error",
        ...["Buffer", "process", "setImmediate", "__dirname", "__filename", "require"].map((name) => ({
          name,
          message: `${name} is Node.js only: use a web standard, or put it behind a port with its Node implementation in the package's ./node entry`,
        })),
      ],
    },
  },
  prettier,
);
