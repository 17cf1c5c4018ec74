// The API key and every call made with it. The key lives in this module (and in localStorage
// only when the user asks to be remembered); it travels in the Authorization header of fetch
// requests, never in a URL. The WebSocket, whose headers a browser cannot set, opens with a
// one-use stream ticket (POST /v1/stream-tickets).

const STORED = "wonder_key";
let key = localStorage.getItem(STORED) || "";

export function currentKey() { return key; }

export function setKey(value, remember) {
  key = value.trim();
  if (remember) localStorage.setItem(STORED, key);
  else localStorage.removeItem(STORED);
}

export function forgetKey() { key = ""; localStorage.removeItem(STORED); }

export class ApiError extends Error {
  constructor(status, error) {
    super(error && error.message ? `${error.code}: ${error.message}` : `HTTP ${status}`);
    this.status = status;
    this.code = error && error.code;
  }
}

/** api("GET", "/v1/agents") → the JSON body; an ApiError for a 4xx/5xx. */
export async function api(method, path, body) {
  if (!key) throw new ApiError(401, { code: "UNAUTHORIZED", message: "paste an API key first" });
  const res = await fetch(path, {
    method,
    headers: { Authorization: `Bearer ${key}`, ...(body ? { "Content-Type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const data = res.status === 204 ? null : await res.json().catch(() => null);
  if (!res.ok) throw new ApiError(res.status, data && data.error);
  return data;
}

/** A query string from an object, skipping empty values. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null || v === "") continue;
    for (const one of Array.isArray(v) ? v : [v]) q.append(k, String(one));
  }
  const s = q.toString();
  return s ? `?${s}` : "";
}

/** The stream URL of a conversation, from `afterSeq`, opened by a fresh one-use ticket. */
export async function streamUrl(conversationId, afterSeq) {
  const { ticket } = await api("POST", "/v1/stream-tickets", { conversation_id: conversationId });
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  return `${scheme}://${location.host}/v1/conversations/${encodeURIComponent(conversationId)}` +
    `/stream${query({ after_seq: afterSeq, ticket })}`;
}
