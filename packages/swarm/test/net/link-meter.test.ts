import { describe, expect, it } from "vitest";
import { DEFAULT_LINK_BYTES_PER_SECOND, LinkMeter } from "../../src/net/link-meter.ts";

const MiB = 1 << 20;

describe("LinkMeter", () => {
  it("says the default until something is measured, and that it is the default", () => {
    expect(new LinkMeter().current()).toEqual({
      uploadBytesPerSecond: DEFAULT_LINK_BYTES_PER_SECOND,
      downloadBytesPerSecond: DEFAULT_LINK_BYTES_PER_SECOND,
      source: "default",
    });
  });

  it("takes a probe's rates, each direction on its own", () => {
    const meter = new LinkMeter();
    meter.probed({ uploadBytes: MiB, uploadSeconds: 4, downloadBytes: MiB, downloadSeconds: 1 });
    expect(meter.current()).toEqual({
      uploadBytesPerSecond: MiB / 4,
      downloadBytesPerSecond: MiB,
      source: "probe",
    });
  });

  it("lets a round's traffic raise the estimate but never lower it below the probe", () => {
    const meter = new LinkMeter();
    meter.probed({ uploadBytes: MiB, uploadSeconds: 1, downloadBytes: MiB, downloadSeconds: 1 });
    // A round held back by a slow member: a lower bound below the probe says nothing new.
    meter.observed({ bytesSent: MiB, bytesReceived: MiB, seconds: 10 });
    expect(meter.current()).toMatchObject({ uploadBytesPerSecond: MiB, source: "probe" });
    // A round faster than the probe (the probe's aux was the bottleneck): the link is at least that.
    meter.observed({ bytesSent: 4 * MiB, bytesReceived: MiB, seconds: 2 });
    expect(meter.current()).toEqual({
      uploadBytesPerSecond: 2 * MiB,
      downloadBytesPerSecond: MiB,
      source: "traffic",
    });
  });

  it("forgets rounds older than its window, and ignores samples too small to mean anything", () => {
    const meter = new LinkMeter({ windowRounds: 2 });
    meter.observed({ bytesSent: 8 * MiB, bytesReceived: 8 * MiB, seconds: 1 });
    meter.observed({ bytesSent: MiB, bytesReceived: MiB, seconds: 1 });
    expect(meter.current().uploadBytesPerSecond).toBe(8 * MiB);
    meter.observed({ bytesSent: MiB, bytesReceived: MiB, seconds: 1 });
    expect(meter.current()).toEqual({
      uploadBytesPerSecond: MiB,
      downloadBytesPerSecond: MiB,
      source: "traffic",
    });
    // A few kilobytes in a microsecond would claim gigabytes per second.
    meter.observed({ bytesSent: 4096, bytesReceived: 4096, seconds: 0.000001 });
    meter.observed({ bytesSent: MiB, bytesReceived: MiB, seconds: 0 });
    meter.observed({ bytesSent: Number.NaN, bytesReceived: MiB, seconds: 1 });
    expect(meter.current().uploadBytesPerSecond).toBe(MiB);
  });

  it("lends a direction nothing measured the other's rate", () => {
    const meter = new LinkMeter();
    // An aux reduces: it receives far more than it sends.
    meter.observed({ bytesSent: 1000, bytesReceived: 2 * MiB, seconds: 1 });
    expect(meter.current()).toEqual({
      uploadBytesPerSecond: 2 * MiB,
      downloadBytesPerSecond: 2 * MiB,
      source: "traffic",
    });
  });

  it("keeps a configured capacity whatever it observes", () => {
    const configured = { uploadBytesPerSecond: 1_000, downloadBytesPerSecond: 2_000 };
    const meter = new LinkMeter({ configured });
    meter.probed({ uploadBytes: MiB, uploadSeconds: 1, downloadBytes: MiB, downloadSeconds: 1 });
    meter.observed({ bytesSent: 8 * MiB, bytesReceived: 8 * MiB, seconds: 1 });
    expect(meter.current()).toEqual({ ...configured, source: "configured" });
  });
});
