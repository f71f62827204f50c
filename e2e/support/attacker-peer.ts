/**
 * An attacker's peer for the validator story: the volunteer's own `runPeer` (join, model, data,
 * swarm, training, run control, exit codes), except that every vector it contributes to an
 * averaging round is multiplied by `--scale` first, through the run's `wrapAverager` seam for
 * tests of the defences. Everything else, what it loads, how it joins and how it leaves when
 * banned, is what a volunteer's `barnraise-peer` does.
 *
 *   node e2e/support/attacker-peer.ts --server URL --scale=-1000 --identity FILE --data-dir DIR
 *        --batch-size N        (the token in BARNRAISE_TOKEN)
 *
 * JSON logs on stdout like the peer's, plus one `sending tampered contributions` record at the first
 * round; the exit code is the peer's for the same ending (12 when banned).
 */
import { parseArgs } from "node:util";
import * as tf from "@tensorflow/tfjs-core";
import { PeerExitCode, reportFailure } from "../../apps/peer/src/cli.ts";
import { runPeer } from "../../apps/peer/src/run-peer.ts";
import { createReporter } from "../../apps/peer/src/ui/create-reporter.ts";
import { peerToken } from "@barnraise/swarm";

const { values } = parseArgs({
  options: {
    server: { type: "string" },
    scale: { type: "string" },
    identity: { type: "string" },
    "data-dir": { type: "string" },
    "batch-size": { type: "string" },
    listen: { type: "string", default: "/ip4/127.0.0.1/tcp/0" },
  },
});
const token = process.env.BARNRAISE_TOKEN ?? "";
const scale = Number(values.scale);
const batchSize = Number(values["batch-size"]);
if (
  values.server === undefined ||
  values.identity === undefined ||
  values["data-dir"] === undefined ||
  token === "" ||
  !Number.isFinite(scale) ||
  !Number.isSafeInteger(batchSize) ||
  batchSize < 1
) {
  process.stderr.write(
    "usage: BARNRAISE_TOKEN=… node e2e/support/attacker-peer.ts --server URL --scale=FACTOR " +
      "--identity FILE --data-dir DIR --batch-size N\n",
  );
  process.exit(PeerExitCode.usage);
}

tf.enableProdMode();
const stop = new AbortController();
const abort = new AbortController();
process.once("SIGINT", () => {
  stop.abort();
  process.once("SIGINT", () => {
    abort.abort();
  });
});
const reporter = createReporter({ stdout: process.stdout, stderr: process.stderr, json: true });
let announced = false;
let code: number = PeerExitCode.ok;
try {
  await runPeer({
    server: new URL(values.server),
    credential: peerToken(token),
    identityPath: values.identity,
    dataDir: values["data-dir"],
    backend: "wasm",
    batchSize,
    mode: "node",
    listen: [values.listen],
    peers: [],
    reporter,
    stopSignal: stop.signal,
    abortSignal: abort.signal,
    wrapAverager: (port) => ({
      average: (epoch, vector, weight, signal, options) => {
        if (!announced) {
          announced = true;
          reporter.log("warn", "sending tampered contributions", { epoch, scale });
        }
        return port.average(
          epoch,
          vector.map((value) => value * scale),
          weight,
          signal,
          options,
        );
      },
    }),
  });
} catch (error) {
  code = reportFailure(reporter, error, { stopSignal: stop.signal, abortSignal: abort.signal });
} finally {
  reporter.close();
}
// libp2p and TF.js may keep handles open after the run; it is over either way.
process.exit(code);
