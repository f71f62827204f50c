/**
 * A lab of hosts in network namespaces, joined by Linux bridges in a separate "switch" namespace.
 *
 * Each subnet is one bridge; there is no routing between bridges, so hosts on different subnets cannot
 * reach each other unless a host on both (a relay) carries the traffic itself. Each host interface is
 * a veth pair: the host end's egress is the host's upload, the switch end's egress its download, and
 * each can be shaped with tc (see tc-shaping.ts). Nothing is routed to or from the machine's own
 * network: the namespaces have no default route.
 */
import type { ChildProcess } from "node:child_process";
import { rm } from "node:fs/promises";
import { connect as connectTcp, createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { probeNetem } from "./availability.ts";
import { NetLabError } from "./errors.ts";
import { Host, type HostRuntime } from "./host.ts";
import {
  MAX_SUBNETS,
  SUBNET_PREFIX_LENGTH,
  bridgeName,
  hostAddress,
  hostInterfaceName,
  hostNamespace,
  randomLabName,
  subnetPrefix,
  switchNamespace,
  switchPortName,
  validateHostName,
  validateLabName,
  validateSubnetName,
} from "./names.ts";
import { listNamespaces, removeNamespaces } from "./namespace-admin.ts";
import { ip, tc } from "./run-command.ts";
import { splice } from "./splice.ts";
import { shapeOf, validateLink, type LinkOptions } from "./link-options.ts";
import { needsNetem, shapingCommands } from "./tc-shaping.ts";

/** Options for {@link NetLab.addHost}. */
export interface AddHostOptions extends LinkOptions {
  /** 1-20 lowercase letters or digits; unique in the lab. */
  name: string;
  /** The subnet to join (created on first use); default "lan". */
  subnet?: string;
}

/** Options for {@link NetLab.addRouter}: a host on several subnets, each link shaped alike. */
export interface AddRouterOptions extends LinkOptions {
  name: string;
  subnets: readonly string[];
}

/**
 * Options for {@link NetLab.addNatRouter}: a home router between an `inside` subnet (the home) and
 * an `outside` one (the internet side), masquerading the home's connections as its outside address.
 */
export interface AddNatRouterOptions extends LinkOptions {
  name: string;
  inside: string;
  outside: string;
  /**
   * A NAT that defeats hole punching: each connection gets a random outside port (endpoint-dependent
   * mapping), and unsolicited packets to the router are dropped rather than refused. Default false:
   * ports are kept where possible, and connections to closed ports are refused (TCP reset).
   */
  strict?: boolean;
}

interface SubnetRecord {
  index: number;
  bridge: string;
  nextHostNumber: number;
  ready: Promise<void>;
}

interface HostRecord {
  host: Host;
  index: number;
  addresses: Map<string, string>;
  nextInterface: number;
  link: LinkOptions;
  /** Whether the policy rule that sends the host's own packets to the delay lines is in place. */
  delayRule?: boolean;
  /** The host's interface on each subnet. */
  interfaces: Map<string, string>;
  /** How the host's link to each subnet was shaped, and the switch port at its other end. */
  links: Map<string, { link: LinkOptions; port: string; delayLine: boolean }>;
}

/** The delay line helper (see NetLab.#delayLine), and the routing table (and rule preference) it uses. */
const DELAY_LINE = fileURLToPath(new URL("../helpers/delay-line.py", import.meta.url));
const DELAY_TABLE = "100";
/** The lab side of {@link NetLab.exposeOutside}. */
const TCP_TO_UNIX = fileURLToPath(new URL("./tcp-to-unix.ts", import.meta.url));

/** Hosts in network namespaces behind bridges, with tc-shaped links. Always `destroy()` it. */
export class NetLab {
  /** The lab's name; every namespace it makes starts with it. */
  readonly name: string;
  /** The namespace holding the bridges (and the download-side qdiscs). */
  readonly switchNamespace: string;
  readonly #hosts = new Map<string, HostRecord>();
  readonly #subnets = new Map<string, SubnetRecord>();
  readonly #namespaces: string[] = [];
  readonly #children = new Set<ChildProcess>();
  readonly #pending = new Set<Promise<unknown>>();
  /** Servers outside the lab that exposeOutside made (closed on destroy), and their socket files. */
  readonly #outside = new Set<{ server: Server; path: string }>();
  readonly #runtime: HostRuntime;
  #nextHostIndex = 0;
  #netem: Promise<boolean> | undefined;
  #destroyed = false;
  #destroying: Promise<void> | undefined;

  private constructor(name: string) {
    this.name = name;
    this.switchNamespace = switchNamespace(name);
    this.#runtime = {
      assertAlive: (what) => {
        this.#assertAlive(what);
      },
      track: (child) => {
        this.#children.add(child);
        child.once("exit", () => this.#children.delete(child));
      },
    };
  }

  /** Creates an empty lab (its switch namespace). `name` prefixes every namespace; default "br…". */
  static async create(options: { name?: string } = {}): Promise<NetLab> {
    const name = options.name ?? randomLabName();
    validateLabName(name);
    const lab = new NetLab(name);
    try {
      await ip(["netns", "add", lab.switchNamespace]);
    } catch (error) {
      lab.#destroyed = true; // the namespace may belong to another lab: leave it alone
      throw new NetLabError(
        "COMMAND_FAILED",
        `cannot create namespace ${lab.switchNamespace} (a crashed run's leftover? NetLab.cleanupStale("${name}")): ${String(error)}`,
        { cause: error },
      );
    }
    lab.#namespaces.push(lab.switchNamespace);
    try {
      await ip(["-n", lab.switchNamespace, "link", "set", "lo", "up"]);
    } catch (error) {
      await lab.destroy().catch(() => undefined);
      throw error;
    }
    return lab;
  }

  /**
   * Removes every namespace whose name starts with `prefix` (ending its processes first), e.g. the
   * leftovers of a crashed run of a lab with that name. Returns the names removed. Labs of other runs
   * whose names share the prefix are removed too: pass a full lab name when others may be running.
   */
  static async cleanupStale(prefix: string): Promise<string[]> {
    if (!/^[a-z0-9][a-z0-9-]*$/.test(prefix)) {
      throw new NetLabError(
        "INVALID_ARGUMENT",
        `cleanupStale prefix ${JSON.stringify(prefix)} must be a lab name`,
      );
    }
    const stale = (await listNamespaces()).filter((ns) => ns.startsWith(prefix));
    await removeNamespaces(stale);
    return stale;
  }

  /** The hosts added so far, in order. */
  get hosts(): Host[] {
    return [...this.#hosts.values()].map((record) => record.host);
  }

  /** Adds a host on one subnet; see {@link LinkOptions} for shaping. */
  addHost(options: AddHostOptions): Promise<Host> {
    return this.#track(this.#addHost(options.name, [options.subnet ?? "lan"], options));
  }

  /**
   * Adds a host on several subnets, with one interface on each (a relay or bootstrap node that peers
   * on isolated subnets can all reach). It does not forward packets between them.
   */
  addRouter(options: AddRouterOptions): Promise<Host> {
    if (options.subnets.length === 0) {
      return Promise.reject(
        new NetLabError("INVALID_ARGUMENT", `router ${options.name} needs at least one subnet`),
      );
    }
    return this.#track(this.#addHost(options.name, options.subnets, options));
  }

  /**
   * Adds a NAT router (nftables masquerade, as a home router does): hosts on `inside` that use it as
   * their gateway ({@link NetLab.useGateway}) reach `outside` as the router's outside address, and
   * nothing on `outside` can open a connection to them. Its `address` is the outside one. Needs the
   * `nft` tool (Debian's nftables).
   */
  addNatRouter(options: AddNatRouterOptions): Promise<Host> {
    return this.#track(this.#addNatRouter(options));
  }

  async #addNatRouter(options: AddNatRouterOptions): Promise<Host> {
    if (options.inside === options.outside) {
      throw new NetLabError("INVALID_ARGUMENT", `router ${options.name} needs two different subnets`);
    }
    const router = await this.#addHost(options.name, [options.outside, options.inside], options);
    const record = this.#hosts.get(options.name);
    const inside = record?.interfaces.get(options.inside);
    const outside = record?.interfaces.get(options.outside);
    if (inside === undefined || outside === undefined) {
      throw new NetLabError("COMMAND_FAILED", `router ${options.name} lost its interfaces`);
    }
    await router.exec("sysctl", ["-q", "-w", "net.ipv4.ip_forward=1"]);
    const strict = options.strict === true;
    const ruleset = [
      "table ip barnraise_nat {",
      "  chain postrouting {",
      "    type nat hook postrouting priority srcnat; policy accept;",
      `    oifname "${outside}" masquerade${strict ? " random" : ""}`,
      "  }",
      "  chain forwarding {",
      "    type filter hook forward priority filter; policy drop;",
      "    ct state established,related accept",
      `    iifname "${inside}" oifname "${outside}" accept`,
      "  }",
      ...(strict
        ? [
            "  chain incoming {",
            "    type filter hook input priority filter; policy accept;",
            `    iifname "${outside}" ct state new drop`,
            "  }",
          ]
        : []),
      "}",
    ].join("\n");
    await router.exec("nft", ["-f", "-"], { input: `${ruleset}\n` });
    return router;
  }

  /**
   * Makes a TCP service of this machine (outside the lab: `target`, e.g. a test's HTTP server on
   * 127.0.0.1) reachable inside the lab at `host`'s address and `port`, as if it ran on `host`.
   * Connections cross the namespace boundary through a Unix socket, with a small forwarder on each
   * side. Resolves with "address:port" once the lab side listens. `address` puts the lab side on
   * another of the host's addresses, e.g. "127.0.0.1", so that a URL naming `localhost` works in
   * the lab as it does outside.
   */
  exposeOutside(
    host: Host,
    port: number,
    target: { host: string; port: number },
    options: { address?: string } = {},
  ): Promise<string> {
    return this.#track(this.#exposeOutside(host, port, target, options.address ?? host.address));
  }

  async #exposeOutside(
    host: Host,
    port: number,
    target: { host: string; port: number },
    address: string,
  ): Promise<string> {
    this.#assertAlive(`expose a service on ${host.name}`);
    const path = join(tmpdir(), `${this.name}-${host.name}-${address}-${port}.sock`);
    await rm(path, { force: true });
    const server = createServer((incoming) => {
      splice(incoming, connectTcp(target.port, target.host));
    });
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(path, () => {
        resolve();
      });
    });
    this.#outside.add({ server, path });
    const child = host.spawnNode(TCP_TO_UNIX, [address, String(port), path]);
    await new Promise<void>((resolve, reject) => {
      let output = "";
      child.stdout?.on("data", (chunk: Buffer) => {
        output += chunk.toString();
        if (output.includes("listening")) resolve();
      });
      child.stderr?.on("data", (chunk: Buffer) => {
        output += chunk.toString();
      });
      child.once("exit", (code) => {
        reject(
          new NetLabError(
            "COMMAND_FAILED",
            `the forwarder on ${host.name} exited (${code}): ${output.trim()}`,
          ),
        );
      });
    });
    return `${address}:${port}`;
  }

  /** Sends everything `host` addresses outside its own subnets through `gateway` (on a shared subnet). */
  useGateway(host: Host, gateway: Host): Promise<void> {
    const shared = [...host.addresses.keys()].find((subnet) => gateway.addresses.has(subnet));
    if (shared === undefined) {
      return Promise.reject(
        new NetLabError("INVALID_ARGUMENT", `${host.name} and ${gateway.name} share no subnet`),
      );
    }
    return this.#track(
      ip(["-n", host.namespace, "route", "replace", "default", "via", gateway.addressOn(shared)]).then(
        () => undefined,
      ),
    );
  }

  /**
   * Changes the rate of `host`'s link to `subnet` (its first subnet when omitted) while the lab runs,
   * e.g. a volunteer's link slowing down mid-run: the link's tbf is replaced in place, open
   * connections stay up, and the delay is kept. A direction left out keeps its rate.
   */
  setRate(
    host: Host,
    rate: Pick<LinkOptions, "uploadMbit" | "downloadMbit">,
    subnet?: string,
  ): Promise<void> {
    const record = this.#hosts.get(host.name);
    const name = subnet ?? [...host.addresses.keys()][0] ?? "";
    const attached = record?.links.get(name);
    if (record?.host !== host || attached === undefined) {
      return Promise.reject(
        new NetLabError(
          "INVALID_ARGUMENT",
          `host ${host.name} has no link to subnet "${name}" in lab ${this.name}`,
        ),
      );
    }
    const link: LinkOptions = { ...attached.link, ...rate };
    return this.#track(
      (async () => {
        validateLink(link, `host ${host.name}`);
        this.#assertAlive(`set the rate of ${host.name}`);
        const shaped: LinkOptions = attached.delayLine ? { ...link, delayMs: undefined } : link;
        const inner = record.interfaces.get(name) ?? "";
        for (const command of shapingCommands(inner, shapeOf(shaped, link.uploadMbit))) {
          await tc(["-n", host.namespace, ...command]);
        }
        for (const command of shapingCommands(attached.port, shapeOf(shaped, link.downloadMbit))) {
          await tc(["-n", this.switchNamespace, ...command]);
        }
        record.links.set(name, { ...attached, link });
      })(),
    );
  }

  /**
   * Gives `host` an interface on `subnet` and returns its address there. The link is shaped with
   * `link`, or like the host's first link when omitted (each interface is shaped on its own).
   */
  connect(host: Host, subnet: string, link?: LinkOptions): Promise<string> {
    const record = this.#hosts.get(host.name);
    if (record?.host !== host) {
      return Promise.reject(
        new NetLabError("INVALID_ARGUMENT", `host ${host.name} is not in lab ${this.name}`),
      );
    }
    return this.#track(this.#attach(record, subnet, link ?? record.link));
  }

  /**
   * Ends every process in the lab's namespaces and deletes them (with their veths and bridges). Safe
   * to call twice, and after a failed `addHost`; a failed destroy can be retried.
   */
  destroy(): Promise<void> {
    this.#destroyed = true;
    this.#destroying ??= this.#destroyOnce().catch((error: unknown) => {
      this.#destroying = undefined;
      throw error;
    });
    return this.#destroying;
  }

  async #destroyOnce(): Promise<void> {
    await Promise.allSettled([...this.#pending]);
    for (const child of this.#children) child.kill("SIGTERM");
    for (const { server, path } of this.#outside) {
      server.close();
      await rm(path, { force: true });
    }
    this.#outside.clear();
    await removeNamespaces([...this.#namespaces]);
  }

  #assertAlive(what: string): void {
    if (this.#destroyed) throw new NetLabError("DESTROYED", `cannot ${what}: lab ${this.name} was destroyed`);
  }

  #track<T>(operation: Promise<T>): Promise<T> {
    this.#pending.add(operation);
    const forget = (): void => void this.#pending.delete(operation);
    operation.then(forget, forget);
    return operation;
  }

  async #addHost(name: string, subnets: readonly string[], link: LinkOptions): Promise<Host> {
    this.#assertAlive(`add host ${name}`);
    validateHostName(name);
    subnets.forEach(validateSubnetName);
    validateLink(link, `host ${name}`);
    if (this.#hosts.has(name))
      throw new NetLabError("INVALID_ARGUMENT", `lab ${this.name} already has a host ${name}`);
    const namespace = hostNamespace(this.name, name);
    const addresses = new Map<string, string>();
    const [first] = subnets;
    const host = new Host({ name, namespace, subnet: first ?? "lan", addresses }, this.#runtime);
    const record: HostRecord = {
      host,
      index: this.#nextHostIndex++,
      addresses,
      nextInterface: 0,
      link,
      interfaces: new Map(),
      links: new Map(),
    };
    this.#hosts.set(name, record);
    try {
      await ip(["netns", "add", namespace]);
    } catch (error) {
      this.#hosts.delete(name);
      throw error;
    }
    this.#namespaces.push(namespace);
    try {
      await ip(["-n", namespace, "link", "set", "lo", "up"]);
      for (const subnet of subnets) await this.#attach(record, subnet, link);
    } catch (error) {
      // Take the half-made host out again, so the lab stays usable; destroy() retries if this fails.
      await removeNamespaces([namespace]).then(
        () => this.#namespaces.splice(this.#namespaces.indexOf(namespace), 1),
        () => undefined,
      );
      this.#hosts.delete(name);
      throw error;
    }
    return host;
  }

  async #attach(record: HostRecord, subnetName: string, link: LinkOptions): Promise<string> {
    this.#assertAlive(`connect ${record.host.name} to ${subnetName}`);
    validateSubnetName(subnetName);
    validateLink(link, `host ${record.host.name}`);
    if (record.addresses.has(subnetName)) {
      throw new NetLabError(
        "INVALID_ARGUMENT",
        `host ${record.host.name} is already on subnet "${subnetName}"`,
      );
    }
    // Without netem, a delay line (a helper process on a TUN device) delays the host's packets.
    const delayLine =
      needsNetem(shapeOf(link, undefined)) && !(await (this.#netem ??= probeNetem(this.switchNamespace)));
    const shaped: LinkOptions = delayLine ? { ...link, delayMs: undefined } : link;
    const subnet = this.#subnet(subnetName);
    const address = hostAddress(subnet.index, subnet.nextHostNumber++);
    const interfaceIndex = record.nextInterface++;
    const port = switchPortName(record.index, interfaceIndex);
    const inner = hostInterfaceName(interfaceIndex);
    const ns = record.host.namespace;
    await subnet.ready;
    await ip([
      "-n",
      this.switchNamespace,
      "link",
      "add",
      port,
      "type",
      "veth",
      "peer",
      "name",
      inner,
      "netns",
      ns,
    ]);
    await ip(["-n", this.switchNamespace, "link", "set", port, "master", subnet.bridge, "up"]);
    await ip(["-n", ns, "address", "add", `${address}/${SUBNET_PREFIX_LENGTH}`, "dev", inner]);
    await ip(["-n", ns, "link", "set", inner, "up"]);
    for (const command of shapingCommands(inner, shapeOf(shaped, link.uploadMbit))) {
      await tc(["-n", ns, ...command]);
    }
    for (const command of shapingCommands(port, shapeOf(shaped, link.downloadMbit))) {
      await tc(["-n", this.switchNamespace, ...command]);
    }
    if (delayLine) await this.#delayLine(record, interfaceIndex, subnet.index, address, link.delayMs ?? 0);
    record.addresses.set(subnetName, address);
    record.interfaces.set(subnetName, inner);
    record.links.set(subnetName, { link, port, delayLine });
    return address;
  }

  /**
   * Delays what the host sends to `subnet` by 2 × `delayMs` on kernels without netem: the host's
   * own packets to that subnet are routed into a TUN device held by helpers/delay-line.py, which
   * writes each back after the delay, and from there they leave through the shaped interface. Only
   * the sending side delays, twice as long as netem does per direction, so the round trip between
   * two hosts (or a host and an undelayed one) is what netem would give: 4 × 10 ms between two hosts
   * with `delayMs: 10`.
   */
  async #delayLine(
    record: HostRecord,
    interfaceIndex: number,
    subnetIndex: number,
    address: string,
    delayMs: number,
  ): Promise<void> {
    const { host } = record;
    const device = `dl${interfaceIndex}`;
    const child = host.spawn("python3", [DELAY_LINE, device, String(2 * delayMs)]);
    await new Promise<void>((resolve, reject) => {
      let stderr = "";
      const timer = setTimeout(() => {
        fail(new Error("it did not say ready within 10 s"));
      }, 10_000);
      const fail = (error: Error) => {
        clearTimeout(timer);
        child.kill("SIGKILL");
        reject(
          new NetLabError(
            "UNSUPPORTED",
            `delayMs needs netem or the delay line (python3 and /dev/net/tun), and the delay line failed on ${host.name}: ${error.message}${stderr === "" ? "" : `: ${stderr.trim()}`}`,
          ),
        );
      };
      child.stderr?.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
      child.stdout?.on("data", (chunk: Buffer) => {
        if (chunk.toString().includes("ready")) {
          clearTimeout(timer);
          resolve();
        }
      });
      child.once("error", fail);
      child.once("exit", (code) => {
        fail(new Error(`it exited with code ${String(code)}`));
      });
    });
    const ns = host.namespace;
    await ip(["-n", ns, "link", "set", device, "up"]);
    await host.exec("sysctl", [
      "-q",
      "-w",
      "net.ipv4.ip_forward=1",
      "net.ipv4.conf.all.rp_filter=0",
      `net.ipv4.conf.${device}.rp_filter=0`,
      `net.ipv4.conf.${device}.accept_local=1`,
    ]);
    if (!record.delayRule) {
      await ip(["-n", ns, "rule", "add", "iif", "lo", "lookup", DELAY_TABLE, "pref", DELAY_TABLE]);
      record.delayRule = true;
    }
    await ip([
      "-n",
      ns,
      "route",
      "add",
      subnetPrefix(subnetIndex),
      "dev",
      device,
      "src",
      address,
      "table",
      DELAY_TABLE,
    ]);
  }

  /** The subnet's record, creating its bridge on first use (concurrent callers share the creation). */
  #subnet(name: string): SubnetRecord {
    const known = this.#subnets.get(name);
    if (known !== undefined) return known;
    const index = this.#subnets.size;
    if (index >= MAX_SUBNETS)
      throw new NetLabError("INVALID_ARGUMENT", `a lab has at most ${MAX_SUBNETS} subnets`);
    const bridge = bridgeName(index);
    const ready = (async () => {
      await ip(["-n", this.switchNamespace, "link", "add", bridge, "type", "bridge", "stp_state", "0"]);
      await ip(["-n", this.switchNamespace, "link", "set", bridge, "up"]);
    })();
    ready.catch(() => undefined); // awaited by every attach; a failure surfaces there
    const record: SubnetRecord = { index, bridge, nextHostNumber: 1, ready };
    this.#subnets.set(name, record);
    return record;
  }
}
