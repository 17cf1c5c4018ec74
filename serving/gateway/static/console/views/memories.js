// An agent's memories: newest first (by type, consolidated ones on request, each consolidation
// with the memories it summarises), a search (vector, full text or hybrid) with each hit's
// relevance and score, and editing or deleting one (an edited content is embedded again, so a
// search finds the new text).
import { api, query } from "../api.js";
import { field, fill, h, select, table, when } from "../dom.js";

export async function render(main, { params }, { say }) {
  const agents = (await api("GET", "/v1/agents")).items;
  if (!agents.length) {
    fill(main, h("h1", {}, "Memories"), h("p", {}, "No agents yet: memories belong to an agent."));
    return;
  }
  const agent = select(agents.map((a) => [a.id, `${a.name} (${a.id})`]), params.get("agent") || agents[0].id, { name: "agent" });
  const types = h("input", { type: "text", name: "types", placeholder: "fact, preference (comma-separated)" });
  const consolidated = h("input", { type: "checkbox", name: "consolidated" });
  const list = h("div", { id: "memory-list" });
  const q = h("input", { type: "search", name: "q", required: true, placeholder: "what to look for" });
  const mode = select([["vector", "Vector"], ["fts", "Full text"], ["hybrid", "Hybrid"]], "vector", { name: "mode" });
  const hits = h("div", { id: "memory-hits", "aria-live": "polite" });
  const typeList = () => types.value.split(",").map((t) => t.trim()).filter(Boolean);

  let sourcesOf = new Map(); // a consolidated memory's id → the memories it summarises (loaded ones)
  const content = (m) => {
    const sources = sourcesOf.get(m.id) || [];
    return [
      h("span", { class: "text" }, m.content || `(stored by reference: ${m.content_ref})`),
      m.consolidated_into ? h("span", { class: "hint" }, ` · consolidated into ${m.consolidated_into}`) : null,
      sources.length ? h("details", { class: "sources" }, h("summary", {}, `Sources (${sources.length})`),
        h("ul", {}, sources.map((x) => h("li", {}, `${x.content || x.content_ref} `, h("span", { class: "hint" }, `${x.type} · ${when(x.created_at)}`))))) : null,
    ];
  };
  const editor = h("section", { id: "memory-edit", class: "panel", "aria-labelledby": "edit-h", hidden: true });
  async function edit(listed, opener) {
    // A large content is stored by reference: the form edits the full text.
    let m = listed;
    try { if (listed.content_ref) m = await api("GET", `/v1/agents/${encodeURIComponent(agent.value)}/memories/${listed.id}`); } catch (err) { say(err.message, "error"); return; }
    const text = h("textarea", { name: "content", rows: "4", required: true }, m.content || "");
    const kind = h("input", { type: "text", name: "type", value: m.type, required: true, pattern: "[a-z][a-z0-9_]{0,31}" });
    const sig = h("input", { type: "number", name: "significance", min: "0", max: "1", step: "0.05", value: String(m.significance) });
    const subject = h("input", { type: "text", name: "subject", value: m.subject || "", maxlength: "200" });
    const close = () => { editor.hidden = true; fill(editor); if (opener.isConnected) opener.focus(); };
    async function save(e) {
      e.preventDefault();
      const body = {};
      if (text.value !== m.content) body.content = text.value;
      if (kind.value !== m.type) body.type = kind.value;
      if (Number(sig.value) !== m.significance) body.significance = Number(sig.value);
      if (subject.value !== (m.subject || "")) body.subject = subject.value || null;
      if (!Object.keys(body).length) { say("Nothing changed."); close(); return; }
      try {
        await api("PATCH", `/v1/agents/${encodeURIComponent(agent.value)}/memories/${m.id}`, body);
        say("Memory saved.");
        editor.hidden = true; fill(editor);
        await load();
        if (q.value) await search();
      } catch (err) { say(err.message, "error"); }
    }
    fill(editor,
      h("h2", { id: "edit-h" }, `Edit memory ${m.id}`),
      h("form", { "aria-label": "Edit memory", onsubmit: save, onkeydown: (e) => { if (e.key === "Escape") close(); } },
        h("div", { class: "wide-field" }, field("Content", text)),
        field("Memory type", kind), field("Significance (0 to 1)", sig), field("Subject", subject),
        h("p", { class: "hint" }, "A changed content is embedded again; the earlier text is kept in the memory's history."),
        h("div", { class: "actions" }, h("button", { type: "submit" }, "Save memory"), h("button", { type: "button", onclick: close }, "Cancel"))));
    editor.hidden = false;
    text.focus();
  }
  const row = (m, extra = []) => [
    h("span", {}, content(m)),
    m.type, m.significance.toFixed(2), ...extra, when(m.created_at),
    m.metadata && m.metadata.turn_id ? h("a", { href: `#/conversations/${m.metadata.conversation_id}/turns/${m.metadata.turn_id}` }, "turn") : "—",
    h("span", { class: "actions" }, m.consolidated_into ? null : h("button", { type: "button", class: "small", "aria-label": `Edit memory ${m.id}`, onclick: (e) => edit(m, e.currentTarget).catch((err) => say(err.message, "error")) }, "Edit"),
    h("button", { type: "button", class: "danger small", "aria-label": `Delete memory ${m.id}`, onclick: async () => {
      if (!confirm("Delete this memory?")) return;
      try { await api("DELETE", `/v1/agents/${agent.value}/memories/${m.id}`); say("Memory deleted."); await load(); } catch (e) { say(e.message, "error"); }
    } }, "Delete")),
  ];

  async function load() {
    const page = await api("GET", `/v1/agents/${encodeURIComponent(agent.value)}/memories${query({ types: typeList(), include_consolidated: consolidated.checked ? "true" : "", limit: 100 })}`);
    sourcesOf = new Map();
    for (const m of page.items) if (m.consolidated_into) sourcesOf.set(m.consolidated_into, [...(sourcesOf.get(m.consolidated_into) || []), m]);
    fill(list, table(`${page.items.length} memories, newest first`, ["Content", "Type", "Significance", "Stored", "Written by", ""], page.items.map((m) => row(m))));
  }
  async function search(e) {
    if (e) e.preventDefault();
    try {
      const found = await api("POST", `/v1/agents/${encodeURIComponent(agent.value)}/memories/search`,
        { query: q.value, mode: mode.value, k: 10, types: typeList(), include_consolidated: consolidated.checked });
      fill(hits, table(`${found.items.length} results for “${q.value}” (${mode.value}), best first`,
        ["Content", "Type", "Significance", "Relevance", "Score", "Stored", "Written by", ""],
        found.items.map((m) => row(m, [m.relevance.toFixed(3), m.score.toFixed(3)]))));
    } catch (err) { say(err.message, "error"); }
  }

  fill(main,
    h("h1", {}, "Memories"),
    h("form", { class: "filters", "aria-label": "Browse memories", onsubmit: (e) => { e.preventDefault(); load().catch((err) => say(err.message, "error")); } },
      field("Agent", agent), field("Types", types),
      h("span", { class: "field" }, h("label", { class: "check" }, consolidated, " include consolidated")),
      h("button", { type: "submit" }, "Show")),
    editor,
    h("section", { class: "panel", "aria-labelledby": "search-h" }, h("h2", { id: "search-h" }, "Search"),
      h("form", { class: "inline", role: "search", onsubmit: search }, field("Query", q), field("Mode", mode), h("button", { type: "submit" }, "Search")),
      hits),
    h("section", { class: "panel", "aria-labelledby": "all-h" }, h("h2", { id: "all-h" }, "Browse"), list));
  await load();
}
