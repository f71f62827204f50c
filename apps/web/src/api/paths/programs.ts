import { z } from "zod";
import type { ZodOpenApiPathsObject } from "zod-openapi";
import { errorResponses } from "../schemas/errors.ts";

/** The volunteer and aux programs the platform serves, and the install script for machines without Node.js. */

const programSchema = z
  .object({
    name: z.enum(["barnraise-peer", "barnraise-aux"]),
    version: z.string().meta({ examples: ["0.1.0"] }),
    file: z.string().meta({
      description: "The tarball's name; it carries the first 12 hex digits of its SHA-256",
      examples: ["barnraise-peer-0.1.0-2d80298be993.tgz"],
    }),
    url: z.url().meta({ description: "Run it with `npx -y <url> --server <platform> --token <token>`" }),
    bytes: z.number().int(),
    sha256: z.string().meta({ description: "Hex SHA-256 of the tarball" }),
  })
  .meta({ id: "Program" });

const addonSchema = z
  .object({
    name: z.literal("webgpu"),
    version: z.string().meta({ examples: ["0.6.2"] }),
    platform: z.string().meta({
      description: "`<os>-<arch>` as Node.js names them (`darwin-universal` for macOS)",
      examples: ["linux-x64"],
    }),
    files: z.array(
      z.object({
        name: z.string().meta({ description: "The name it is loaded by", examples: ["dawn.node"] }),
        file: z.string().meta({
          description: "The content-addressed name it is served by",
          examples: ["webgpu-0.6.2-linux-x64-0c9e8f1a2b3d-dawn.node"],
        }),
        url: z.url(),
        bytes: z.number().int(),
        sha256: z.string(),
      }),
    ),
  })
  .meta({
    id: "ProgramAddon",
    description: "A native add-on a peer fetches when it needs it: Dawn's WebGPU binding for one platform",
  });

const catalogSchema = z
  .object({
    protocolVersion: z.number().int().meta({ description: "The wire-format version the programs speak" }),
    programs: z.array(programSchema),
    installScript: z.url(),
    addons: z.array(addonSchema),
  })
  .meta({ id: "ProgramCatalog" });

const binary = { schema: z.string().meta({ format: "binary" }) };
const notBuilt = errorResponses("PROGRAMS_NOT_BUILT");

export const programPaths: ZodOpenApiPathsObject = {
  "/api/v1/programs": {
    get: {
      tags: ["programs"],
      summary: "The volunteer and aux programs this platform serves",
      responses: {
        "200": {
          description: "Each program's tarball",
          content: { "application/json": { schema: catalogSchema } },
        },
        ...notBuilt,
      },
    },
  },
  "/api/v1/programs/{file}": {
    get: {
      tags: ["programs"],
      summary:
        "A program's npm tarball (self-contained: bundled JavaScript, no dependencies), or an add-on's file",
      description:
        "By its content-addressed `file` (cached for good), or by the stable alias `barnraise-peer.tgz` / " +
        "`barnraise-aux.tgz` for the current build (`Cache-Control: no-cache`, ETag = its SHA-256). " +
        "A native add-on's file (see `addons` in the catalog) is served by its content-addressed name as " +
        "`application/octet-stream`.",
      requestParams: { path: z.object({ file: z.string().meta({ examples: ["barnraise-peer.tgz"] }) }) },
      responses: {
        "200": {
          description: "The tarball, or the add-on's file",
          content: { "application/gzip": binary, "application/octet-stream": binary },
        },
        "304": { description: "Not modified (`If-None-Match` matched)" },
        ...errorResponses("NOT_FOUND", "PROGRAMS_NOT_BUILT"),
      },
    },
  },
  "/api/v1/programs/install.sh": {
    get: {
      tags: ["programs"],
      summary: "A POSIX shell script that runs a program on a machine that may lack Node.js",
      description:
        "`curl -fsSL <platform>/api/v1/programs/install.sh | sh -s -- barnraise-peer --server <platform> " +
        "--token <token>`. It uses Node.js ≥ 22 from PATH or downloads the platform's Node.js release " +
        "from nodejs.org (SHA-256 checked), and runs the program only if it matches the published SHA-256.",
      responses: {
        "200": { description: "The script", content: { "text/x-shellscript": { schema: z.string() } } },
        ...notBuilt,
      },
    },
  },
};
