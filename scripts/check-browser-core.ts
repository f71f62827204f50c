/**
 * The browser check of `npm run check`: bundles the core a training node needs (the protocol, the
 * swarm engine with its node session, the models, and the volunteer's run) with esbuild for `platform: "browser"`, and
 * fails when anything on that path imports a Node.js built-in (`node:fs`, `http`, …), naming the
 * importer. What the Node programs need of Node.js lives in the packages' `./node` entry points,
 * which this bundle does not include.
 *
 * Two allowances for packages: a built-in their package.json `browser` field replaces (tweetnacl's
 * `crypto`), and a dynamic `import("node:…")`, left out of the bundle (Emscripten builds, such as the
 * HiGHS solver's, import `node:module` that way only when they run in Node.js).
 *
 *   node scripts/check-browser-core.ts
 */
import { builtinModules } from "node:module";
import { relative } from "node:path";
import { build, type Plugin } from "esbuild";

const ENTRY_POINTS = [
  "@barnraise/protocol",
  "@barnraise/swarm",
  "@barnraise/swarm/browser",
  "@barnraise/models",
  "@barnraise/models/browser",
  "@barnraise/volunteer",
  "@barnraise/volunteer/browser",
];

const root = new URL("..", import.meta.url).pathname;
const builtins = new Set(builtinModules);
const isBuiltin = (path: string) => path.startsWith("node:") || builtins.has(path.split("/")[0] ?? path);

const offences: string[] = [];
/** Marks the plugin's own resolve calls, which it lets esbuild answer. */
const RESOLVING = Symbol("resolving");
const nodeOnly: Plugin = {
  name: "node-only-imports",
  setup(plugin) {
    plugin.onResolve({ filter: /.*/ }, async (args) => {
      if (!isBuiltin(args.path) || args.pluginData === RESOLVING) return undefined;
      const importer = relative(root, args.importer);
      if (importer.includes("node_modules/")) {
        if (args.kind === "dynamic-import") return { path: args.path, external: true };
        const replaced = await plugin.resolve(args.path, {
          kind: args.kind,
          importer: args.importer,
          resolveDir: args.resolveDir,
          pluginData: RESOLVING,
        });
        // Resolved: the browser field replaced it (with nothing, here, since nothing is written).
        if (replaced.errors.length === 0) return { path: args.path, external: true };
      }
      offences.push(`${importer} imports ${args.path}`);
      return { path: args.path, external: true };
    });
  },
};

const result = await build({
  stdin: {
    contents: ENTRY_POINTS.map((entry) => `export * from ${JSON.stringify(entry)};`).join("\n"),
    resolveDir: root,
    loader: "ts",
  },
  bundle: true,
  platform: "browser",
  format: "esm",
  write: false,
  outfile: "browser-core.js",
  metafile: true,
  logLevel: "silent",
  plugins: [nodeOnly],
});

if (offences.length > 0) {
  console.error(`The browser core (${ENTRY_POINTS.join(", ")}) imports Node.js built-ins:`);
  for (const offence of offences) console.error(`  ${offence}`);
  console.error(
    "Put what needs Node.js behind a port, with its Node implementation in the package's ./node entry.",
  );
  process.exitCode = 1;
} else {
  const bytes = result.outputFiles.reduce((total, file) => total + file.contents.byteLength, 0);
  const inputs = Object.keys(result.metafile.inputs).length;
  console.log(
    `browser core bundles for the browser: ${ENTRY_POINTS.join(", ")} (${inputs} modules, ${(bytes / 1e6).toFixed(1)} MB)`,
  );
}
