import { describe, expect, it } from "vitest";
import { DEFAULT_LINK_BYTES_PER_SECOND, isDefaultLink, LinkMeter } from "../../src/net/link-meter.ts";

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

  it("takes a probe that ends faster than the shortest sample as a lower bound, not as nothing", () => {
    const meter = new LinkMeter();
    // A megabyte each way on loopback within a few milliseconds: at least 100 MiB/s.
    meter.probed({ uploadBytes: MiB, uploadSeconds: 0.002, downloadBytes: MiB, downloadSeconds: 0 });
    expect(meter.current()).toEqual({
      uploadBytesPerSecond: MiB / 0.01,
      downloadBytesPerSecond: MiB / 0.01,
      source: "probe",
    });
    // A probe too small to say anything leaves the estimate as it was.
    meter.probed({ uploadBytes: 1024, uploadSeconds: 0.001, downloadBytes: 1024, downloadSeconds: 0.001 });
    expect(meter.current().uploadBytesPerSecond).toBe(MiB / 0.01);
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
    meter.observed({ bytesSent: 32 * MiB, bytesReceived: 32 * MiB, seconds: 1 });
    meter.observed({ bytesSent: 16 * MiB, bytesReceived: 16 * MiB, seconds: 1 });
    expect(meter.current().uploadBytesPerSecond).toBe(32 * MiB);
    meter.observed({ bytesSent: 16 * MiB, bytesReceived: 16 * MiB, seconds: 1 });
    expect(meter.current()).toEqual({
      uploadBytesPerSecond: 16 * MiB,
      downloadBytesPerSecond: 16 * MiB,
      source: "traffic",
    });
    // A few kilobytes in a microsecond would claim gigabytes per second.
    meter.observed({ bytesSent: 4096, bytesReceived: 4096, seconds: 0.000001 });
    meter.observed({ bytesSent: MiB, bytesReceived: MiB, seconds: 0 });
    meter.observed({ bytesSent: Number.NaN, bytesReceived: MiB, seconds: 1 });
    expect(meter.current().uploadBytesPerSecond).toBe(16 * MiB);
  });

  it("keeps the default after a short round: its time went to round trips and waiting, not the link", () => {
    const meter = new LinkMeter();
    // The netns lab's first round on 50 Mbit/s links: 300 KB in 2 s, 150 KB/s if taken for the link.
    meter.observed({ bytesSent: 300_000, bytesReceived: 300_000, seconds: 2 });
    meter.observed({ bytesSent: 300_000, bytesReceived: 300_000, seconds: 2 });
    expect(meter.current()).toEqual({
      uploadBytesPerSecond: DEFAULT_LINK_BYTES_PER_SECOND,
      downloadBytesPerSecond: DEFAULT_LINK_BYTES_PER_SECOND,
      source: "default",
    });
    // A short round faster than the default still raises it: the link is at least that.
    meter.observed({ bytesSent: 4 * DEFAULT_LINK_BYTES_PER_SECOND, bytesReceived: 0, seconds: 2 });
    expect(meter.current()).toEqual({
      uploadBytesPerSecond: 2 * DEFAULT_LINK_BYTES_PER_SECOND,
      downloadBytesPerSecond: 2 * DEFAULT_LINK_BYTES_PER_SECOND,
      source: "traffic",
    });
  });

  it("lets a round that would have taken a second or more at the estimate replace the default", () => {
    const meter = new LinkMeter();
    // 25 MB in 10 s: two seconds at the default, so the link is the likelier reason for the ten.
    meter.observed({ bytesSent: 25_000_000, bytesReceived: 25_000_000, seconds: 10 });
    expect(meter.current()).toEqual({
      uploadBytesPerSecond: 2_500_000,
      downloadBytesPerSecond: 2_500_000,
      source: "traffic",
    });
    // The estimate lowered, a smaller round now counts as long; the best in the window still holds.
    meter.observed({ bytesSent: 3_000_000, bytesReceived: 3_000_000, seconds: 2 });
    expect(meter.current().uploadBytesPerSecond).toBe(2_500_000);
  });

  it("lends a direction nothing measured the other's rate", () => {
    const meter = new LinkMeter();
    // An aux reduces: it receives far more than it sends.
    meter.observed({ bytesSent: 1000, bytesReceived: 20 * MiB, seconds: 10 });
    expect(meter.current()).toEqual({
      uploadBytesPerSecond: 2 * MiB,
      downloadBytesPerSecond: 2 * MiB,
      source: "traffic",
    });
  });

  it("tells the default link from a measured one by its rates", () => {
    const link = new LinkMeter().current();
    expect(isDefaultLink(link)).toBe(true);
    expect(isDefaultLink({ ...link, downloadBytesPerSecond: 1e6 })).toBe(false);
  });

  it("keeps a configured capacity whatever it observes", () => {
    const configured = { uploadBytesPerSecond: 1_000, downloadBytesPerSecond: 2_000 };
    const meter = new LinkMeter({ configured });
    meter.probed({ uploadBytes: MiB, uploadSeconds: 1, downloadBytes: MiB, downloadSeconds: 1 });
    meter.observed({ bytesSent: 8 * MiB, bytesReceived: 8 * MiB, seconds: 1 });
    expect(meter.current()).toEqual({ ...configured, source: "configured" });
  });
});
