/**
 * How a lab names its namespaces, interfaces and addresses. Interface names are built from indexes
 * (`h12i0`, `br3`, `eth1`), never from user input, so they always fit Linux's 15-character limit;
 * user names only appear in namespace names, which may be longer.
 */
import { randomBytes } from "node:crypto";
import { NetLabError } from "./errors.ts";

const LAB_NAME = /^[a-z][a-z0-9]{0,11}$/;
const HOST_NAME = /^[a-z][a-z0-9]{0,19}$/;
const SUBNET_NAME = /^[a-z0-9][a-z0-9_-]{0,31}$/i;
/** Host names that would clash with the lab's own namespaces. */
const RESERVED_HOST_NAMES = new Set(["switch"]);
/** Subnet i is 10.(i+1).0.0/16, so at most 254 subnets of 65,534 hosts each. */
export const MAX_SUBNETS = 254;
export const MAX_HOSTS_PER_SUBNET = 65_534;
export const SUBNET_PREFIX_LENGTH = 16;

/** A fresh default lab name: "br" and six random hex digits. */
export function randomLabName(): string {
  return `br${randomBytes(3).toString("hex")}`;
}

function requireMatch(value: string, pattern: RegExp, what: string, rule: string): void {
  if (!pattern.test(value)) {
    throw new NetLabError("INVALID_ARGUMENT", `${what} ${JSON.stringify(value)} is not valid: ${rule}`);
  }
}

/** Throws INVALID_ARGUMENT unless `name` can prefix a lab's namespaces. */
export function validateLabName(name: string): void {
  requireMatch(name, LAB_NAME, "lab name", "use 1-12 lowercase letters or digits, starting with a letter");
}

/** Throws INVALID_ARGUMENT unless `name` is a valid, non-reserved host name. */
export function validateHostName(name: string): void {
  requireMatch(name, HOST_NAME, "host name", "use 1-20 lowercase letters or digits, starting with a letter");
  if (RESERVED_HOST_NAMES.has(name)) {
    throw new NetLabError(
      "INVALID_ARGUMENT",
      `host name "${name}" is reserved for the lab's switch namespace`,
    );
  }
}

/** Throws INVALID_ARGUMENT unless `name` is a valid subnet name. */
export function validateSubnetName(name: string): void {
  requireMatch(name, SUBNET_NAME, "subnet name", "use 1-32 letters, digits, '-' or '_'");
}

/** The namespace holding the lab's bridges. */
export function switchNamespace(lab: string): string {
  return `${lab}-switch`;
}

/** The namespace of host `host` in lab `lab`. */
export function hostNamespace(lab: string, host: string): string {
  return `${lab}-${host}`;
}

/** The bridge of subnet number `subnetIndex`, inside the switch namespace. */
export function bridgeName(subnetIndex: number): string {
  return `br${subnetIndex}`;
}

/** The switch-side end of host number `hostIndex`'s `interfaceIndex`-th veth pair. */
export function switchPortName(hostIndex: number, interfaceIndex: number): string {
  return `h${hostIndex}i${interfaceIndex}`;
}

/** The host-side end of a host's `interfaceIndex`-th veth pair. */
export function hostInterfaceName(interfaceIndex: number): string {
  return `eth${interfaceIndex}`;
}

/** Subnet number `subnetIndex` (from 0) in CIDR notation, e.g. `10.1.0.0/16`. */
export function subnetPrefix(subnetIndex: number): string {
  return `10.${subnetIndex + 1}.0.0/${SUBNET_PREFIX_LENGTH}`;
}

/** The IPv4 address of the `hostNumber`-th host (from 1) on subnet number `subnetIndex` (from 0). */
export function hostAddress(subnetIndex: number, hostNumber: number): string {
  if (subnetIndex < 0 || subnetIndex >= MAX_SUBNETS) {
    throw new NetLabError("INVALID_ARGUMENT", `a lab has at most ${MAX_SUBNETS} subnets`);
  }
  if (hostNumber < 1 || hostNumber > MAX_HOSTS_PER_SUBNET) {
    throw new NetLabError("INVALID_ARGUMENT", `a subnet holds at most ${MAX_HOSTS_PER_SUBNET} hosts`);
  }
  return `10.${subnetIndex + 1}.${hostNumber >> 8}.${hostNumber & 255}`;
}
