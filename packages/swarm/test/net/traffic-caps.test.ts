import { describe, expect, it } from "vitest";
import { LinkMeter } from "../../src/net/link-meter.ts";
import { RateCap } from "../../src/rpc/traffic-caps.ts";
import { SwarmErrorCode } from "../../src/errors.ts";

/**
 * The volunteer's traffic caps without a network: what a cap refuses, that a wait at the cap can
 * be aborted, and that the link a capped peer offers never exceeds its caps. The rates a cap holds
 * are measured on real links in traffic-caps-netns.test.ts.
 */
describe("traffic caps", () => {
  it("refuses a cap that is not a positive rate", () => {
    for (const rate of [0, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => new RateCap(rate), String(rate)).toThrow(/positive/);
    }
  });

  it("lets a wait at the cap be aborted, and grants what fits at once", async () => {
    const cap = new RateCap(8_000);
    const stop = new AbortController();
    // 1 MB at 8 kB/s would take two minutes: the abort ends the wait.
    const waiting = cap.take(1_000_000, stop.signal);
    stop.abort();
    await expect(waiting).rejects.toMatchObject({ code: SwarmErrorCode.ABORTED });
    const already = new AbortController();
    already.abort();
    await expect(cap.take(10, already.signal)).rejects.toMatchObject({ code: SwarmErrorCode.ABORTED });
    await expect(cap.take(0)).resolves.toBeUndefined();
  });

  it("offers the load balancer no more than the caps, whatever was measured", () => {
    const meter = new LinkMeter({ cap: { uploadBytesPerSecond: 250_000 } });
    meter.probed({ uploadBytes: 4e6, uploadSeconds: 1, downloadBytes: 8e6, downloadSeconds: 1 });
    expect(meter.current()).toEqual({
      uploadBytesPerSecond: 250_000,
      downloadBytesPerSecond: 8e6,
      source: "probe",
    });
    const configured = new LinkMeter({
      configured: { uploadBytesPerSecond: 1e6, downloadBytesPerSecond: 1e6 },
      cap: { downloadBytesPerSecond: 125_000 },
    });
    expect(configured.current()).toEqual({
      uploadBytesPerSecond: 1e6,
      downloadBytesPerSecond: 125_000,
      source: "configured",
    });
  });
});
