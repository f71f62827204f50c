import { SwarmError, SwarmErrorCode } from "../errors.ts";

/** One named tensor inside the flat parameter vector: elements [offset, offset + length). */
export interface TensorSlot {
  readonly name: string;
  readonly offset: number;
  readonly length: number;
}

/** A tensor's name and shape, as a framework reports it; `[]` is a scalar. */
export interface TensorShape {
  readonly name: string;
  readonly shape: readonly number[];
}

/**
 * Where each named tensor lives inside the one flat Float32Array that holds a model's parameters (and,
 * with the same layout, its gradients and optimizer moments). The engine needs it only where a rule is
 * per tensor, such as LAMB's trust ratio. Slots are in order, contiguous and cover [0, size) exactly, so
 * every peer that builds the layout from the same model agrees on it element for element.
 */
export class ParameterLayout {
  /** Total number of elements. */
  readonly size: number;
  /** The tensors in vector order. */
  readonly slots: readonly TensorSlot[];
  /** Length of the largest tensor, for scratch buffers that work one tensor at a time. */
  readonly largestSlot: number;

  /** Throws LENGTH_MISMATCH when the slots leave gaps, overlap or are out of order, MALFORMED_MESSAGE on bad names. */
  constructor(slots: readonly TensorSlot[]) {
    if (slots.length === 0) {
      throw new SwarmError(SwarmErrorCode.LENGTH_MISMATCH, "a parameter layout needs at least one tensor");
    }
    const names = new Set<string>();
    let next = 0;
    let largest = 0;
    for (const slot of slots) {
      if (slot.name === "") {
        throw new SwarmError(
          SwarmErrorCode.MALFORMED_MESSAGE,
          `tensor at offset ${slot.offset} has an empty name`,
        );
      }
      if (names.has(slot.name)) {
        throw new SwarmError(SwarmErrorCode.MALFORMED_MESSAGE, `tensor name "${slot.name}" appears twice`);
      }
      names.add(slot.name);
      if (!Number.isSafeInteger(slot.length) || slot.length < 0) {
        throw new SwarmError(
          SwarmErrorCode.LENGTH_MISMATCH,
          `tensor "${slot.name}" has length ${slot.length}; expected a non-negative integer`,
        );
      }
      if (slot.offset !== next) {
        throw new SwarmError(
          SwarmErrorCode.LENGTH_MISMATCH,
          `tensor "${slot.name}" starts at ${slot.offset}, expected ${next}: slots must be contiguous and in order`,
        );
      }
      next += slot.length;
      largest = Math.max(largest, slot.length);
    }
    this.slots = slots.map((slot) =>
      Object.freeze({ name: slot.name, offset: slot.offset, length: slot.length }),
    );
    Object.freeze(this.slots);
    this.size = next;
    this.largestSlot = largest;
  }

  /** Lays tensors out back to back in the given order; a tensor's length is the product of its shape. */
  static fromShapes(shapes: readonly TensorShape[]): ParameterLayout {
    let offset = 0;
    const slots = shapes.map(({ name, shape }) => {
      let length = 1;
      for (const dimension of shape) {
        if (!Number.isSafeInteger(dimension) || dimension < 0) {
          throw new SwarmError(
            SwarmErrorCode.LENGTH_MISMATCH,
            `tensor "${name}" has shape [${shape.join(", ")}]; dimensions must be non-negative integers`,
          );
        }
        length *= dimension;
      }
      const slot = { name, offset, length };
      offset += length;
      return slot;
    });
    return new ParameterLayout(slots);
  }

  /** Throws LENGTH_MISMATCH unless `vector` has exactly `size` elements; `what` names it in the message. */
  check(vector: ArrayLike<number>, what: string): void {
    if (vector.length !== this.size) {
      throw new SwarmError(
        SwarmErrorCode.LENGTH_MISMATCH,
        `${what} has ${vector.length} elements, the parameter layout has ${this.size}`,
      );
    }
  }
}
