import { elementCount, type ModelTensor } from "./model-tensors.ts";

/** The header of a safetensors file, and how many data bytes must follow it. */
export interface SafetensorsHeader {
  /** The 8-byte little-endian header length, then the JSON header padded with spaces to 8 bytes. */
  readonly bytes: Uint8Array;
  /** Bytes of tensor data the header describes: the float32 tensors back to back, little-endian. */
  readonly dataBytes: number;
}

/**
 * The header of a safetensors file (Hugging Face's format, readable by `safetensors` in Python,
 * Rust and other frameworks) for float32 `tensors` stored back to back in the given order, each
 * row-major and little-endian, with string `metadata` under `__metadata__`. The caller writes the
 * data after it. npm has no maintained safetensors package; the format is an 8-byte length and a
 * JSON object, so it is written here.
 */
export function safetensorsHeader(
  tensors: readonly ModelTensor[],
  metadata: Readonly<Record<string, string>> = {},
): SafetensorsHeader {
  const entries: Record<string, unknown> = {};
  if (Object.keys(metadata).length > 0) entries.__metadata__ = { ...metadata };
  let offset = 0;
  for (const { name, shape } of tensors) {
    if (name === "__metadata__" || Object.hasOwn(entries, name)) {
      throw new RangeError(`tensor name ${name} is reserved or used twice`);
    }
    const end = offset + elementCount(shape) * 4;
    entries[name] = { dtype: "F32", shape: [...shape], data_offsets: [offset, end] };
    offset = end;
  }
  const json = new TextEncoder().encode(JSON.stringify(entries));
  const padded = Math.ceil(json.length / 8) * 8;
  const bytes = new Uint8Array(8 + padded).fill(0x20, 8);
  new DataView(bytes.buffer).setBigUint64(0, BigInt(padded), true);
  bytes.set(json, 8);
  return { bytes, dataBytes: offset };
}
