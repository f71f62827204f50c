import { randomBytes } from "node:crypto";
import {
  generateKeyPair,
  signRunControl,
  type KeyPair,
  type RunControl,
  type RunControlInit,
} from "@barnraise/protocol";
import { nodeCrypto } from "@barnraise/protocol/node";
import { afterEach, describe, expect, it } from "vitest";
import { controlMethod } from "../../src/control/control-messages.ts";
import { RunControlBoard } from "../../src/control/run-control-board.ts";
import type { RevocationList } from "../../src/p2p/swarm-node.ts";
import { AuthorityKeys } from "../../src/platform/authority-keys.ts";
import { at } from "../support/at.ts";
import { MemoryRpcNetwork, type MemoryRpc } from "../support/memory-rpc.ts";
import { eventually } from "../support/swarm-fixtures.ts";

const EXPERIMENT = "exp-control";

function control(authority: KeyPair, init: Partial<RunControlInit> = {}): string {
  return signRunControl(nodeCrypto, authority, {
    experimentId: EXPERIMENT,
    version: 1,
    issuedAt: 1_700_000_000_000,
    status: "running",
    generation: 0,
    rollback: null,
    revokedUsernames: [],
    revokedGrants: [],
    ...init,
  });
}

interface Member {
  readonly rpc: MemoryRpc;
  readonly board: RunControlBoard;
  readonly revocations: RevocationList[];
  readonly changes: RunControl[];
  /** Pushes this member received, by sender. */
  readonly received: string[];
}

const boards: RunControlBoard[] = [];
afterEach(() => {
  for (const board of boards.splice(0)) board.stop();
});

/** `size` members, each connected to all the others, with boards trusting `authority`. */
function swarm(authority: KeyPair, size: number): { network: MemoryRpcNetwork; members: Member[] } {
  const network = new MemoryRpcNetwork();
  const ids = Array.from({ length: size }, (_, i) => `p${i}`);
  const members = ids.map((id) => {
    const rpc = network.add(id);
    const revocations: RevocationList[] = [];
    const changes: RunControl[] = [];
    const received: string[] = [];
    // Count the pushes this member receives, then let the board handle them.
    const handle = rpc.handle.bind(rpc);
    rpc.handle = (method, handler) => {
      handle(method, async (incoming) => {
        if (method.name === controlMethod.name) received.push(incoming.from.peerId);
        await handler(incoming);
      });
    };
    const board = new RunControlBoard({
      rpc,
      experimentId: EXPERIMENT,
      authority: new AuthorityKeys({ experimentId: EXPERIMENT, publicKey: authority.publicKey }),
      peers: () => ids.filter((other) => other !== id),
      applyRevocations: (revoked) => revocations.push(revoked),
    });
    board.on("change", (adopted) => changes.push(adopted));
    board.start();
    boards.push(board);
    return { rpc, board, revocations, changes, received };
  });
  return { network, members };
}

describe("RunControlBoard", () => {
  it("adopts a newer control, applies its revocations, tells its listeners, and keeps it over older ones", () => {
    const authority = generateKeyPair();
    const { members } = swarm(authority, 1);
    const { board, revocations, changes } = at(members, 0);
    expect(board.current()).toBeNull();
    const second = control(authority, {
      version: 2,
      status: "paused",
      revokedUsernames: ["mallory"],
      revokedGrants: ["token-of-mallory"],
    });
    const offered = board.offer(second, "platform");
    expect(offered.adopted).toBe(true);
    expect(offered.current).toMatchObject({ version: 2, status: "paused", token: second });
    expect(board.current()?.version).toBe(2);
    expect(revocations).toEqual([{ usernames: ["mallory"], grants: ["token-of-mallory"] }]);
    expect(changes.map((change) => change.version)).toEqual([2]);

    // Older or equal versions change nothing.
    expect(board.offer(control(authority, { version: 1 }), "platform").adopted).toBe(false);
    expect(board.offer(second, "platform").adopted).toBe(false);
    expect(board.offer(control(authority, { version: 2, status: "running" })).adopted).toBe(false);
    expect(board.current()?.status).toBe("paused");
    expect(changes).toHaveLength(1);
    expect(revocations).toHaveLength(1);

    const third = board.offer(
      control(authority, { version: 3, generation: 1, rollback: rollbackTarget() }),
      "platform",
    );
    expect(third.adopted).toBe(true);
    expect(revocations.at(-1)).toEqual({ usernames: [], grants: [] });
    expect(changes.map((change) => [change.version, change.generation])).toEqual([
      [2, 0],
      [3, 1],
    ]);
  });

  it("refuses tokens it cannot verify, with the protocol's codes, and keeps the one it holds", () => {
    const authority = generateKeyPair();
    const { members } = swarm(authority, 1);
    const { board, changes } = at(members, 0);
    board.offer(control(authority, { version: 4 }), "platform");
    const stranger = generateKeyPair();
    expect(() => board.offer(control(stranger, { version: 9 }), "platform")).toThrow(
      expect.objectContaining({ code: "CONTROL_BAD_SIGNATURE" }),
    );
    const otherExperiment = signRunControl(nodeCrypto, authority, {
      experimentId: "exp-other",
      version: 9,
      issuedAt: 1,
      status: "paused",
      generation: 0,
      rollback: null,
      revokedUsernames: [],
      revokedGrants: [],
    });
    expect(() => board.offer(otherExperiment, "platform")).toThrow(
      expect.objectContaining({ code: "CONTROL_WRONG_EXPERIMENT" }),
    );
    expect(() => board.offer("not a token", "platform")).toThrow(
      expect.objectContaining({ name: "ProtocolError" }),
    );
    expect(board.current()?.version).toBe(4);
    expect(changes).toHaveLength(1);
  });

  it("spreads a newer control to every member once, never back to where it came from", async () => {
    const authority = generateKeyPair();
    const { members } = swarm(authority, 4);
    const [first, ...others] = members as [Member, ...Member[]];
    first.board.offer(control(authority, { version: 5, revokedUsernames: ["eve"] }), "platform");
    await eventually(
      () => members.every((member) => member.board.current()?.version === 5),
      "every member holds version 5",
    );
    for (const member of others) {
      expect(member.changes.map((change) => change.version)).toEqual([5]);
      expect(member.revocations).toEqual([{ usernames: ["eve"], grants: [] }]);
    }
    // Let the last pushes land: each member adopted once and passed it on once, not to its source.
    await eventually(
      () => members.reduce((sum, member) => sum + member.received.length, 0) === 3 + 3 * 2,
      "every adopted push was passed on",
    );
    expect(first.received).toEqual([]);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(members.reduce((sum, member) => sum + member.received.length, 0)).toBe(9);

    // An older control pushed into the swarm goes nowhere.
    const before = members.map((member) => member.received.length);
    const answer = await at(others, 2).board.push("p1", control(authority, { version: 3 }));
    expect(answer).toEqual({ adopted: false, version: 5 });
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(members.map((member) => member.received.length)).toEqual(
      before.map((n, i) => n + (i === 1 ? 1 : 0)),
    );
  });

  it("answers a pushed token it refuses with the refusal's code", async () => {
    const authority = generateKeyPair();
    const { members } = swarm(authority, 2);
    const [a, b] = members as [Member, Member];
    await expect(a.board.push("p1", control(generateKeyPair(), { version: 2 }))).rejects.toMatchObject({
      code: "REMOTE_ERROR",
      remoteCode: "CONTROL_BAD_SIGNATURE",
    });
    await expect(a.board.push("p1", "garbage")).rejects.toMatchObject({
      code: "REMOTE_ERROR",
      remoteCode: "MALFORMED",
    });
    expect(b.board.current()).toBeNull();

    // A sender whose frames do not add up to the length it announced.
    const { stream } = await a.rpc.call("p1", controlMethod, { bytes: 10 });
    await stream.write(new TextEncoder().encode("abc"));
    await stream.closeWrite();
    const answer = await stream.read();
    expect(answer).not.toBeNull();
    const { decodeMessage } = await import("../../src/rpc/codec.ts");
    const { controlResultSchema } = await import("../../src/control/control-messages.ts");
    expect(decodeMessage(answer ?? new Uint8Array(), controlResultSchema, "result")).toMatchObject({
      error: { code: "MALFORMED_MESSAGE" },
    });
    await expect(a.board.push("p1")).rejects.toMatchObject({ code: "NOT_RUNNING" });
  });

  it("carries a token far larger than a message head: 2,000 bans and 2,000 revoked grants", async () => {
    const authority = generateKeyPair();
    const { members } = swarm(authority, 2);
    const [a, b] = members as [Member, Member];
    const token = control(authority, {
      version: 7,
      revokedUsernames: Array.from({ length: 2000 }, (_, i) => `banned-user-number-${i}`),
      revokedGrants: Array.from({ length: 2000 }, () => randomBytes(18).toString("base64url")),
    });
    expect(token.length).toBeGreaterThan(128 << 10);
    expect(await a.board.push("p1", token)).toEqual({ adopted: true, version: 7 });
    expect(b.board.current()?.revokedUsernames).toHaveLength(2000);
    expect(b.revocations.at(-1)?.grants).toHaveLength(2000);
  });
});

function rollbackTarget() {
  return { checkpointId: "ckpt-1", step: 10, sha256: "a".repeat(64), sizeBytes: 1234 };
}
