import { z } from "zod";
import type { ZodOpenApiPathsObject } from "zod-openapi";
import type { AppErrorCode } from "../error-codes.ts";
import {
  alertSettingsSchema,
  createAlertWebhookRequestSchema,
  createdAlertWebhookSchema,
  nodeAlertsSchema,
  sendTestAlertRequestSchema,
  setNodeAlertsRequestSchema,
  testAlertResultSchema,
  updateAlertSettingsRequestSchema,
} from "../schemas/alerts.ts";
import { errorResponses, mutationErrorCodes } from "../schemas/errors.ts";

const idParam = z.string().meta({ description: "The experiment's id", examples: ["demo"] });
const experimentParams = z.object({ id: idParam });
const webhookParams = z.object({
  id: idParam,
  webhookId: z.string().meta({ description: "A webhook's id" }),
});

const body = (schema: z.ZodType) => ({ required: true, content: { "application/json": { schema } } });
const ok = (description: string, schema: z.ZodType) => ({
  description,
  content: { "application/json": { schema } },
});
const mutationErrors = (...codes: AppErrorCode[]) => errorResponses(...mutationErrorCodes, ...codes);
const organizerOnly = "Who: the experiment's organizer (403 FORBIDDEN for anyone else).";

export const alertPaths: ZodOpenApiPathsObject = {
  "/api/v1/experiments/{id}/alerts": {
    get: {
      tags: ["alerts"],
      summary: "The run's alerts",
      description: `${organizerOnly} E-mail recipients and events, the thresholds, the webhooks (without their secrets) and the 50 newest deliveries. See docs/alerts.md.`,
      requestParams: { path: experimentParams },
      responses: {
        "200": ok("The alert settings and log", alertSettingsSchema),
        ...errorResponses("UNAUTHENTICATED", "FORBIDDEN", "NOT_FOUND"),
      },
    },
    put: {
      tags: ["alerts"],
      summary: "Set e-mail alerts and thresholds",
      description: `${organizerOnly} Fields left out keep their values. At most 20 recipients; thresholds 1 to 1440 minutes (defaults: stalled after 10, aux silent after 5). Without an SMTP server the settings are kept but no e-mail is sent.`,
      requestParams: { path: experimentParams },
      requestBody: body(updateAlertSettingsRequestSchema),
      responses: {
        "200": ok("The alert settings and log", alertSettingsSchema),
        ...mutationErrors("FORBIDDEN", "NOT_FOUND"),
      },
    },
  },
  "/api/v1/experiments/{id}/alerts/webhooks": {
    post: {
      tags: ["alerts"],
      summary: "Add a webhook",
      description: `${organizerOnly} An http(s) URL without credentials and the events it receives. The answer holds the signing secret, never shown again. At most 10 webhooks (CONFLICT).`,
      requestParams: { path: experimentParams },
      requestBody: body(createAlertWebhookRequestSchema),
      responses: {
        "201": ok("The webhook and its secret", createdAlertWebhookSchema),
        ...mutationErrors("FORBIDDEN", "NOT_FOUND", "CONFLICT"),
      },
    },
  },
  "/api/v1/experiments/{id}/alerts/webhooks/{webhookId}": {
    delete: {
      tags: ["alerts"],
      summary: "Remove a webhook",
      description: `${organizerOnly} Its queued deliveries and their log go with it.`,
      requestParams: { path: webhookParams },
      responses: {
        "204": { description: "Done; no body" },
        ...errorResponses("UNAUTHENTICATED", "CROSS_SITE_REQUEST", "FORBIDDEN", "NOT_FOUND"),
      },
    },
  },
  "/api/v1/experiments/{id}/alerts/test": {
    post: {
      tags: ["alerts"],
      summary: "Send a test alert now",
      description: `${organizerOnly} \`{ webhookId }\` or \`{ email: true }\` (every recipient): a \`test\` event, queued and attempted at once; the answer shows the attempt. CONFLICT for e-mail without an SMTP server or recipients.`,
      requestParams: { path: experimentParams },
      requestBody: body(sendTestAlertRequestSchema),
      responses: {
        "200": ok("The deliveries after their first attempt", testAlertResultSchema),
        ...mutationErrors("FORBIDDEN", "NOT_FOUND", "CONFLICT"),
      },
    },
  },
  "/api/v1/me/alerts": {
    get: {
      tags: ["nodes"],
      summary: "The signed-in user's node e-mails",
      description:
        "Where the user is e-mailed when one of their nodes stops counting (null: nowhere). Who: a signed-in user.",
      responses: {
        "200": ok("The setting", nodeAlertsSchema),
        ...errorResponses("UNAUTHENTICATED"),
      },
    },
    put: {
      tags: ["nodes"],
      summary: "E-mail me when one of my nodes stops counting",
      description:
        "`{ email }` turns the e-mails on, to that address; `{ email: null }` off. Who: a signed-in user.",
      requestBody: body(setNodeAlertsRequestSchema),
      responses: {
        "200": ok("The setting", nodeAlertsSchema),
        ...mutationErrors(),
      },
    },
  },
};
