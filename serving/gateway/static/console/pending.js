// Work a turn has out while it runs, folded from the conversation's events: async operations (a
// tool running in the background, its result answered later in the turn) and delegations to
// other agents (a call that runs a turn of another agent, in a child conversation or, looped in,
// in this one). Pure: no DOM, no requests; the chat view draws what this folds.
//
// Events (docs/api.md, "Events"): operation.started / operation.delivered /
// operation.delivery_failed, agent_call.started / agent_call.completed, a `move` whose result
// closes a call (a cancelled turn), turn.completed / turn.failed.

/** An empty fold: item key -> item, in the order first seen. */
export function emptyPending() {
  return new Map();
}

function ended(item, status, event, extra = {}) {
  return { ...item, status, endedAt: event.at ?? null, ...extra };
}

function errorText(error) {
  if (!error) return null;
  if (typeof error === "string") return error;
  return error.code ? `${error.code}: ${error.message ?? ""}` : String(error.message ?? "");
}

function started(event, key, kind) {
  return {
    key,
    kind,
    turnId: event.turn_id,
    tool: event.tool ?? null,
    toolCallId: event.tool_call_id ?? null,
    operationId: event.operation_id ?? null,
    agentId: event.agent_id ?? null,
    mode: event.mode ?? null,
    background: kind !== "delegation" || Boolean(event.operation_id),
    since: event.at ?? null,
    status: "pending",
    endedAt: null,
    error: null,
    note: null,
    childConversationId: null,
  };
}

function finish(item, event) {
  const failed = event.success === false;
  return ended(item, failed ? "failed" : "done", event, {
    error: errorText(event.error),
    note: null,
    childConversationId: event.child_conversation_id ?? item.childConversationId,
  });
}

function withItem(items, key, change) {
  const item = items.get(key);
  if (!item) return items;
  const next = new Map(items);
  next.set(key, change(item));
  return next;
}

function settleTurn(items, event, status, reason) {
  let next = items;
  for (const [key, item] of items) {
    if (item.turnId !== event.turn_id || item.status !== "pending") continue;
    if (next === items) next = new Map(items);
    next.set(key, ended(item, status, event, { error: reason }));
  }
  return next;
}

function closedCall(items, event) {
  const move = event.move;
  const call = move?.tool_call;
  const result = move?.tool_result;
  if (!call || !result || result.success || !move.raw?.closed) return items;
  for (const [key, item] of items) {
    if (item.toolCallId === call.id && item.status === "pending") {
      return withItem(items, key, (it) => ended(it, "cancelled", event, { error: errorText(result.error) }));
    }
  }
  return items;
}

/** The items after `event`: a new Map when it changed one, `items` itself otherwise. */
export function foldPending(items, event) {
  switch (event?.type) {
    case "operation.started": {
      const kind = event.agent_id ? "delegation" : "operation";
      const key = `op:${event.operation_id}`;
      if (items.has(key)) return items;
      return new Map(items).set(key, started(event, key, kind));
    }
    case "operation.delivered":
      return withItem(items, `op:${event.operation_id}`, (item) => finish(item, event));
    case "operation.delivery_failed":
      return withItem(items, `op:${event.operation_id}`, (item) =>
        ({ ...item, note: `its result has not reached the conversation yet: ${errorText(event.error)}` }));
    case "agent_call.started": {
      const key = `call:${event.tool_call_id}`;
      if (items.has(key)) return items;
      return new Map(items).set(key, started(event, key, "delegation"));
    }
    case "agent_call.completed":
      return withItem(items, `call:${event.tool_call_id}`, (item) => finish(item, event));
    case "move":
      return closedCall(items, event);
    case "turn.completed":
      return settleTurn(items, event, "done", null);
    case "turn.failed":
      return settleTurn(items, event, "cancelled", event.reason ? `the turn failed: ${event.reason}` : "the turn failed");
    default:
      return items;
  }
}

/** Fold a list of events (oldest first). */
export function foldAll(events, items = emptyPending()) {
  return events.reduce(foldPending, items);
}

/** The items of one turn, in the order they started. */
export function itemsOfTurn(items, turnId) {
  return [...items.values()].filter((item) => item.turnId === turnId);
}

/** What an item is, in words: "report, running in the background" (once ended: "ran"),
 * "ask_expert: a delegation to agent_x (in the background)". */
export function describe(item) {
  const name = item.tool || "a tool";
  if (item.kind === "delegation") {
    const how = item.mode === "loop_in" ? "looped into this conversation" : "a delegation";
    const agent = item.agentId ? ` to ${item.agentId}` : "";
    const where = item.mode === "loop_in" ? `${name}: ${item.agentId ?? "an agent"} ${how}` : `${name}: ${how}${agent}`;
    return item.background ? `${where} (in the background)` : where;
  }
  return `${name}, ${item.status === "pending" ? "running" : "ran"} in the background`;
}

/** What more there is to say of its state: why it failed or was cancelled, or what holds a
 * pending one up; "" when nothing. */
export function detail(item) {
  return (item.status === "pending" ? item.note : item.error) || "";
}

/** The child conversation a pending delegation runs in, among `children` (the conversation's
 * child conversations): the target agent's, started by a message of the delegating turn
 * (`turnMessageIds`) when that is known, created once the delegation started, and not already
 * another item's (`claimed`). Null when none fits (not created yet, or a resumed session). */
export function matchChild(item, children, turnMessageIds = [], claimed = new Set()) {
  if (item.kind !== "delegation" || item.mode === "loop_in" || !item.agentId) return null;
  const since = item.since ? Date.parse(item.since) : NaN;
  const fits = children.filter((c) =>
    c.agent_id === item.agentId && !claimed.has(c.id)
    && (Number.isNaN(since) || Date.parse(c.created_at) >= since)
    && (!turnMessageIds.length || !c.started_by_message_id || turnMessageIds.includes(c.started_by_message_id)));
  fits.sort((a, b) => Date.parse(a.created_at) - Date.parse(b.created_at));
  return fits.length ? fits[0].id : null;
}
