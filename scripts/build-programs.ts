/**
 * Builds the self-contained volunteer and aux programs that the platform serves (DESIGN §5):
 * `barnraise-peer` and `barnraise-aux` as npm tarballs of compiled JavaScript with every dependency
 * bundled (esbuild) and the WebAssembly binaries they load beside it, a `bin` that runs on
 * Node.js ≥ 22 with nothing else installed. It also builds what a browser tab runs when a volunteer
 * contributes from the experiment page (`tab/`): the Web Worker (apps/web/src/tab) bundled for
 * browsers, and the wasm backend's binaries it loads. Next to them it writes `manifest.json`: each
 * program's version, file name, size and SHA-256, the tab's files, and the protocol version the
 * platform speaks.
 *
 *   node scripts/build-programs.ts [--out DIR] [--force]
 *
 * DIR defaults to apps/web/.programs, where the platform looks (BARNRAISE_PROGRAMS_DIR changes
 * that). A tarball's name carries the start of its SHA-256, so a command copied from the page names
 * exactly one build and `npx` never runs a stale copy from its cache. The build is skipped when the
 * inputs (the programs' sources, the packages they use and package-lock.json) hash to the same
 * value as last time; --force builds anyway.
 */
import { createHash } from "node:crypto";
import { execFileSync } from "node:child_process";
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { basename, dirname, join, relative, resolve } from "node:path";
import { parseArgs } from "node:util";
import { build } from "esbuild";
import { PROTOCOL_VERSION } from "../packages/protocol/src/index.ts";
import { hashInputs } from "./input-hash.ts";

const root = resolve(import.meta.dirname, "..");
const { values: flags } = parseArgs({
  options: {
    out: { type: "string", default: process.env.BARNRAISE_PROGRAMS_DIR ?? join(root, "apps/web/.programs") },
    force: { type: "boolean", default: false },
  },
});
const out = resolve(flags.out);

interface Program {
  readonly name: "barnraise-peer" | "barnraise-aux";
  readonly app: string;
  /** WebAssembly binaries the bundle loads from its own directory: [package, file in the package]. */
  readonly wasm: readonly (readonly [string, string])[];
}

const programs: readonly Program[] = [
  {
    name: "barnraise-peer",
    app: "apps/peer",
    wasm: [
      ["@tensorflow/tfjs-backend-wasm", "dist/tfjs-backend-wasm.wasm"],
      ["@tensorflow/tfjs-backend-wasm", "dist/tfjs-backend-wasm-simd.wasm"],
      ["highs", "build/highs.wasm"],
    ],
  },
  {
    name: "barnraise-aux",
    app: "apps/aux",
    // The held-out evaluation of checkpoints runs the peer's model code on the wasm backend.
    wasm: [
      ["@tensorflow/tfjs-backend-wasm", "dist/tfjs-backend-wasm.wasm"],
      ["@tensorflow/tfjs-backend-wasm", "dist/tfjs-backend-wasm-simd.wasm"],
      ["highs", "build/highs.wasm"],
    ],
  },
];

/**
 * Packages left out of the bundle: native TensorFlow bindings the peer tries with a dynamic import
 * and skips when absent (a volunteer who wants them installs them next to the program), Dawn's
 * WebGPU binding, which the peer fetches from the platform for its own platform (see addons), and
 * libp2p's WebRTC, whose Node.js side is a native add-on (node-datachannel, 9 MB a platform): the
 * programs load it with a dynamic import and run without WebRTC-direct where it is absent (browser
 * tabs then reach them through the aux's relay).
 */
const optionalNative = ["@tensorflow/tfjs-node", "@tensorflow/tfjs-node-gpu", "webgpu", "@libp2p/webrtc"];

/**
 * CommonJS code inside an ES module bundle still calls `require` and reads `__dirname` (Emscripten's
 * loaders find their `.wasm` there): define them from the bundle's own location.
 */
const banner = [
  'import { createRequire as __barnraiseRequire } from "node:module";',
  'import { fileURLToPath as __barnraiseFileURLToPath } from "node:url";',
  "const require = __barnraiseRequire(import.meta.url);",
  "const __filename = __barnraiseFileURLToPath(import.meta.url);",
  'const __dirname = __barnraiseFileURLToPath(new URL(".", import.meta.url));',
].join("\n");

export interface ProgramManifest {
  readonly name: string;
  readonly version: string;
  readonly file: string;
  readonly bytes: number;
  readonly sha256: string;
}

export interface AddonManifest {
  readonly name: "webgpu";
  readonly version: string;
  readonly platform: string;
  readonly files: readonly { name: string; file: string; bytes: number; sha256: string }[];
}

export interface TabFileManifest {
  readonly file: string;
  readonly bytes: number;
  readonly sha256: string;
}

export interface TabManifest {
  /** The worker's bundle, under a content-addressed name. */
  readonly worker: TabFileManifest;
  /** The wasm backend's binaries, under the names TF.js asks for. */
  readonly wasm: readonly TabFileManifest[];
}

export interface ProgramsManifest {
  readonly protocolVersion: number;
  readonly inputsHash: string;
  readonly programs: readonly ProgramManifest[];
  readonly addons: readonly AddonManifest[];
  readonly tab: TabManifest;
}

/** The tab's worker, and the wasm binaries it loads ([package, file in the package]). */
const TAB_WORKER = "apps/web/src/tab/volunteer-worker.ts";
const TAB_WASM: readonly (readonly [string, string])[] = [
  ["@tensorflow/tfjs-backend-wasm", "dist/tfjs-backend-wasm.wasm"],
  ["@tensorflow/tfjs-backend-wasm", "dist/tfjs-backend-wasm-simd.wasm"],
  ["highs", "build/highs.wasm"],
];

const log = (line: string) => process.stdout.write(`[build-programs] ${line}\n`);

const inputsHash = programInputsHash();
const manifestPath = join(out, "manifest.json");
if (!flags.force && upToDate()) {
  log(`up to date in ${relative(root, out) || "."}`);
} else {
  mkdirSync(out, { recursive: true });
  const built: ProgramManifest[] = [];
  for (const program of programs) built.push(await buildProgram(program));
  for (const file of readdirSync(out)) {
    if (file.endsWith(".tgz") && !built.some((p) => p.file === file)) rmSync(join(out, file));
  }
  const addons = copyWebGpuAddons();
  const tab = await buildTab();
  const manifest: ProgramsManifest = {
    protocolVersion: PROTOCOL_VERSION,
    inputsHash,
    programs: built,
    addons,
    tab,
  };
  writeFileSync(`${manifestPath}.tmp`, `${JSON.stringify(manifest, null, 2)}\n`);
  renameSync(`${manifestPath}.tmp`, manifestPath);
}

function upToDate(): boolean {
  if (!existsSync(manifestPath)) return false;
  try {
    const manifest = JSON.parse(readFileSync(manifestPath, "utf8")) as ProgramsManifest;
    return (
      manifest.inputsHash === inputsHash &&
      manifest.programs.length === programs.length &&
      manifest.programs.every((p) => existsSync(join(out, p.file))) &&
      Array.isArray(manifest.addons) &&
      manifest.addons.length > 0 &&
      manifest.addons.every((a: AddonManifest) =>
        a.files.every((f) => existsSync(join(out, "addons", f.file))),
      ) &&
      typeof manifest.tab === "object" &&
      [manifest.tab.worker, ...manifest.tab.wasm].every((f) => existsSync(join(out, "tab", f.file)))
    );
  } catch {
    return false;
  }
}

async function buildProgram(program: Program): Promise<ProgramManifest> {
  const started = performance.now();
  const appPackage = JSON.parse(readFileSync(join(root, program.app, "package.json"), "utf8")) as {
    version: string;
    description: string;
    license: string;
  };
  const stage = mkdtempSync(join(tmpdir(), `${program.name}-`));
  try {
    const packageDir = join(stage, "package");
    mkdirSync(packageDir);
    await build({
      entryPoints: [join(root, program.app, "src/cli.ts")],
      outfile: join(packageDir, "cli.js"),
      bundle: true,
      platform: "node",
      format: "esm",
      target: "node22",
      external: optionalNative,
      // `import.meta.main` (Node ≥ 24.2) marks the entry point; in the bundle the entry is the CLI.
      define: { "import.meta.main": "true" },
      banner: { js: banner },
      minify: true,
      keepNames: true,
      legalComments: "eof",
      logLevel: "warning",
    });
    const requireFromApp = createRequire(join(root, program.app, "package.json"));
    for (const [packageName, file] of program.wasm) {
      const packageRoot = packageDirectory(requireFromApp.resolve(packageName), packageName);
      copyFileSync(join(packageRoot, file), join(packageDir, basename(file)));
    }
    writeFileSync(
      join(packageDir, "package.json"),
      `${JSON.stringify(
        {
          name: program.name,
          version: appPackage.version,
          description: appPackage.description,
          license: appPackage.license,
          type: "module",
          bin: { [program.name]: "cli.js" },
          engines: { node: ">=22" },
        },
        null,
        2,
      )}\n`,
    );
    writeFileSync(join(packageDir, "README.md"), readme(program.name));
    // npm pack writes fixed timestamps, so the same inputs give the same bytes and the same name.
    const packed = execFileSync("npm", ["pack", "--silent", "--pack-destination", stage], {
      cwd: packageDir,
      encoding: "utf8",
      env: { ...process.env, npm_config_loglevel: "error", npm_config_update_notifier: "false" },
    }).trim();
    const tarball = join(stage, packed.split("\n").at(-1) ?? "");
    const bytes = readFileSync(tarball);
    const sha256 = createHash("sha256").update(bytes).digest("hex");
    const file = `${program.name}-${appPackage.version}-${sha256.slice(0, 12)}.tgz`;
    copyFileSync(tarball, join(out, file));
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    log(`${file}: ${(bytes.length / 2 ** 20).toFixed(1)} MiB in ${seconds} s`);
    return { name: program.name, version: appPackage.version, file, bytes: bytes.length, sha256 };
  } finally {
    rmSync(stage, { recursive: true, force: true });
  }
}

/**
 * Bundles the tab's Web Worker for browsers (an ES module worker; the `node:` imports that TF.js and
 * the HiGHS solver make only when they run in Node.js are left out) under a content-addressed name,
 * and copies the wasm binaries it fetches (TF.js's backend, the HiGHS solver) beside it into `<out>/tab`.
 */
async function buildTab(): Promise<TabManifest> {
  const started = performance.now();
  const directory = join(out, "tab");
  mkdirSync(directory, { recursive: true });
  const bundled = await build({
    entryPoints: [join(root, TAB_WORKER)],
    bundle: true,
    platform: "browser",
    format: "esm",
    target: "es2022",
    external: ["node:*"],
    define: { "process.env.NODE_ENV": '"production"' },
    minify: true,
    legalComments: "eof",
    write: false,
    outfile: "volunteer-worker.js",
    logLevel: "warning",
  });
  const code = bundled.outputFiles[0]?.contents;
  if (code === undefined) throw new Error("esbuild wrote no worker bundle");
  const entry = (file: string, bytes: Uint8Array): TabFileManifest => ({
    file,
    bytes: bytes.length,
    sha256: createHash("sha256").update(bytes).digest("hex"),
  });
  const worker = entry(
    `volunteer-worker-${createHash("sha256").update(code).digest("hex").slice(0, 12)}.js`,
    code,
  );
  writeFileSync(join(directory, worker.file), code);
  // Resolved from the worker, as its bundle resolves the packages that load them.
  const requireFromWorker = createRequire(join(root, TAB_WORKER));
  const wasm = TAB_WASM.map(([packageName, file]) => {
    const bytes = readFileSync(
      join(packageDirectory(requireFromWorker.resolve(packageName), packageName), file),
    );
    writeFileSync(join(directory, basename(file)), bytes);
    return entry(basename(file), bytes);
  });
  const kept = new Set([worker.file, ...wasm.map((f) => f.file)]);
  for (const file of readdirSync(directory)) if (!kept.has(file)) rmSync(join(directory, file));
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  log(`tab/${worker.file}: ${(code.length / 2 ** 20).toFixed(1)} MiB in ${seconds} s`);
  return { worker, wasm };
}

/**
 * Copies Dawn's WebGPU binding for every platform its `webgpu` package ships (one directory per
 * platform, `dawn.node` and on Windows the DLLs beside it) into `<out>/addons`, each file under a
 * content-addressed name. The peer bundle leaves `webgpu` out (21 MB per platform, 130 MB for all):
 * a peer that wants WebGPU fetches its own platform's files from the platform and checks them.
 */
function copyWebGpuAddons(): AddonManifest[] {
  const started = performance.now();
  const requireFromPeer = createRequire(join(root, "apps/peer/package.json"));
  const packageRoot = packageDirectory(requireFromPeer.resolve("webgpu"), "webgpu");
  const { version } = JSON.parse(readFileSync(join(packageRoot, "package.json"), "utf8")) as {
    version: string;
  };
  const directory = join(out, "addons");
  mkdirSync(directory, { recursive: true });
  const addons: AddonManifest[] = [];
  for (const platform of readdirSync(join(packageRoot, "dist")).sort()) {
    const platformDir = join(packageRoot, "dist", platform);
    const names = readdirSync(platformDir).filter((name) => /\.(node|dll)$/.test(name));
    if (!names.includes("dawn.node")) continue;
    const files = names.sort().map((name) => {
      const bytes = readFileSync(join(platformDir, name));
      const sha256 = createHash("sha256").update(bytes).digest("hex");
      const file = `webgpu-${version}-${platform}-${sha256.slice(0, 12)}-${name}`;
      if (!existsSync(join(directory, file))) copyFileSync(join(platformDir, name), join(directory, file));
      return { name, file, bytes: bytes.length, sha256 };
    });
    addons.push({ name: "webgpu", version, platform, files });
  }
  const kept = new Set(addons.flatMap((addon) => addon.files.map((f) => f.file)));
  for (const file of readdirSync(directory)) if (!kept.has(file)) rmSync(join(directory, file));
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  log(`webgpu ${version} add-ons for ${addons.map((a) => a.platform).join(", ")} in ${seconds} s`);
  return addons;
}

/** The installed package's root: the nearest directory above `entry` whose package.json is `name`'s. */
function packageDirectory(entry: string, name: string): string {
  for (let directory = dirname(entry); directory !== dirname(directory); directory = dirname(directory)) {
    const manifest = join(directory, "package.json");
    if (
      existsSync(manifest) &&
      (JSON.parse(readFileSync(manifest, "utf8")) as { name?: string }).name === name
    ) {
      return directory;
    }
  }
  throw new Error(`cannot find the package directory of ${name} above ${entry}`);
}

function readme(name: string): string {
  return `# ${name}\n\nBuilt and served by a Barnraise platform. Run the command its experiment page shows, e.g.\n\n    npx -y <platform>/api/v1/programs/<file> --server <platform> --token <token>\n\n\`${name} --help\` lists the options.\n`;
}

/** SHA-256 over every file the bundles are built from. */
function programInputsHash(): string {
  return hashInputs(root, [
    "package-lock.json",
    "scripts/build-programs.ts",
    ...programs.flatMap((p) => [`${p.app}/package.json`, `${p.app}/src`]),
    "apps/web/src/tab",
    "packages",
  ]);
}
