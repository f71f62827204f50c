import { describe, expect, it } from "vitest";
import {
  MAX_HOSTS_PER_SUBNET,
  MAX_SUBNETS,
  bridgeName,
  hostAddress,
  hostInterfaceName,
  randomLabName,
  switchPortName,
  validateHostName,
  validateLabName,
  validateSubnetName,
} from "../src/names.ts";

describe("names", () => {
  it("keeps every interface name within Linux's 15 characters, whatever the user names", () => {
    for (const name of [switchPortName(99_999, 253), bridgeName(MAX_SUBNETS - 1), hostInterfaceName(253)]) {
      expect(name.length).toBeLessThanOrEqual(15);
    }
  });

  it("numbers hosts within each subnet's /16", () => {
    expect(hostAddress(0, 1)).toBe("10.1.0.1");
    expect(hostAddress(1, 256)).toBe("10.2.1.0");
    expect(hostAddress(MAX_SUBNETS - 1, MAX_HOSTS_PER_SUBNET)).toBe("10.254.255.254");
    expect(() => hostAddress(0, 0)).toThrow(expect.objectContaining({ code: "INVALID_ARGUMENT" }));
    expect(() => hostAddress(0, MAX_HOSTS_PER_SUBNET + 1)).toThrow(
      expect.objectContaining({ code: "INVALID_ARGUMENT" }),
    );
    expect(() => hostAddress(MAX_SUBNETS, 1)).toThrow(expect.objectContaining({ code: "INVALID_ARGUMENT" }));
  });

  it("makes valid, distinct default lab names", () => {
    const names = new Set(Array.from({ length: 20 }, () => randomLabName()));
    for (const name of names)
      expect(() => {
        validateLabName(name);
      }).not.toThrow();
    expect(names.size).toBe(20);
  });

  it("accepts good names and explains bad ones", () => {
    expect(() => {
      validateHostName("peer12");
    }).not.toThrow();
    expect(() => {
      validateSubnetName("home-1");
    }).not.toThrow();
    expect(() => {
      validateLabName("Lab");
    }).toThrow(/lab name "Lab" is not valid/);
    expect(() => {
      validateLabName("a".repeat(13));
    }).toThrow(/1-12/);
    expect(() => {
      validateHostName("9peer");
    }).toThrow(/starting with a letter/);
    expect(() => {
      validateHostName("switch");
    }).toThrow(/reserved/);
    expect(() => {
      validateSubnetName("");
    }).toThrow(/subnet name/);
  });
});
