// A workflow run's graph: the workflow's nodes in layers (each node one layer after the furthest
// node that leads to it), its edges as arrows (a fan-out's edge labelled "each"), and each node's
// state in the run, as text and colour. Drawn as SVG from data (no markup from strings).
// The SVG namespace, as the HTML parser assigns it (no address spelled in the console's files).
const NS = (() => {
  const probe = document.createElement("template");
  probe.innerHTML = "<svg></svg>";
  return probe.content.firstChild.namespaceURI;
})();
const W = 150, H = 46, GAP_X = 60, GAP_Y = 22;

function el(tag, attrs = {}, ...children) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) node.setAttribute(k, String(v));
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

/** Each node's layer: 0 for a node nothing leads to, else one more than its furthest source. */
export function layers(nodes, edges) {
  const depth = new Map(nodes.map((n) => [n.id, 0]));
  for (let pass = 0; pass < nodes.length; pass++) { // a loop back stops after one pass per node
    let moved = false;
    for (const e of edges) {
      const next = (depth.get(e.from) ?? 0) + 1;
      if (depth.has(e.to) && next > depth.get(e.to) && next < nodes.length) { depth.set(e.to, next); moved = true; }
    }
    if (!moved) break;
  }
  return depth;
}

/** A node's state in the run, from its tokens' latest states: "done ×3", "running", "not reached"
 * ("reused": a re-run's node that took the re-run run's output instead of running). */
export function nodeState(tokens) {
  if (!tokens || !tokens.length) return { key: "pending", text: "not reached" };
  const counts = new Map();
  for (const t of tokens) {
    const state = t.reused_from ? "reused" : t.state;
    counts.set(state, (counts.get(state) || 0) + 1);
  }
  const order = ["failed", "running", "waiting", "pending", "skipped", "cancelled", "done", "reused"];
  const kinds = new Set([...counts.keys()].map((s) => (s.startsWith("waiting") ? "waiting" : s)));
  const key = order.find((s) => kinds.has(s)) || "pending";
  const text = [...counts.entries()].map(([s, n]) => (n > 1 ? `${s} ×${n}` : s)).join(", ");
  return { key, text };
}

export function graph(definition, byNode) {
  const nodes = definition.nodes || [];
  const edges = definition.edges || [];
  const depth = layers(nodes, edges);
  const rows = new Map();
  const pos = new Map();
  for (const n of nodes) {
    const d = depth.get(n.id) || 0;
    const r = rows.get(d) || 0;
    rows.set(d, r + 1);
    pos.set(n.id, { x: 10 + d * (W + GAP_X), y: 10 + r * (H + GAP_Y) });
  }
  const width = 20 + (Math.max(0, ...depth.values()) + 1) * (W + GAP_X) - GAP_X;
  const height = 20 + Math.max(1, ...rows.values()) * (H + GAP_Y) - GAP_Y;
  const summary = nodes.map((n) => `${n.id}: ${nodeState(byNode.get(n.id)).text}`).join("; ");
  const svg = el("svg", { class: "wf-graph", viewBox: `0 0 ${width} ${height}`, width, height, role: "img", "aria-label": `Workflow graph. ${summary}` },
    el("defs", {}, el("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" },
      el("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "wf-arrow" }))));
  for (const e of edges) {
    const a = pos.get(e.from), b = pos.get(e.to);
    if (!a || !b) continue;
    const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2;
    const back = x2 <= x1;
    const d = back ? `M ${a.x + W / 2} ${a.y + H} C ${a.x + W / 2} ${a.y + H + 30}, ${b.x + W / 2} ${b.y + H + 30}, ${b.x + W / 2} ${b.y + H}`
      : `M ${x1} ${y1} C ${x1 + GAP_X / 2} ${y1}, ${x2 - GAP_X / 2} ${y2}, ${x2} ${y2}`;
    svg.append(el("path", { d, class: "wf-edge", "marker-end": "url(#arrow)" }));
    if (e.foreach) svg.append(el("text", { x: (x1 + x2) / 2, y: (y1 + y2) / 2 - 4, class: "wf-edge-label", "text-anchor": "middle" }, "each"));
  }
  for (const n of nodes) {
    const p = pos.get(n.id);
    const state = nodeState(byNode.get(n.id));
    svg.append(el("g", { class: `wf-node wf-${state.key.replace(/[^a-z]/g, "")}`, "data-node": n.id },
      el("title", {}, `${n.id} (${n.kind}): ${state.text}`),
      el("rect", { x: p.x, y: p.y, width: W, height: H, rx: 6 }),
      el("text", { x: p.x + 8, y: p.y + 18, class: "wf-name" }, `${n.id}`),
      el("text", { x: p.x + 8, y: p.y + 36, class: "wf-state" }, `${n.kind} · ${state.text}`.slice(0, 24))));
  }
  return svg;
}
