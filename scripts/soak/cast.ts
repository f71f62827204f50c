import { join } from "node:path";
import { parseRecord } from "./log-records.ts";
import { PlatformClient } from "./platform-client.ts";
import { ManagedProcess, type Incarnation } from "./processes.ts";
import type { SoakEnvironment } from "./setup.ts";
import { StopWaiting, waitFor } from "./waits.ts";

/**
 * The demo's processes, started as scripts/demo.sh starts them: the platform (`npm run start -w
 * @barnraise/web`), one aux peer and N volunteer peers, each with its identity and data in the soak's
 * data directory, so a restart comes back as the same node.
 */

export const EXPERIMENT_ID = "demo";
export const VOLUNTEER = "demo-volunteer";

const PLATFORM_READY_MS = 120_000;
const AUX_REGISTERED_MS = 60_000;

export class Cast {
  readonly env: SoakEnvironment;
  readonly url: string;
  readonly client: PlatformClient;
  readonly platform: ManagedProcess;
  readonly aux: ManagedProcess;
  readonly peers: readonly ManagedProcess[];
  /** The token the peers join with now; a re-token replaces it. */
  peerToken: string;
  readonly #port: number;

  constructor(env: SoakEnvironment, port: number, peers: number) {
    this.env = env;
    this.#port = port;
    this.url = `http://localhost:${port}`;
    this.client = new PlatformClient(this.url, EXPERIMENT_ID);
    this.peerToken = env.peerToken;
    const spec = { cwd: env.root, logDir: env.logDir };
    const node = process.execPath;
    this.platform = new ManagedProcess({
      ...spec,
      name: "platform",
      role: "platform",
      command: "npm",
      args: ["run", "start", "--silent", "-w", "@barnraise/web"],
    });
    this.aux = new ManagedProcess({
      ...spec,
      name: "aux",
      role: "aux",
      command: node,
      args: [
        "apps/aux/src/cli.ts",
        ...["--server", this.url, "--listen", "/ip4/127.0.0.1/tcp/0"],
        ...["--identity", join(env.dataDir, "aux/identity.json")],
      ],
    });
    this.peers = Array.from({ length: peers }, (_, i) => {
      const dir = join(env.dataDir, `peer-${i + 1}`);
      return new ManagedProcess({
        ...spec,
        name: `peer-${i + 1}`,
        role: "peer",
        command: node,
        args: [
          "apps/peer/src/cli.ts",
          ...["--server", this.url, "--json", "--listen", "/ip4/127.0.0.1/tcp/0"],
          ...["--identity", join(dir, "identity.json"), "--data-dir", join(dir, "data")],
        ],
      });
    });
  }

  get processes(): ManagedProcess[] {
    return [this.platform, this.aux, ...this.peers];
  }

  /** Starts the platform and waits until /api/v1/health answers. */
  async startPlatform(signal: AbortSignal): Promise<Incarnation> {
    const incarnation = this.platform.start({ ...this.env.platformEnv, PORT: String(this.#port) });
    await waitFor(
      `the platform to answer ${this.url}/api/v1/health`,
      async () => {
        if (incarnation.exit !== null) {
          throw new StopWaiting(`the platform exited while starting (see ${incarnation.logFile})`);
        }
        return (await this.client.healthy()) ? true : undefined;
      },
      { timeoutMs: PLATFORM_READY_MS, signal },
    );
    return incarnation;
  }

  /** Starts the aux peer and waits until it has registered its address with the platform. */
  async startAux(signal: AbortSignal): Promise<Incarnation> {
    const incarnation = this.aux.start({ ...this.env.baseEnv, BARNRAISE_TOKEN: this.env.auxToken });
    await waitForRecord(incarnation, "registered address", AUX_REGISTERED_MS, signal);
    return incarnation;
  }

  startPeer(peer: ManagedProcess): Incarnation {
    return peer.start({ ...this.env.baseEnv, BARNRAISE_TOKEN: this.peerToken });
  }
}

/** Waits until the incarnation logs a record with message `msg`; rejects if it exits first. */
export async function waitForRecord(
  incarnation: Incarnation,
  msg: string,
  timeoutMs: number,
  signal: AbortSignal,
): Promise<void> {
  let checked = 0;
  await waitFor(
    `${incarnation.name} to log "${msg}" (${incarnation.logFile})`,
    () => {
      incarnation.tail.poll(Date.now());
      const { lines } = incarnation.tail;
      for (; checked < lines.length; checked++) {
        const line = lines[checked];
        if (line !== undefined && parseRecord(line.text)?.msg === msg) return true;
      }
      if (incarnation.exit !== null)
        throw new StopWaiting(`${incarnation.name} exited (${incarnation.logFile})`);
      return undefined;
    },
    { timeoutMs, signal },
  );
}
