// One conversation: where it sits in the tree (its parent, children, forks and the threads of
// its turns) and the live chat, tokens streaming, parallel turns side by side, and under each
// turn the work it has out (async operations, delegations) until it ends.
import { api, query } from "../api.js";
import { badge, fill, h, when } from "../dom.js";
import { describe, detail, foldAll, foldPending, itemsOfTurn, matchChild } from "../pending.js";
import { ConversationStream } from "../stream.js";
import { approvalsPanel } from "./approvals.js";

const RECENT_EVENTS = 500; // the events folded on load: the recent turns' work still out
const CHILD_LOOKUPS = 6; // tries to find a running delegation's child conversation (1 s apart)

function short(text, n = 60) {
  const s = String(text || "").replace(/\s+/g, " ");
  return s.length > n ? `${s.slice(0, n - 1)}…` : s;
}

/** Turns nested by parent_turn_id: each thread continues under the turn it replies to. */
export function threadTree(turns) {
  const byParent = new Map();
  const ids = new Set(turns.map((t) => t.id));
  for (const t of turns) {
    const parent = t.parent_turn_id && ids.has(t.parent_turn_id) ? t.parent_turn_id : null;
    if (!byParent.has(parent)) byParent.set(parent, []);
    byParent.get(parent).push(t);
  }
  return byParent;
}

function turnList(conversationId, turns) {
  const byParent = threadTree(turns);
  const branch = (parent) => {
    const kids = byParent.get(parent) || [];
    if (!kids.length) return null;
    // A straight line of replies stays flat; a turn with several continuations opens sub-lists.
    return h("ol", { class: "threads" }, kids.map((t) => h("li", {},
      h("a", { href: `#/conversations/${conversationId}/turns/${t.id}` }, short(t.input, 50) || t.id),
      " ", badge(t.status), t.inherited_from ? h("span", { class: "hint" }, " inherited") : null,
      branch(t.id))));
  };
  return branch(null) || h("p", { class: "empty" }, "No turns yet.");
}

function convLink(id, label) {
  return h("a", { href: `#/conversations/${id}` }, label || id);
}

function clock(iso) {
  const d = iso ? new Date(iso) : null;
  return d && !Number.isNaN(d.getTime()) ? d.toLocaleTimeString() : "?";
}

/** One item of a turn's work: what it is, since when, how it ended, its child conversation. */
function workItem(item, child) {
  const said = detail(item);
  return h("li", { class: "work-item", dataset: { key: item.key, kind: item.kind, status: item.status } },
    badge(item.status), " ", h("span", { class: "what" }, describe(item)),
    h("span", { class: "hint" }, item.status === "pending"
      ? ` · since ${clock(item.since)}` : ` · ${clock(item.since)} to ${clock(item.endedAt)}`),
    said ? h("span", { class: "detail" }, ` · ${said}`) : null,
    child ? [" · ", h("a", { class: "child-link", href: `#/conversations/${child}` }, `Open the child conversation ${child}`)] : null);
}

/** The conversation's child conversations, oldest first (up to ten pages of 100). */
async function childConversations(path) {
  const found = [];
  let cursor;
  for (let page = 0; page < 10; page++) {
    const got = await api("GET", `${path}/children${query({ limit: 100, after_cursor: cursor })}`);
    found.push(...got.items);
    cursor = got.next_cursor;
    if (!cursor) break;
  }
  return found;
}

export async function render(main, { conversationId }, { say }) {
  const path = `/v1/conversations/${encodeURIComponent(conversationId)}`;
  const [conv, children, forks, turns, tail] = await Promise.all([
    api("GET", path),
    api("GET", `${path}/children${query({ limit: 100 })}`),
    api("GET", `${path}/forks${query({ limit: 100 })}`),
    api("GET", `${path}/turns`),
    api("GET", `${path}/events${query({ tail: "true", limit: RECENT_EVENTS })}`),
  ]);
  const messages = await api("GET", `${path}/messages${query({ tail: "true", limit: 100 })}`);

  // --- the tree -------------------------------------------------------------------------
  const threads = h("div", { id: "threads" }, turnList(conv.id, turns.items));
  const refreshThreads = async () => {
    try { fill(threads, turnList(conv.id, (await api("GET", `${path}/turns`)).items)); } catch (e) { say(e.message, "error"); }
  };
  const parent = conv.forked_from_conversation_id
    ? h("p", {}, "Forked from ", convLink(conv.forked_from_conversation_id), " at turn ",
      h("a", { href: `#/conversations/${conv.forked_from_conversation_id}/turns/${conv.forked_at_turn_id}` }, conv.forked_at_turn_id),
      " · ", h("a", { href: `#/conversations/${conv.id}/compare`, id: "compare-link" }, "Compare with the original, turn by turn"))
    : conv.started_by_conversation_id
      ? h("p", {}, "Started by ", convLink(conv.started_by_conversation_id), " (a delegation)")
      : null;
  const list = (items, none) => items.length
    ? h("ul", {}, items.map((c) => h("li", {}, convLink(c.id, c.title || c.id), " ", badge(c.status),
      h("span", { class: "hint" }, ` ${c.id}${c.forked_at_turn_id ? ` at ${c.forked_at_turn_id}` : ""} · ${when(c.created_at)}`))))
    : h("p", { class: "empty" }, none);

  const tree = h("section", { class: "panel tree", "aria-labelledby": "tree-h" },
    h("h2", { id: "tree-h" }, "Tree"),
    parent,
    h("h3", {}, "Threads"), threads,
    h("h3", {}, "Children"), list(children.items, "No child conversations."),
    h("h3", {}, "Forks"), list(forks.items, "No forks."));

  // --- actions --------------------------------------------------------------------------
  const actions = h("div", { class: "actions" },
    h("button", { type: "button", disabled: conv.status === "completed", onclick: async () => {
      try { await api("POST", `${path}/complete`); say("Conversation completed."); location.reload(); } catch (e) { say(e.message, "error"); }
    } }, "Complete"),
    h("button", { type: "button", class: "danger", onclick: async () => {
      if (!confirm(`Delete ${conv.id} and every child it started?`)) return;
      try { await api("DELETE", path); say("Deleted."); location.hash = "#/conversations"; } catch (e) { say(e.message, "error"); }
    } }, "Delete"),
    h("a", { href: `#/conversations/${conv.id}/members`, class: "button-link" }, "Members"));

  // --- the chat -------------------------------------------------------------------------
  const log = h("div", { id: "chat-log", class: "log", role: "log", "aria-label": "Messages", tabindex: "0" });
  const inflight = h("div", { class: "inflight", "aria-label": "Turns streaming now" });
  const streamState = h("p", { id: "stream-state", class: "stream-state", role: "status" }, "Connecting…");
  const seen = new Set();
  const bubbles = new Map(); // turn id -> the reply streaming into it
  const approvals = approvalsPanel(conv.id, { say });
  const turnMessages = new Map(); // turn id -> its messages' ids (a delegated child names one)

  function line(cls, ...content) {
    const el = h("div", { class: `line ${cls}` }, ...content);
    log.append(el);
    log.scrollTop = log.scrollHeight;
    return el;
  }
  function showMessage(m) {
    if (seen.has(m.id)) return;
    seen.add(m.id);
    if (!turnMessages.has(m.turn_id)) turnMessages.set(m.turn_id, []);
    turnMessages.get(m.turn_id).push(m.id);
    const bubble = bubbles.get(m.turn_id);
    if (m.role !== "user" && bubble) {
      bubbles.delete(m.turn_id);
      bubble.remove();
    }
    const el = line(m.role === "user" ? "user" : "agent",
      h("span", { class: "who" }, m.role === "user" ? `${m.author}: ` : "agent: "),
      h("span", { class: "text" }, m.content), " ",
      h("a", { class: "turn-link", href: `#/conversations/${conv.id}/turns/${m.turn_id}`, "aria-label": `Inspect turn ${m.turn_id}` }, "turn"));
    el.dataset.turn = m.turn_id;
  }
  for (const m of messages.items) showMessage(m);

  // --- each turn's work out: async operations and delegations, under the turn's message ----
  let work = foldAll(tail.items);
  const workLists = new Map(); // turn id -> its list in the log
  const foundChildren = new Map(); // item key -> the child conversation found while it runs
  const lookingUp = new Set();

  function drawWork(turnId) {
    const items = itemsOfTurn(work, turnId);
    if (!items.length) return;
    let list = workLists.get(turnId);
    if (!list) {
      const anchor = [...log.querySelectorAll(".line.user")].find((el) => el.dataset.turn === turnId);
      // An old turn's finished work is not shown out of its place; running work always is.
      if (!anchor && items.every((item) => item.status !== "pending")) return;
      list = h("ul", { class: "turn-work", dataset: { turn: turnId }, "aria-label": `Work out for turn ${turnId}` });
      if (anchor) anchor.after(list); else log.append(list);
      workLists.set(turnId, list);
    }
    fill(list, items.map((item) => workItem(item, item.childConversationId || foundChildren.get(item.key))));
    for (const item of items) findChild(item, 0);
  }
  async function findChild(item, attempt) {
    const running = item.kind === "delegation" && item.mode !== "loop_in" && item.status === "pending";
    if (!running || item.childConversationId || foundChildren.has(item.key)) return;
    if (attempt === 0 && lookingUp.has(item.key)) return;
    lookingUp.add(item.key);
    try {
      const claimed = new Set([...foundChildren.values()]);
      const id = matchChild(item, await childConversations(path), turnMessages.get(item.turnId) || [], claimed);
      if (id) { foundChildren.set(item.key, id); drawWork(item.turnId); return; }
    } catch (e) { say(e.message, "error"); return; }
    // Not created yet (the delegation has just started): look again shortly.
    if (attempt + 1 < CHILD_LOOKUPS) setTimeout(() => findChild(work.get(item.key) || item, attempt + 1), 1000);
  }
  for (const turnId of new Set([...work.values()].map((item) => item.turnId))) drawWork(turnId);

  const lastSeq = tail.items.length ? tail.items[tail.items.length - 1].seq : 0;
  const stream = new ConversationStream(conv.id, lastSeq, {
    state: (text, kind) => { streamState.textContent = text; streamState.className = `stream-state state-${kind}`; },
    reconnected: (fromSeq) => line("meta reconnect", `Reconnected: resumed from seq ${fromSeq}, nothing missed.`),
    event: (ev) => {
      const folded = foldPending(work, ev);
      if (folded !== work) {
        work = folded;
        drawWork(ev.turn_id || ev.move?.turn_id);
      }
      if (ev.type === "token") {
        let bubble = bubbles.get(ev.turn_id);
        if (!bubble) {
          bubble = h("div", { class: "bubble", dataset: { turn: ev.turn_id } },
            h("span", { class: "who" }, `turn ${short(ev.turn_id, 14)} `), h("span", { class: "text" }));
          bubbles.set(ev.turn_id, bubble);
          inflight.append(bubble);
        }
        bubble.querySelector(".text").textContent += ev.delta;
        log.dataset.tokens = String(Number(log.dataset.tokens || 0) + 1); // deltas received, for tests
      } else if (ev.type === "message" && ev.message) {
        showMessage(ev.message);
      } else if (ev.type === "move" && ev.move && ev.move.tool_call) {
        line("meta", `tool call ${ev.move.tool_call.name}`);
      } else if (ev.type === "turn.failed") {
        bubbles.get(ev.turn_id)?.remove();
        bubbles.delete(ev.turn_id);
        line("error", `turn failed: ${ev.reason || ""}`);
        refreshThreads();
      } else if (ev.type === "approval.requested") {
        line("meta", `tool call ${ev.tool} waits for approval`);
        approvals.refresh();
      } else if (ev.type === "approval.decided") {
        approvals.refresh();
      } else if (ev.type === "turn.started" || ev.type === "turn.completed") {
        refreshThreads();
      } else if (ev.type === "error") {
        line("error", `error: ${ev.error.message}`);
      }
      seqShown.textContent = String(stream.lastSeq);
    },
  });
  const seqShown = h("span", { id: "last-seq" }, String(lastSeq));
  window.wonderConsole = { stream }; // for diagnostics: wonderConsole.stream.drop() tests a reconnect

  const text = h("textarea", { id: "chat-text", rows: "2", placeholder: "Say something (Enter sends, Shift+Enter: new line)" });
  const form = h("form", { id: "chat-form", class: "chat-form", onsubmit: (e) => {
    e.preventDefault();
    const content = text.value.trim();
    if (!content) return;
    stream.send({ type: "message", content, id: `c${Date.now()}` });
    text.value = "";
  } }, h("label", { for: "chat-text", class: "visually-hidden" }, "Message"), text, h("button", { type: "submit" }, "Send"));
  text.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); form.requestSubmit(); }
  });

  const chat = h("section", { class: "panel chat", "aria-labelledby": "chat-h" },
    h("h2", { id: "chat-h" }, "Chat"),
    h("p", { class: "hint" }, "Last seq seen: ", seqShown, ". ", streamState),
    log, inflight, approvals.panel, conv.status === "completed" ? h("p", {}, "This conversation is completed.") : form);

  fill(main,
    h("h1", {}, conv.title || conv.id),
    h("p", { class: "meta" }, badge(conv.status), " ", conv.id, conv.agent_id ? ` · agent ${conv.agent_id}` : "", ` · created ${when(conv.created_at)}`),
    actions,
    h("div", { class: "columns" }, chat, tree));
  approvals.refresh();
  stream.open();
  return () => { stream.close(); if (window.wonderConsole?.stream === stream) delete window.wonderConsole; };
}
