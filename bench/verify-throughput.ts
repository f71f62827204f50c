/**
 * Signed-request verification throughput on one core (Node runs this on one thread).
 *
 *   npm run bench:verify            # or: node bench/verify-throughput.ts [requests]
 *
 * Prints verifications per second for raw Ed25519 (tweetnacl and node:crypto) and for the full
 * DeDLOC I.5 check of a signed request, with the ratio to the 5,000/s target. "Warm" is the
 * platform's steady state: each peer's pass is verified once and remembered. "Cold" checks both
 * signatures on every request (each request carries a pass never seen before).
 */
import {
  AccessPassVerifier,
  generateKeyPair,
  issueAccessPass,
  MemoryNonceStore,
  portableCrypto,
  ReplayGuard,
  RequestVerifier,
  signRequest,
  type CryptoProvider,
} from "../packages/protocol/src/index.ts";
import { nodeCrypto } from "../packages/protocol/src/node.ts";

const TARGET_PER_SECOND = 5000;
const requests = Number(process.argv[2] ?? 20_000);
const peers = 200;
const scope = "POST /api/v1/experiments/bench/metrics";
const body = new TextEncoder().encode(JSON.stringify({ step: 12, loss: 2.31, samplesPerSecond: 410.5 }));

function perSecond(count: number, run: () => void): number {
  const start = process.hrtime.bigint();
  run();
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  return count / seconds;
}

async function perSecondAsync(count: number, run: () => Promise<void>): Promise<number> {
  const start = process.hrtime.bigint();
  await run();
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  return count / seconds;
}

function rawVerify(crypto: CryptoProvider, count: number): number {
  const key = generateKeyPair();
  const message = new Uint8Array(600).fill(7);
  const signature = crypto.sign(message, key.secretKey);
  return perSecond(count, () => {
    for (let i = 0; i < count; i++) {
      if (!crypto.verify(message, signature, key.publicKey)) throw new Error("verification failed");
    }
  });
}

async function requestVerify(
  crypto: CryptoProvider,
  count: number,
  distinctPasses: boolean,
): Promise<number> {
  const now = Date.now();
  const authority = generateKeyPair();
  const recipient = generateKeyPair();
  const keys = Array.from({ length: distinctPasses ? count : peers }, () => generateKeyPair());
  const signers = keys.map((key, i) => ({
    key,
    pass: issueAccessPass(nodeCrypto, authority, {
      experimentId: "bench",
      username: `peer${i}`,
      role: "trainer",
      peerPublicKey: key.publicKey,
      grant: `token-${i}`,
      issuedAt: now,
      expiresAt: now + 3_600_000,
    }),
  }));
  const tokens = Array.from({ length: count }, (_, i) => {
    const signer = signers[i % signers.length];
    if (signer === undefined) throw new Error("no signers");
    return signRequest(nodeCrypto, signer.key, {
      pass: signer.pass,
      recipientPublicKey: recipient.publicKey,
      scope,
      body,
      time: now,
    });
  });
  const verifier = new RequestVerifier({
    crypto,
    passes: new AccessPassVerifier({
      crypto,
      authorityPublicKey: authority.publicKey,
      experimentId: "bench",
    }),
    recipientPublicKey: recipient.publicKey,
    replayGuard: new ReplayGuard({ store: new MemoryNonceStore(), maxSkewMs: 30_000 }),
  });
  return perSecondAsync(count, async () => {
    for (const token of tokens) await verifier.verify(token, { scope, body, now });
  });
}

const rows: [string, number][] = [
  ["ed25519 verify, tweetnacl", rawVerify(portableCrypto, 300)],
  ["ed25519 verify, node:crypto", rawVerify(nodeCrypto, requests)],
  ["signed request, node:crypto, warm pass cache", await requestVerify(nodeCrypto, requests, false)],
  [
    "signed request, node:crypto, cold (2 signatures each)",
    await requestVerify(nodeCrypto, requests / 2, true),
  ],
];

console.log(`Node ${process.version}, one core, ${requests} requests, ${peers} peers`);
console.log("what".padEnd(56), "verifications/s".padStart(16), "× target".padStart(10));
for (const [what, rate] of rows) {
  console.log(
    what.padEnd(56),
    rate.toFixed(0).padStart(16),
    (rate / TARGET_PER_SECOND).toFixed(2).padStart(10),
  );
}
