import { expect } from "vitest";
import * as allowlistEntry from "../../app/api/v1/experiments/[id]/allowlist/[username]/route.ts";
import { POST as rollbackRoute } from "../../app/api/v1/experiments/[id]/rollback/route.ts";
import { POST as statusRoute } from "../../app/api/v1/experiments/[id]/status/route.ts";
import { DELETE as revokeRoute } from "../../app/api/v1/experiments/[id]/tokens/[tokenId]/route.ts";
import type { ExperimentView } from "../../src/server/services/read-experiment.ts";
import type { FixtureUser } from "./peer-fixtures.ts";
import { callRoute, sessionCookie } from "./test-app.ts";

/**
 * What an organizer does to a live run, through the real session routes: pause and resume, ban,
 * approve or remove a user, revoke a token, roll back. Each helper expects success.
 */
export interface OrganizerActions {
  setStatus(status: "running" | "paused"): Promise<ExperimentView>;
  setEntry(username: string, status: "approved" | "banned"): Promise<void>;
  removeEntry(username: string): Promise<void>;
  revokeToken(tokenId: string): Promise<void>;
  rollBack(checkpointId: string): Promise<ExperimentView>;
  /** The raw response of a rollback, for refusals. */
  rollBackResponse(checkpointId: string): Promise<Response>;
}

export async function organizerActions(
  organizer: FixtureUser,
  experimentId: string,
): Promise<OrganizerActions> {
  const cookie = await sessionCookie(organizer);
  const base = `/api/v1/experiments/${experimentId}`;
  const expectOk = async (response: Response, status = 200): Promise<unknown> => {
    const body = response.status === 204 ? null : ((await response.json()) as unknown);
    expect(response.status, JSON.stringify(body)).toBe(status);
    return body;
  };
  const rollBackResponse = (checkpointId: string) =>
    callRoute(rollbackRoute, `${base}/rollback`, {
      method: "POST",
      params: { id: experimentId },
      body: { checkpointId },
      cookie,
    });
  return {
    async setStatus(status) {
      const response = await callRoute(statusRoute, `${base}/status`, {
        method: "POST",
        params: { id: experimentId },
        body: { status },
        cookie,
      });
      return (await expectOk(response)) as ExperimentView;
    },
    async setEntry(username, status) {
      const response = await callRoute(allowlistEntry.PUT, `${base}/allowlist/${username}`, {
        method: "PUT",
        params: { id: experimentId, username },
        body: { status },
        cookie,
      });
      await expectOk(response);
    },
    async removeEntry(username) {
      const response = await callRoute(allowlistEntry.DELETE, `${base}/allowlist/${username}`, {
        method: "DELETE",
        params: { id: experimentId, username },
        cookie,
      });
      await expectOk(response, 204);
    },
    async revokeToken(tokenId) {
      const response = await callRoute(revokeRoute, `${base}/tokens/${tokenId}`, {
        method: "DELETE",
        params: { id: experimentId, tokenId },
        cookie,
      });
      await expectOk(response, 204);
    },
    async rollBack(checkpointId) {
      return (await expectOk(await rollBackResponse(checkpointId))) as ExperimentView;
    },
    rollBackResponse,
  };
}
