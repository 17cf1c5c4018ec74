// Preloaded into the MCP conformance suite (node --import): its client sends no credentials, and
// Wonder's /mcp takes the same API keys as the REST API. Every fetch to WONDER_MCP_URL's origin
// gets `Authorization: Bearer $WONDER_MCP_KEY`; nothing else changes.
const origin = new URL(process.env.WONDER_MCP_URL).origin;
const key = process.env.WONDER_MCP_KEY;
const original = globalThis.fetch;
globalThis.fetch = (input, init = {}) => {
  const url = new URL(typeof input === "string" || input instanceof URL ? input : input.url);
  if (url.origin !== origin) return original(input, init);
  const headers = new Headers(init.headers ?? (input instanceof Request ? input.headers : undefined));
  headers.set("Authorization", `Bearer ${key}`);
  return original(input, { ...init, headers });
};
