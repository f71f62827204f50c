import { createDocument } from "zod-openapi";
import packageJson from "../../package.json" with { type: "json" };
import { accountPaths } from "./paths/accounts.ts";
import { alertPaths } from "./paths/alerts.ts";
import { datasetPaths } from "./paths/datasets.ts";
import { experimentPaths } from "./paths/experiments.ts";
import { modelPaths } from "./paths/models.ts";
import { peerPaths } from "./paths/peer.ts";
import { programPaths } from "./paths/programs.ts";
import { publicPaths } from "./paths/public.ts";

/** The OpenAPI 3.1 document of /api/v1, built from the same zod schemas the routes validate with. */
export function openApiDocument(): ReturnType<typeof createDocument> {
  return createDocument({
    openapi: "3.1.0",
    info: {
      title: "Barnraise platform API",
      version: packageJson.version,
      description:
        "The REST API of a Barnraise platform. Browser routes authenticate with the Auth.js session " +
        "cookie; the join route with a peer token; peer routes with a DeDLOC I.5 signed request in " +
        "`Authorization: Barnraise <token>`. Every error is `{ error: { code, message, issues? } }`.",
    },
    servers: [{ url: "/" }],
    paths: {
      ...publicPaths,
      ...accountPaths,
      ...experimentPaths,
      ...alertPaths,
      ...peerPaths,
      ...datasetPaths,
      ...modelPaths,
      ...programPaths,
    },
  });
}
