// A fork beside the conversation it was forked from, turn by turn: the history they share, then
// each turn after the fork point aligned with the original's, with a diff of the user's message,
// the agent's reply and the tool calls made; and, where both have a project branch, the files
// each changed.
import { api, ApiError, query } from "../api.js";
import { inlineDiff, linesDiff } from "../diff.js";
import { badge, fill, h } from "../dom.js";

/** The line of turns from `start`: each the first (oldest) turn replying to the one before. */
export function lineFrom(turns, start) {
  const sorted = [...turns].sort((a, b) => String(a.created_at).localeCompare(String(b.created_at)));
  const out = [];
  let at = start;
  for (;;) {
    const next = sorted.find((t) => (t.parent_turn_id || null) === (at || null) && !out.includes(t));
    if (!next) return out;
    out.push(next);
    at = next.id;
  }
}

async function allTurns(path) {
  const items = [];
  let cursor = null;
  do {
    const page = await api("GET", `${path}/turns${query({ limit: 500, after_cursor: cursor })}`);
    items.push(...page.items);
    cursor = page.next_cursor;
  } while (cursor && items.length < 5000);
  return items;
}

async function repliesByTurn(path) {
  const page = await api("GET", `${path}/messages${query({ tail: "true", limit: 1000 })}`);
  const out = new Map();
  for (const m of page.items) {
    if (m.role === "user") continue;
    out.set(m.turn_id, [...(out.get(m.turn_id) || []), m.content]);
  }
  return out;
}

/** A turn's tool calls as lines: `name {"arg": …}` → result or error. */
function toolLines(detail) {
  return (detail?.moves || []).filter((m) => m.tool_call).map((m) => {
    const r = m.tool_result;
    const outcome = !r ? "" : r.success ? ` → ok` : ` → ${r.error ? r.error.code : "error"}`;
    return `${m.tool_call.name} ${JSON.stringify(m.tool_call.input)}${outcome}`;
  }).join("\n");
}

async function workspaceDiff(path) {
  try {
    return await api("GET", `${path}/diff`);
  } catch (e) {
    if (e instanceof ApiError && (e.status === 409 || e.status === 404)) return null;
    throw e;
  }
}

function side(conversationId, turn, reply, tools, label) {
  if (!turn) return h("div", { class: "side empty" }, h("p", {}, `No turn here in the ${label}.`));
  return h("div", { class: "side" },
    h("p", {}, h("a", { href: `#/conversations/${conversationId}/turns/${turn.id}`, "aria-label": `${label}: turn ${turn.id}` }, turn.id), " ", badge(turn.status)),
    h("p", { class: "said" }, h("span", { class: "role" }, "user"), " ", turn.input),
    h("p", { class: "said" }, h("span", { class: "role" }, "agent"), " ", reply || "—"),
    tools ? h("pre", { class: "json", tabindex: "0", "aria-label": `${label}: tool calls` }, tools) : h("p", { class: "hint" }, "No tool calls."));
}

export async function render(main, { conversationId }) {
  const forkPath = `/v1/conversations/${encodeURIComponent(conversationId)}`;
  const fork = await api("GET", forkPath);
  const originalId = fork.forked_from_conversation_id;
  if (!originalId) {
    fill(main, h("h1", {}, "Not a fork"),
      h("p", {}, h("a", { href: `#/conversations/${conversationId}` }, conversationId), " was not forked from another conversation: there is nothing to compare it with."));
    return;
  }
  const origPath = `/v1/conversations/${encodeURIComponent(originalId)}`;
  const at = fork.forked_at_turn_id;
  const [original, forkTurns, origTurns, forkReplies, origReplies, forkFiles, origFiles] = await Promise.all([
    api("GET", origPath), allTurns(forkPath), allTurns(origPath), repliesByTurn(forkPath), repliesByTurn(origPath),
    workspaceDiff(forkPath), workspaceDiff(origPath),
  ]);
  const shared = forkTurns.filter((t) => t.inherited_from);
  const ownTurns = forkTurns.filter((t) => !t.inherited_from);
  let forkLine = lineFrom(ownTurns, at);
  if (!forkLine.length) forkLine = ownTurns;
  const origLine = lineFrom(origTurns, at);
  const rows = Math.max(forkLine.length, origLine.length);
  const pairs = Array.from({ length: rows }, (_, i) => [origLine[i] || null, forkLine[i] || null]);
  const detail = (path, t) => (t ? api("GET", `${path}/turns/${encodeURIComponent(t.id)}`) : null);
  const details = await Promise.all(pairs.flatMap(([o, f]) => [detail(origPath, o), detail(forkPath, f)]));

  const aligned = pairs.map(([o, f], i) => {
    const od = details[2 * i], fd = details[2 * i + 1];
    const oReply = o ? (origReplies.get(o.id) || []).join("\n") : "";
    const fReply = f ? (forkReplies.get(f.id) || []).join("\n") : "";
    const oTools = toolLines(od), fTools = toolLines(fd);
    const changed = !o || !f || o.input !== f.input || oReply !== fReply || oTools !== fTools;
    return h("li", { class: `aligned${changed ? " changed" : ""}`, dataset: { step: String(i + 1) } },
      h("h3", {}, `Turn ${i + 1} after the fork point`, " ", badge(changed ? "differs" : "same")),
      h("div", { class: "pair" },
        side(originalId, o, oReply, oTools, "original"),
        side(conversationId, f, fReply, fTools, "fork")),
      h("div", { class: "turn-diff" },
        h("h4", {}, "Message"), inlineDiff(o?.input, f?.input, `Message, turn ${i + 1}: original to fork`),
        h("h4", {}, "Reply"), inlineDiff(oReply, fReply, `Reply, turn ${i + 1}: original to fork`),
        h("h4", {}, "Tool calls"),
        oTools === fTools ? h("p", { class: "hint" }, oTools ? "The same tool calls." : "No tool calls on either side.")
          : linesDiff(oTools, fTools, `Tool calls, turn ${i + 1}: original to fork`)));
  });

  let workspace;
  if (!forkFiles && !origFiles) {
    workspace = h("p", { class: "empty", id: "no-workspace" }, "Neither conversation has a project branch: no workspace changes to compare.");
  } else {
    const names = (d) => (d ? d.files.join("\n") : "");
    workspace = [
      h("p", {}, `Files changed against ${(forkFiles || origFiles).base}: original ${origFiles ? origFiles.files.length : 0}, fork ${forkFiles ? forkFiles.files.length : 0}.`),
      linesDiff(names(origFiles), names(forkFiles), "Files changed: original to fork"),
      h("details", {}, h("summary", {}, "The original's diff"), h("pre", { class: "json", tabindex: "0", "aria-label": "The original's diff" }, origFiles ? origFiles.diff : "no branch")),
      h("details", {}, h("summary", {}, "The fork's diff"), h("pre", { class: "json", tabindex: "0", "aria-label": "The fork's diff" }, forkFiles ? forkFiles.diff : "no branch")),
    ];
  }

  fill(main,
    h("p", { class: "crumbs" }, h("a", { href: `#/conversations/${conversationId}` }, `← ${conversationId}`)),
    h("h1", {}, `Compare ${fork.title || conversationId} with its original`),
    h("dl", { class: "facts" },
      h("dt", {}, "Original"), h("dd", {}, h("a", { href: `#/conversations/${originalId}` }, original.title || originalId), ` ${originalId}`),
      h("dt", {}, "Fork"), h("dd", {}, h("a", { href: `#/conversations/${conversationId}` }, fork.title || conversationId), ` ${conversationId}`),
      h("dt", {}, "Fork point"), h("dd", {}, h("a", { href: `#/conversations/${originalId}/turns/${at}` }, at))),
    h("section", { class: "panel", "aria-labelledby": "shared-h" },
      h("h2", { id: "shared-h" }, `Shared history (${shared.length} turn${shared.length === 1 ? "" : "s"})`),
      shared.length ? h("ol", {}, shared.map((t) => h("li", {}, t.input))) : h("p", { class: "empty" }, "None.")),
    h("section", { class: "panel", "aria-labelledby": "aligned-h" },
      h("h2", { id: "aligned-h" }, "After the fork point, turn by turn"),
      h("p", { class: "hint" }, "Left: the original; right: the fork. Below each pair, what changed: removed words struck through, added ones underlined."),
      rows ? h("ol", { class: "alignment", id: "alignment" }, aligned) : h("p", { class: "empty" }, "Neither has a turn after the fork point yet.")),
    h("section", { class: "panel", "aria-labelledby": "workspace-h" },
      h("h2", { id: "workspace-h" }, "Workspace changes"), workspace));
}
