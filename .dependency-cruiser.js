/**
 * The dependency rules of the product source, checked by `npm run check` (scripts/check.sh):
 *
 *   depcruise --config .dependency-cruiser.js packages apps prisma/src
 *
 * Type-only imports count like any other. Tests, benchmarks and scripts are not held to the layers.
 */

/**
 * The workspace, lowest layer first: a layer imports only layers below it. The wire formats and
 * the database know nothing of the engine; the engine knows nothing of TF.js; the apps sit on top.
 */
const WORKSPACE_LAYERS = [
  ["packages/protocol"],
  ["prisma/src", "packages/netlab", "packages/browserlab"],
  ["packages/swarm"],
  ["packages/models"],
  ["packages/volunteer"],
  ["apps/peer", "apps/aux", "apps/web"],
];

/**
 * The engine's folders (packages/swarm/src), lowest layer first: a folder imports only folders of
 * lower layers, never one of its own layer or above. The files at the package's root other than
 * the shared errors (`swarm.ts`, `identity.ts`) sit on top, the node session (`session/`) above
 * them, and `index.ts` above everything the engine is. What a node needs of its runtime sits beside
 * it, outside: Node.js's in `node/` (files, Prometheus over HTTP, the CLI helpers), a browser's in
 * `browser/` (IndexedDB); only `node.ts` and `browser.ts` import them.
 */
const SWARM_LAYERS = [
  ["errors.ts", "time"],
  ["compression", "rpc", "metrics"],
  ["net"],
  ["state"],
  ["progress", "platform"],
  ["p2p"],
  ["averaging", "control", "optim"],
];

const escape = (text) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
/** A path pattern for a folder or a file of `root`. */
const under = (root, entries) =>
  `^${escape(root)}/(${entries.map((entry) => escape(entry) + (entry.endsWith(".ts") ? "$" : "/")).join("|")})`;

/** One rule per layer: nothing in it imports a later layer (or, with `strict`, its own). */
function layerRules(name, root, layers, { strict }) {
  return layers
    .flatMap((layer, index) => {
      const above = layers.slice(strict ? index : index + 1).flat();
      return layer.map((entry) => {
        const others = above.filter((other) => other !== entry);
        return {
          name: `${name}-layers`,
          comment: `${root}/${entry} is below ${others.join(", ")} and imports none of them`,
          severity: "error",
          from: { path: under(root, [entry]) },
          to: { path: under(root, others) },
        };
      });
    })
    .filter((rule) => !rule.to.path.endsWith("/()"));
}

/** The workspace layers as rules: each entry is a path prefix, not a folder of one root. */
function workspaceRules() {
  return WORKSPACE_LAYERS.slice(0, -1).map((layer, index) => {
    const above = WORKSPACE_LAYERS.slice(index + 1).flat();
    return {
      name: "workspace-layers",
      comment: `${layer.join(", ")} imports none of ${above.join(", ")}`,
      severity: "error",
      from: { path: `^(${layer.map(escape).join("|")})/` },
      to: { path: `^(${above.map(escape).join("|")})/` },
    };
  });
}

/** The runtimes a core runs in, each with its adapters (a folder) and their entry point. */
const RUNTIMES = [
  { runtime: "node", name: "Node.js" },
  { runtime: "browser", name: "browser" },
];

/**
 * A package whose core runs in Node.js and in browsers: nothing in it imports a runtime's adapters
 * (node/, browser/), and one runtime's adapters import none of another's; only a runtime's entry
 * point (node.ts, browser.ts) imports its adapters, and the programs get them from
 * @barnraise/<pkg>/<runtime>.
 */
function coreNotRuntime(pkg, what) {
  const root = `packages/${pkg}/src`;
  return RUNTIMES.map(({ runtime, name }) => ({
    name: `${pkg}-core-not-${runtime}`,
    comment: `${what} (${root}) runs in Node.js and in browsers: only ${runtime}.ts imports the ${name} adapters (${runtime}/), for @barnraise/${pkg}/${runtime}.`,
    severity: "error",
    from: { path: `^${escape(root)}/`, pathNot: under(root, [runtime, `${runtime}.ts`]) },
    to: { path: under(root, [runtime]) },
  }));
}

export default {
  forbidden: [
    {
      name: "no-circular",
      comment:
        "No import cycle, type-only imports included: each module can be read before the ones that use it.",
      severity: "error",
      from: {},
      to: { circular: true },
    },
    {
      name: "no-app-imports-an-app",
      comment: "An app imports packages, never another app: what two apps share is a package.",
      severity: "error",
      from: { path: "^apps/([^/]+)/" },
      to: { path: "^apps/", pathNot: "^apps/$1/" },
    },
    ...workspaceRules(),
    ...layerRules("swarm", "packages/swarm/src", SWARM_LAYERS, { strict: true }),
    {
      name: "swarm-layers",
      comment:
        "The engine's folders import none of the files on top (swarm.ts, identity.ts); only the node session (session/) and the runtime adapters (node/, browser/) are above them.",
      severity: "error",
      from: {
        path: "^packages/swarm/src/([^/]+/|errors\\.ts$)",
        pathNot: "^packages/swarm/src/(session|node|browser)/",
      },
      to: { path: "^packages/swarm/src/[^/]+\\.ts$", pathNot: "/errors\\.ts$" },
    },
    {
      name: "swarm-layers",
      comment:
        "The node session (session/) is the engine's top: only the package's entry points and the runtime adapters (node/, browser/) import it.",
      severity: "error",
      from: {
        path: "^packages/swarm/src/",
        pathNot: "^packages/swarm/src/(session/|node/|browser/|index\\.ts$|node\\.ts$|browser\\.ts$)",
      },
      to: { path: "^packages/swarm/src/session/" },
    },
    ...coreNotRuntime("swarm", "The engine"),
    ...coreNotRuntime("models", "The models package"),
    {
      name: "web-api-is-the-contract",
      comment:
        "The platform's API (apps/web/src/api: request and response schemas, error codes) is the contract the use cases implement: it imports none of them.",
      severity: "error",
      from: { path: "^apps/web/src/api/" },
      to: { path: "^apps/web/src/server/" },
    },
    {
      name: "web-src-not-app",
      comment:
        "The platform's use cases and API schemas (apps/web/src) never import its routes and pages (apps/web/app).",
      severity: "error",
      from: { path: "^apps/web/src/" },
      to: { path: "^apps/web/app/" },
    },
  ],
  options: {
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
    doNotFollow: { path: "node_modules" },
    exclude: {
      path: "(node_modules|/test/|\\.test\\.tsx?$|/generated/|/\\.next/|next-env\\.d\\.ts$)",
    },
    enhancedResolveOptions: {
      exportsFields: ["exports"],
      conditionNames: ["import", "types", "node", "default"],
      extensions: [".ts", ".tsx", ".js"],
    },
  },
};
