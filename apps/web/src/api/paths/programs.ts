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

const catalogSchema = z
  .object({
    protocolVersion: z.number().int().meta({ description: "The wire-format version the programs speak" }),
    programs: z.array(programSchema),
    installScript: z.url(),
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
      summary: "A program's npm tarball (self-contained: bundled JavaScript, no dependencies)",
      description:
        "By its content-addressed `file` (cached for good), or by the stable alias `barnraise-peer.tgz` / " +
        "`barnraise-aux.tgz` for the current build (`Cache-Control: no-cache`, ETag = its SHA-256).",
      requestParams: { path: z.object({ file: z.string().meta({ examples: ["barnraise-peer.tgz"] }) }) },
      responses: {
        "200": { description: "The tarball", content: { "application/gzip": binary } },
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
