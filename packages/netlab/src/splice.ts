import type { Socket } from "node:net";

/** Joins two sockets both ways; an error on either side ends both. */
export function splice(a: Socket, b: Socket): void {
  a.pipe(b).pipe(a);
  a.on("error", () => b.destroy());
  b.on("error", () => a.destroy());
}
