import { describe, expect, it } from "vitest";
import { JoinExitCode, joinExitCode } from "../../src/node/cli-support.ts";
import { isPermanentRefusal } from "../../src/platform/join-experiment.ts";
import { JoinError, JoinErrorCode } from "../../src/platform/join-error.ts";

describe("a refused join as the node programs end", () => {
  it("gives each refusal a volunteer acts on its own exit code", () => {
    expect(joinExitCode(JoinErrorCode.TOKEN_REVOKED)).toBe(JoinExitCode.badToken);
    expect(joinExitCode(JoinErrorCode.BANNED)).toBe(JoinExitCode.banned);
    expect(joinExitCode(JoinErrorCode.TOO_MANY_NODES)).toBe(17);
    expect(joinExitCode(JoinErrorCode.NODE_RETIRED)).toBe(17);
    expect(joinExitCode(JoinErrorCode.SERVER_ERROR)).toBe(JoinExitCode.failure);
  });

  it("takes a retired machine, a full token and an ended session as final: a pass refresh cannot outlive them", () => {
    for (const code of [JoinErrorCode.NODE_RETIRED, JoinErrorCode.TOO_MANY_NODES, JoinErrorCode.SIGNED_OUT]) {
      expect(isPermanentRefusal(new JoinError(code, "refused"))).toBe(true);
    }
    expect(isPermanentRefusal(new JoinError(JoinErrorCode.SERVER_ERROR, "502"))).toBe(false);
  });
});
