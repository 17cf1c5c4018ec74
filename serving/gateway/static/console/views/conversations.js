// Conversations: a page at a time (ancestry filtered by the server), narrowed here by agent,
// status, user and kind (roots, children, forks); a new conversation with an agent.
import { api, query } from "../api.js";
import { badge, field, fill, h, select, table, when } from "../dom.js";

const STATUSES = ["", "active", "waiting", "failed", "completed"];
const KINDS = [["all", "All"], ["roots", "Started by a user"], ["children", "Started by an agent"], ["forks", "Forks"]];

export function kindOf(c) {
  if (c.forked_from_conversation_id) return "fork";
  if (c.started_by_conversation_id) return "child";
  return "root";
}

export async function render(main, { params }, { say }) {
  const [agents, sessions] = await Promise.all([
    api("GET", "/v1/agents").then((page) => page.items),
    api("GET", `/v1/sessions${query({ limit: 100 })}`).then((page) => page.items),
  ]);
  const agentName = Object.fromEntries(agents.map((a) => [a.id, a.name]));
  const state = {
    kind: params.get("kind") || "all",
    agent: params.get("agent") || "",
    status: params.get("status") || "",
    user: params.get("user") || "",
    items: [],
    next: null,
  };

  const kind = select(KINDS, state.kind, { name: "kind" });
  const agent = select([["", "Any agent"], ...agents.map((a) => [a.id, `${a.name} (${a.id})`])], state.agent, { name: "agent" });
  const status = select(STATUSES.map((s) => [s, s || "Any status"]), state.status, { name: "status" });
  const user = h("input", { type: "text", name: "user", value: state.user, placeholder: "user id" });
  const results = h("div", { id: "conversation-list" });
  const more = h("button", { type: "button", hidden: true, onclick: () => load(false) }, "Load more");

  const newAgent = select(agents.map((a) => [a.id, `${a.name} (${a.id})`]), undefined, { name: "new-agent" });
  const newTitle = h("input", { type: "text", name: "title", placeholder: "optional" });
  const create = h("form", { class: "inline", "aria-label": "New conversation", onsubmit: async (e) => {
    e.preventDefault();
    try {
      const conv = await api("POST", "/v1/conversations", { agent_id: newAgent.value || null, title: newTitle.value || null });
      location.hash = `#/conversations/${conv.id}`;
    } catch (err) { say(String(err.message), "error"); }
  } }, field("Agent", newAgent), field("Title", newTitle), h("button", { type: "submit" }, "New conversation"));

  function shown() {
    return state.items.filter((c) =>
      (!state.agent || c.agent_id === state.agent) &&
      (!state.status || c.status === state.status) &&
      (!state.user || (c.participants || []).some((p) => p.type === "user" && p.id === state.user)) &&
      (state.kind !== "forks" || kindOf(c) === "fork"));
  }

  function draw() {
    const rows = shown().map((c) => [
      h("a", { href: `#/conversations/${c.id}` }, c.title || c.id),
      c.agent_id ? agentName[c.agent_id] || c.agent_id : "—",
      badge(c.status),
      kindOf(c),
      when(c.created_at),
    ]);
    fill(results, table(`${rows.length} of ${state.items.length} loaded conversations`, ["Conversation", "Agent", "Status", "Kind", "Created"], rows));
    more.hidden = !state.next;
  }

  async function load(fresh) {
    const ancestry = state.kind === "roots" || state.kind === "children" ? state.kind : "all";
    const page = await api("GET", `/v1/conversations${query({ ancestry, limit: 100, after_cursor: fresh ? null : state.next })}`);
    state.items = fresh ? page.items : state.items.concat(page.items);
    state.next = page.next_cursor;
    draw();
  }

  const filters = h("form", { class: "filters", "aria-label": "Filter conversations", onsubmit: (e) => {
    e.preventDefault();
    Object.assign(state, { kind: kind.value, agent: agent.value, status: status.value, user: user.value.trim() });
    history.replaceState(null, "", `#/conversations${query({ kind: state.kind === "all" ? "" : state.kind, agent: state.agent, status: state.status, user: state.user })}`);
    load(true).catch((err) => say(String(err.message), "error"));
  } }, field("Kind", kind), field("Agent", agent), field("Status", status), field("User", user), h("button", { type: "submit" }, "Filter"));

  fill(main,
    h("h1", {}, "Conversations"),
    agents.length ? create : h("p", {}, "No agents yet: create one with POST /v1/agents."),
    filters,
    h("p", { class: "hint" }, "Agent, status and user narrow the pages loaded so far; load more to look further back."),
    results, more,
    h("section", { class: "panel", "aria-labelledby": "sessions-h" },
      h("h2", { id: "sessions-h" }, "Sessions"),
      table(`${sessions.length} session labels and the turn each is at`, ["Label", "Conversation", "Head turn", "Created"],
        sessions.map((x) => [x.label, h("a", { href: `#/conversations/${x.conversation_id}` }, x.conversation_id),
          x.head_turn_id ? h("a", { href: `#/conversations/${x.conversation_id}/turns/${x.head_turn_id}` }, x.head_turn_id) : "—",
          when(x.created_at)]))));
  await load(true);
}
