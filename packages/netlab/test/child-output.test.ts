import { spawn } from "node:child_process";
import { describe, expect, it } from "vitest";
import { waitForExit, watchJsonLines } from "../src/index.ts";

function node(script: string): ReturnType<typeof spawn> {
  return spawn(process.execPath, ["-e", script], { stdio: ["ignore", "pipe", "pipe"] });
}

const isPhase =
  (phase: string) =>
  (value: unknown): value is { phase: string } =>
    typeof value === "object" && value !== null && (value as { phase?: unknown }).phase === phase;

describe("watchJsonLines", () => {
  it("finds lines already printed or still to come, and collects everything at exit", async () => {
    const child = node(`
      console.log(JSON.stringify({ phase: "ready" }));
      console.log("not json");
      setTimeout(() => { console.log(JSON.stringify({ phase: "done", n: 3 })); console.error("bye"); }, 50);
    `);
    const watch = watchJsonLines(child);
    await expect(watch.waitFor(isPhase("done"))).resolves.toEqual({ phase: "done", n: 3 });
    await expect(watch.waitFor(isPhase("ready"))).resolves.toEqual({ phase: "ready" });
    const outcome = await watch.exited;
    expect(outcome).toMatchObject({ code: 0, signal: null, otherLines: ["not json"], stderr: "bye\n" });
    expect(outcome.lines).toEqual([{ phase: "ready" }, { phase: "done", n: 3 }]);
  });

  it("rejects with the child's stderr when it exits before the line", async () => {
    const watch = watchJsonLines(node(`console.error("boom"); process.exit(3);`));
    await expect(watch.waitFor(isPhase("ready"))).rejects.toThrow(/exited \(code 3\).*boom/s);
  });

  it("rejects after the timeout", async () => {
    const child = node(`setTimeout(() => {}, 5000);`);
    const watch = watchJsonLines(child);
    await expect(watch.waitFor(isPhase("ready"), 100)).rejects.toThrow(/within 100 ms/);
    child.kill();
    expect(await waitForExit(child)).toEqual({ code: null, signal: "SIGTERM" });
  });
});
