// Preloaded into a Node server the tests start (node --import): every listening socket binds to
// 127.0.0.1, whatever address the server asks for (the reference MCP server listens on all
// interfaces; test servers listen on loopback only).
import net from "node:net";

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "object" && args[0] !== null) {
    args[0] = { ...args[0], host: "127.0.0.1" };
  } else if (typeof args[0] === "number" || typeof args[0] === "string") {
    const rest = args.slice(1).filter((a) => typeof a === "function" || typeof a === "number");
    args = [args[0], "127.0.0.1", ...rest.filter((a) => typeof a === "function")];
  }
  return listen.apply(this, args);
};
