import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { encodeMessage } from "../../src/rpc/codec.ts";
import {
  createStateSnapshot,
  deserializeTrainingState,
  serializeTrainingState,
  snapshotChunk,
} from "../../src/state/state-snapshot.ts";
import type { TrainingState } from "../../src/state/training-state.ts";
import { seededFloats } from "../support/seeded-random.ts";

/** A LAMB-like state: `size` parameters and two moment slots of the same size. */
function randomState(seed: number, size: number, epoch: number): TrainingState {
  return {
    epoch,
    parameters: seededFloats(seed, size),
    optimizer: {
      name: "lamb",
      step: epoch,
      slots: { v: seededFloats(seed + 2, size), m: seededFloats(seed + 1, size) },
    },
  };
}

function bytesOf(array: Float32Array): Uint8Array {
  return new Uint8Array(array.buffer, array.byteOffset, array.byteLength);
}

function sha(bytes: Uint8Array): Uint8Array {
  return Uint8Array.from(createHash("sha256").update(bytes).digest());
}

/** A blob with `header` as its CBOR header and `payload` after it. */
function craftBlob(header: unknown, payload = new Uint8Array()): Uint8Array {
  const head = encodeMessage(header);
  const blob = new Uint8Array(4 + head.length + payload.length);
  new DataView(blob.buffer).setUint32(0, head.length, true);
  blob.set(head, 4);
  blob.set(payload, 4 + head.length);
  return blob;
}

const goodHeader = {
  version: 1,
  epoch: 3,
  optimizer: { name: "lamb", step: 3 },
  parameters: 2,
  slots: [{ name: "m", length: 1 }],
};

describe("training state blob", () => {
  it("round-trips bit for bit, NaN payloads and -0 included", () => {
    const state = randomState(7, 1000, 11);
    state.parameters[0] = -0;
    new DataView(state.parameters.buffer).setUint32(4, 0x7fc12345, true); // a NaN with a payload
    const back = deserializeTrainingState(serializeTrainingState(state));
    expect(back.epoch).toBe(11);
    expect(back.optimizer.name).toBe("lamb");
    expect(back.optimizer.step).toBe(11);
    expect(bytesOf(back.parameters)).toEqual(bytesOf(state.parameters));
    expect(Object.keys(back.optimizer.slots).sort()).toEqual(["m", "v"]);
    for (const name of ["m", "v"]) {
      expect(bytesOf(back.optimizer.slots[name] ?? new Float32Array())).toEqual(
        bytesOf(state.optimizer.slots[name] ?? new Float32Array(1)),
      );
    }
  });

  it("carries the run's generation, sample counter and config version (format 2)", () => {
    const state = { ...randomState(8, 10, 6), generation: 3, samples: 6144, configVersion: 2 };
    const back = deserializeTrainingState(serializeTrainingState(state));
    expect(back).toMatchObject({ epoch: 6, generation: 3, samples: 6144, configVersion: 2 });
    const plain = deserializeTrainingState(serializeTrainingState(randomState(8, 10, 6)));
    expect(plain.generation).toBe(0);
    expect(plain.samples).toBe(0);
    expect(plain).not.toHaveProperty("configVersion");
  });

  it("still reads a format 1 blob, as generation 0 with no samples", () => {
    const parameters = new Float32Array([1.5, -2]);
    const m = new Float32Array([0.25]);
    const blob = craftBlob(goodHeader, new Uint8Array([...bytesOf(parameters), ...bytesOf(m)]));
    const state = deserializeTrainingState(blob);
    expect(state).toEqual({
      epoch: 3,
      parameters,
      optimizer: { name: "lamb", step: 3, slots: { m } },
      generation: 0,
      samples: 0,
    });
  });

  it("lays payloads out as parameters then slots sorted by name, whatever the insertion order", () => {
    const parameters = new Float32Array([1, 2]);
    const a = new Float32Array([3]);
    const b = new Float32Array([4, 5, 6]);
    const forward = serializeTrainingState({
      epoch: 1,
      parameters,
      optimizer: { name: "adam", step: 1, slots: { a, b } },
    });
    const backward = serializeTrainingState({
      epoch: 1,
      parameters,
      optimizer: { name: "adam", step: 1, slots: { b, a } },
    });
    expect(backward).toEqual(forward);
    const headerLength = new DataView(forward.buffer).getUint32(0, true);
    const payload = forward.subarray(4 + headerLength);
    expect(payload).toEqual(new Uint8Array([...bytesOf(parameters), ...bytesOf(a), ...bytesOf(b)]));
  });

  it("keeps a slot named __proto__ as a plain own slot", () => {
    const slots: Record<string, Float32Array> = {};
    Object.defineProperty(slots, "__proto__", { value: new Float32Array([9]), enumerable: true });
    const back = deserializeTrainingState(
      serializeTrainingState({
        epoch: 0,
        parameters: new Float32Array(1),
        optimizer: { name: "x", step: 0, slots },
      }),
    );
    expect(Object.getPrototypeOf(back.optimizer.slots)).toBe(Object.prototype);
    expect(Object.getOwnPropertyDescriptor(back.optimizer.slots, "__proto__")?.value).toEqual(
      new Float32Array([9]),
    );
  });

  it("refuses a state it cannot describe", () => {
    const base = randomState(1, 4, 0);
    const bad: TrainingState[] = [
      { ...base, epoch: -1 },
      { ...base, epoch: 1.5 },
      { ...base, optimizer: { ...base.optimizer, step: Number.NaN } },
      { ...base, optimizer: { ...base.optimizer, name: "" } },
      { ...base, optimizer: { ...base.optimizer, slots: { "": new Float32Array(1) } } },
      { ...base, generation: -1 },
      { ...base, generation: 0.5 },
      { ...base, samples: Number.POSITIVE_INFINITY },
      { ...base, configVersion: -2 },
    ];
    for (const state of bad) {
      expect(() => serializeTrainingState(state)).toThrow(
        expect.objectContaining({ code: "MALFORMED_MESSAGE" }),
      );
    }
  });

  it("refuses malformed blobs with MALFORMED_MESSAGE", () => {
    const good = craftBlob(goodHeader, new Uint8Array(12));
    expect(deserializeTrainingState(good).parameters).toHaveLength(2);
    const headerTooLong = good.slice();
    new DataView(headerTooLong.buffer).setUint32(0, good.length, true);
    const notCbor = good.slice();
    notCbor[4] = 0xff;
    const unsorted = {
      ...goodHeader,
      slots: [
        { name: "v", length: 0 },
        { name: "m", length: 1 },
      ],
    };
    const duplicate = {
      ...goodHeader,
      slots: [
        { name: "m", length: 0 },
        { name: "m", length: 1 },
      ],
    };
    const blobs: Array<[string, Uint8Array]> = [
      ["empty", new Uint8Array()],
      ["three bytes", new Uint8Array(3)],
      ["header length past the end", headerTooLong],
      ["header not CBOR", notCbor],
      ["payload one byte short", good.subarray(0, good.length - 1)],
      ["payload one byte long", craftBlob(goodHeader, new Uint8Array(13))],
      ["unknown version", craftBlob({ ...goodHeader, version: 3 }, new Uint8Array(12))],
      [
        "version 2 without a generation",
        craftBlob({ ...goodHeader, version: 2, samples: 0 }, new Uint8Array(12)),
      ],
      [
        "version 1 with a generation",
        craftBlob({ ...goodHeader, generation: 1, samples: 0 }, new Uint8Array(12)),
      ],
      [
        "negative samples",
        craftBlob({ ...goodHeader, version: 2, generation: 0, samples: -1 }, new Uint8Array(12)),
      ],
      ["extra header field", craftBlob({ ...goodHeader, extra: 1 }, new Uint8Array(12))],
      ["negative length", craftBlob({ ...goodHeader, parameters: -1 }, new Uint8Array(0))],
      ["unsorted slots", craftBlob(unsorted, new Uint8Array(12))],
      ["duplicate slots", craftBlob(duplicate, new Uint8Array(12))],
      ["header not a map", craftBlob([1, 2, 3])],
    ];
    for (const [what, blob] of blobs) {
      expect(() => deserializeTrainingState(blob), what).toThrow(
        expect.objectContaining({ name: "SwarmError", code: "MALFORMED_MESSAGE" }),
      );
    }
  });
});

describe("state snapshot", () => {
  it("hashes every chunk and the root over the chunk hashes", () => {
    const state = randomState(3, 1000, 2);
    const snapshot = createStateSnapshot(state, 1000);
    const blob = serializeTrainingState(state);
    expect(snapshot.blob).toEqual(blob);
    expect(snapshot.chunkHashes).toHaveLength(Math.ceil(blob.length / 1000));
    snapshot.chunkHashes.forEach((hash, i) => {
      expect(hash).toEqual(sha(blob.subarray(i * 1000, (i + 1) * 1000)));
      expect(snapshotChunk(snapshot, i)).toEqual(blob.subarray(i * 1000, (i + 1) * 1000));
    });
    expect(snapshotChunk(snapshot, snapshot.chunkHashes.length - 1).length).toBe(blob.length % 1000 || 1000);
    const concatenated = new Uint8Array(snapshot.chunkHashes.length * 32);
    snapshot.chunkHashes.forEach((hash, i) => {
      concatenated.set(hash, i * 32);
    });
    expect(snapshot.root).toEqual(sha(concatenated));
    expect(snapshot.generation).toBe(0);
    expect(createStateSnapshot({ ...state, generation: 2, samples: 9 }, 1000)).toMatchObject({
      generation: 2,
      samples: 9,
    });
  });

  it("is a copy: later steps on the live state do not change it", () => {
    const state = randomState(4, 100, 5);
    const snapshot = createStateSnapshot(state, 64);
    const before = snapshot.blob.slice();
    state.parameters.set(seededFloats(99, 100));
    state.optimizer.slots.m?.fill(1);
    expect(snapshot.blob).toEqual(before);
    expect(Object.isFrozen(snapshot)).toBe(true);
    expect(Object.isFrozen(snapshot.chunkHashes)).toBe(true);
  });

  it("grows the chunk size to stay within maxChunks", () => {
    const snapshot = createStateSnapshot(randomState(5, 1000, 0), 16, 10);
    expect(snapshot.chunkHashes.length).toBeLessThanOrEqual(10);
    expect(snapshot.chunkBytes).toBe(Math.ceil(snapshot.blob.length / 10));
    expect(() => createStateSnapshot(randomState(5, 10, 0), 0)).toThrow(
      expect.objectContaining({ code: "LENGTH_MISMATCH" }),
    );
  });
});
