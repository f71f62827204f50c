/**
 * The lab side of `NetLab.exposeOutside`, run as a script inside a lab namespace:
 * `node tcp-to-unix.ts <address> <port> <unix socket path>`. It listens on TCP address:port and pipes
 * each connection to the Unix socket, which a server outside the lab listens on (Unix sockets live in
 * the file system, which network namespaces share). Prints "listening" once ready.
 */
import { connect, createServer } from "node:net";
import { splice } from "./splice.ts";

const [address, port, path] = process.argv.slice(2);
if (address === undefined || port === undefined || path === undefined) {
  process.stderr.write("usage: tcp-to-unix.ts <address> <port> <unix socket path>\n");
  process.exit(2);
}
const server = createServer((incoming) => {
  splice(incoming, connect({ path }));
});
server.listen(Number(port), address, () => {
  process.stdout.write("listening\n");
});
process.on("SIGTERM", () => {
  server.close();
  process.exit(0);
});
