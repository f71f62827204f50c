/**
 * Two peers on separate subnets that can reach each other only through an aux peer acting as a
 * circuit relay (netlab: real network namespaces; needs root like CI, and fails, never skips, when
 * the machine cannot run a lab).
 *
 *   subnet a: peer A ── aux (router on a and b, relay) ── subnet b: peer B
 */
import { generateKeyPair, peerIdFromEd25519PublicKey, toBase64Url, type KeyPair } from "@barnraise/protocol";
import { NetLab, netlabAvailable, type Host } from "@barnraise/netlab";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeVector, on, PeerProcess, type PeerEvent } from "./support/peer-process.ts";
import { TestAuthority } from "./support/swarm-fixtures.ts";
import {
  maxAbsDifference,
  randomVector,
  seededRandom,
  testConfig,
  weightedMean,
} from "./support/swarm-harness.ts";

const EPOCH = 1;
const LENGTH = 20_000;
const script = {
  a: { seed: 11, weight: 3 },
  b: { seed: 22, weight: 5 },
  aux: { seed: 33, weight: 0 },
} as const;

const authority = new TestAuthority("exp-relay-netns");
let lab: NetLab | undefined;
const peers: PeerProcess[] = [];

function peerId(identity: KeyPair): string {
  return peerIdFromEd25519PublicKey(identity.publicKey).toString();
}

function startPeer(
  host: Host,
  identity: KeyPair,
  role: keyof typeof script,
  listen: string[],
  bootstrap: string[],
): PeerProcess {
  const { seed, weight } = script[role];
  const peer = PeerProcess.spawn(
    {
      secretKey: toBase64Url(identity.secretKey),
      pass: authority.pass(identity, { username: `relay-${role}`, role: role === "aux" ? "aux" : "trainer" }),
      authorityPublicKey: toBase64Url(authority.keyPair.publicKey),
      experimentId: authority.experimentId,
      mode: role === "aux" ? "aux" : "node",
      listen,
      bootstrap,
      listenViaRelays: role !== "aux",
      config: testConfig,
      script: { epochs: [{ epoch: EPOCH, vector: { seed, length: LENGTH }, weight }] },
    },
    (file, args, init) => host.spawnNode(file, args, init),
  );
  peers.push(peer);
  return peer;
}

/** Averages the script's vector for EPOCH; throws with the peer's reason if it fails. */
async function average(peer: PeerProcess): Promise<Extract<PeerEvent, { event: "averaged" }>> {
  const answer = await peer.command(`go ${EPOCH}`, on.answer("averaged", "go"), 25_000);
  if (answer.event !== "averaged") throw new Error(`averaging failed: ${JSON.stringify(answer)}`);
  return answer;
}

async function connectionsOf(
  peer: PeerProcess,
): Promise<Extract<PeerEvent, { event: "connections" }>["connections"]> {
  const answer = await peer.command("connections", on.answer("connections", "connections"));
  if (answer.event !== "connections") throw new Error(`connections failed: ${answer.message}`);
  return answer.connections;
}

describe("two peers on separate subnets, joined by an aux relay (netlab)", () => {
  let a: PeerProcess;
  let b: PeerProcess;
  let aux: PeerProcess;
  let auxOnA: string;
  let bDirect: string[];
  let ids: { a: string; b: string; aux: string };

  beforeAll(async () => {
    const available = await netlabAvailable();
    if (!available.ok) throw new Error(`netlab cannot run on this machine: ${available.reason}`);
    lab = await NetLab.create();
    const [router, hostA, hostB] = await Promise.all([
      lab.addRouter({ name: "relay", subnets: ["a", "b"] }),
      lab.addHost({ name: "a", subnet: "a" }),
      lab.addHost({ name: "b", subnet: "b" }),
    ]);
    // The aux gets the lowest PeerId, so it leads matchmaking and is surely in the group.
    const [auxKey, aKey, bKey] = [generateKeyPair(), generateKeyPair(), generateKeyPair()].sort((x, y) =>
      peerId(x) < peerId(y) ? -1 : 1,
    ) as [KeyPair, KeyPair, KeyPair];
    ids = { a: peerId(aKey), b: peerId(bKey), aux: peerId(auxKey) };

    const [onA, onB] = [router.addressOn("a"), router.addressOn("b")];
    aux = startPeer(router, auxKey, "aux", [`/ip4/${onA}/tcp/0`, `/ip4/${onB}/tcp/0`], []);
    const auxAddrs = (await aux.waitFor(on.ready)).addrs;
    auxOnA = auxAddrs.find((address) => address.startsWith(`/ip4/${onA}/`)) ?? "";
    const auxOnB = auxAddrs.find((address) => address.startsWith(`/ip4/${onB}/`)) ?? "";
    expect(auxOnA).not.toBe("");
    expect(auxOnB).not.toBe("");

    a = startPeer(hostA, aKey, "a", [`/ip4/${hostA.address}/tcp/0`], [auxOnA]);
    b = startPeer(hostB, bKey, "b", [`/ip4/${hostB.address}/tcp/0`], [auxOnB]);
    const [, readyB] = await Promise.all([a.waitFor(on.ready, 20_000), b.waitFor(on.ready, 20_000)]);
    bDirect = readyB.addrs.filter((address) => !address.includes("/p2p-circuit"));
    await aux.waitFor(on.members(2));
  }, 40_000);

  afterAll(async () => {
    await Promise.all(peers.splice(0).map((peer) => peer.stop("SIGKILL")));
    await lab?.destroy();
  });

  it("A cannot reach B directly, but reaches it (hello and all) through the relay", async () => {
    expect(bDirect.length).toBeGreaterThan(0);
    // A fresh dial of B's direct address fails, or (libp2p also tries the addresses it knows for
    // B, its relayed one among them) ends up relayed.
    for (const address of bDirect) {
      const direct = await a.command(`dial-fresh ${address}`, on.answer("dialed", "dial-fresh"));
      if (direct.event === "dialed") expect(direct.remoteAddr).toContain("/p2p-circuit");
      else expect(direct.event).toBe("failed");
    }
    // The relay's reservation for B, seen from subnet a. (A dials it explicitly: the aux's hello
    // answer may list B before B's reservation exists, so A need not have learned it.)
    const relayed = await a.command(
      `connect ${auxOnA}/p2p-circuit/p2p/${ids.b}`,
      on.answer("connected", "connect"),
    );
    expect(relayed).toMatchObject({ event: "connected", peer: ids.b });
    await Promise.all([a.waitFor(on.members(2)), b.waitFor(on.members(2))]);

    const toB = (await connectionsOf(a)).filter((connection) => connection.peer === ids.b);
    expect(toB.length).toBeGreaterThan(0);
    for (const connection of toB) expect(connection.remoteAddr).toContain("/p2p-circuit");
    const toA = (await connectionsOf(b)).filter((connection) => connection.peer === ids.a);
    for (const connection of toA) expect(connection.remoteAddr).toContain("/p2p-circuit");
  }, 20_000);

  it("A, B and the aux (weight 0) average to the weighted mean of A and B over the relay", async () => {
    const synced = await Promise.all(
      [a, b, aux].map((peer) => peer.command(`sync ${EPOCH} 2`, on.answer("synced", "sync"))),
    );
    for (const answer of synced) expect(answer).toMatchObject({ event: "synced", epoch: EPOCH });
    const [resultA, resultB, resultAux] = await Promise.all([average(a), average(b), average(aux)]);
    for (const result of [resultA, resultB, resultAux]) expect(result.groupSize).toBe(3);

    const vectors = [script.a, script.b].map(({ seed }) => randomVector(LENGTH, seededRandom(seed)));
    const expected = weightedMean(vectors, [script.a.weight, script.b.weight]);
    for (const result of [resultA, resultB]) {
      expect(result.totalWeight).toBe(script.a.weight + script.b.weight);
      expect(maxAbsDifference(decodeVector(result.vector), expected)).toBeLessThan(1e-6);
    }
    expect(resultA.checksum).toBe(resultB.checksum);
    expect(resultAux.bytesAggregated).toBeGreaterThan(0); // the aux reduced a part
    // Still no direct path: all of it went through the relay.
    for (const connection of (await connectionsOf(a)).filter((entry) => entry.peer === ids.b)) {
      expect(connection.remoteAddr).toContain("/p2p-circuit");
    }
  }, 40_000);
});
