// Workflow runs: this client's runs, newest first; starting one; one run's nodes with their
// states, inputs and outputs, refreshed while it runs; re-running an ended run from one of its
// nodes (a new run: the nodes that node cannot reach reuse this run's outputs).
import { api, query } from "../api.js";
import { badge, duration, field, fill, h, json, select, table, when } from "../dom.js";
import { graph } from "./workflow_graph.js";

const DONE = new Set(["completed", "failed", "cancelled"]);

async function runView(main, runId, say) {
  const heading = h("h1", {}, `Run ${runId}`);
  const body = h("div", { id: "run-body" });
  fill(main, h("p", { class: "crumbs" }, h("a", { href: "#/workflows" }, "← Workflow runs")), heading, body);
  let timer = null;
  let stopped = false;
  let definition = null; // the run's workflow version: read once, its graph drawn at each refresh
  async function refresh() {
    const { run, nodes } = await api("GET", `/v1/workflow-runs/${encodeURIComponent(runId)}`);
    if (definition === null) {
      try {
        const versions = (await api("GET", `/v1/workflows/${encodeURIComponent(run.workflow_id)}/versions`)).items;
        definition = versions.find((v) => v.version === run.workflow_version) || versions[versions.length - 1] || {};
      } catch (e) { definition = {}; }
    }
    // The latest record of each token is where that token stands; a node's state is its latest token's.
    const latest = new Map();
    for (const n of nodes) latest.set(`${n.node_id}|${n.token_id}`, n);
    const byNode = new Map();
    for (const n of latest.values()) byNode.set(n.node_id, [...(byNode.get(n.node_id) || []), n]);
    const ended = DONE.has(run.status);
    const rerunPanel = h("section", { class: "panel", id: "rerun", "aria-labelledby": "rerun-h", hidden: true });
    const rerunFrom = (nodeId, opener) => {
      const input = h("textarea", { id: "rerun-input", rows: "3", spellcheck: "false", placeholder: "empty: the input its upstream nodes give" });
      const problems = h("div", { id: "rerun-errors", role: "alert" });
      const close = () => { rerunPanel.hidden = true; fill(rerunPanel); opener.focus(); };
      const submit = async (e) => {
        e.preventDefault();
        const body = { from_node: nodeId };
        if (input.value.trim()) {
          try { body.input = JSON.parse(input.value); } catch (err) { fill(problems, h("p", { class: "error" }, `Not JSON: ${err.message}`)); return; }
        }
        try {
          const started = await api("POST", `/v1/workflow-runs/${encodeURIComponent(runId)}/reruns`, body);
          say(`Re-running from ${nodeId}: run ${started.run.id}.`);
          location.hash = `#/workflows/runs/${started.run.id}`;
        } catch (err) { fill(problems, h("p", { class: "error" }, err.message)); }
      };
      fill(rerunPanel,
        h("h2", { id: "rerun-h" }, `Re-run from ${nodeId}`),
        h("p", { class: "hint" }, `A new run of this workflow version: ${nodeId} and every node it leads to run again; the other nodes reuse this run's outputs. This run is not changed.`),
        h("form", { "aria-label": `Re-run from ${nodeId}`, onsubmit: submit, onkeydown: (e) => { if (e.key === "Escape") close(); } },
          h("label", { for: "rerun-input" }, `Input for ${nodeId} (JSON, optional)`), input, problems,
          h("div", { class: "actions" }, h("button", { type: "submit" }, "Start the re-run"), h("button", { type: "button", onclick: close }, "Cancel"))));
      rerunPanel.hidden = false;
      input.focus();
    };
    const origin = run.rerun_of;
    fill(body,
      h("dl", { class: "facts" },
        h("dt", {}, "Workflow"), h("dd", {}, h("a", { href: `#/library/workflows/${encodeURIComponent(run.workflow_id)}` }, `${run.workflow_id} v${run.workflow_version}`)),
        h("dt", {}, "Status"), h("dd", { id: "run-status" }, badge(run.status)),
        h("dt", {}, "Duration"), h("dd", {}, duration(run.started_at || run.created_at, run.finished_at) || "running"),
        origin ? [h("dt", {}, "Re-run of"), h("dd", { id: "rerun-of" }, h("a", { href: `#/workflows/runs/${origin.run_id}` }, origin.run_id), ` from node ${origin.node_id}`)] : null,
        run.context && run.context.conversation_id ? [h("dt", {}, "For conversation"), h("dd", {}, h("a", { href: `#/conversations/${run.context.conversation_id}` }, run.context.conversation_id))] : null),
      h("section", { class: "panel", "aria-labelledby": "graph-h" }, h("h2", { id: "graph-h" }, "Graph"),
        definition.nodes ? h("div", { class: "wf-graph-wrap", id: "run-graph" }, graph(definition, byNode))
          : h("p", { class: "empty" }, "The workflow's definition could not be read."),
        h("p", { class: "hint" }, "Each node's state in this run; a fan-out's edge reads “each”; a node a re-run took from the run it re-runs reads “reused”. Once the run has ended, each node below can start a re-run from it.")),
      rerunPanel,
      h("section", { class: "panel", "aria-labelledby": "nodes-h" }, h("h2", { id: "nodes-h" }, "Nodes"),
        h("ol", { class: "nodes" }, [...byNode.entries()].map(([nodeId, tokens]) => h("li", { class: "node", dataset: { node: nodeId } },
          h("h3", {}, nodeId, " ", h("span", { class: "hint" }, tokens[0].kind), " ",
            tokens.length > 1 ? `(${tokens.length} branches) ` : "", ...tokens.map((t) => badge(t.reused_from ? "reused" : t.state))),
          ended ? h("button", { type: "button", class: "small", "aria-label": `Re-run from here: ${nodeId}`, onclick: (e) => rerunFrom(nodeId, e.currentTarget) }, "Re-run from here") : null,
          tokens.map((t) => h("details", {}, h("summary", {}, `token ${t.token_id}${t.branch && t.branch.length ? ` · branch ${t.branch.map((b) => b.join(":")).join("/")}` : ""}${t.reused_from && origin ? ` · reused from ${origin.run_id} (${t.reused_from})` : ""}`),
            h("h4", {}, "Input"), json(t.input, `Input of ${nodeId}`),
            h("h4", {}, "Output"), json(t.output, `Output of ${nodeId}`),
            t.error ? h("p", { class: "error" }, `${t.error.code || ""} ${t.error.message || JSON.stringify(t.error)}`) : null,
            t.child_run_id ? h("p", {}, "Child run ", h("a", { href: `#/workflows/runs/${t.child_run_id}` }, t.child_run_id)) : null)))))),
      h("section", { class: "panel", "aria-labelledby": "io-h" }, h("h2", { id: "io-h" }, "Input and output"),
        h("h3", {}, "Input"), json(run.input, "Run input"),
        h("h3", {}, "Output"), json(run.output, "Run output"),
        run.error ? h("p", { class: "error" }, JSON.stringify(run.error)) : null));
    if (!DONE.has(run.status) && !stopped) timer = setTimeout(() => refresh().catch((e) => say(e.message, "error")), 1000);
  }
  await refresh();
  return () => { stopped = true; clearTimeout(timer); };
}

export async function render(main, { runId }, { say }) {
  if (runId) return runView(main, runId, say);
  const [runs, workflows] = await Promise.all([
    api("GET", `/v1/workflow-runs${query({ limit: 100 })}`),
    api("GET", "/v1/workflows"),
  ]);
  const workflow = select(workflows.items.map((w) => [w.id, `${w.id} (v${w.version})`]), undefined, { name: "workflow" });
  const input = h("textarea", { id: "run-input", rows: "3", spellcheck: "false" }, "{}");
  const problems = h("div", { id: "run-errors", role: "alert" });
  const start = async (e) => {
    e.preventDefault();
    let parsed;
    try { parsed = JSON.parse(input.value); } catch (err) { fill(problems, h("p", { class: "error" }, `Not JSON: ${err.message}`)); return; }
    try {
      const started = await api("POST", `/v1/workflows/${encodeURIComponent(workflow.value)}/runs`, { input: parsed });
      location.hash = `#/workflows/runs/${started.run.id}`;
    } catch (err) { fill(problems, h("p", { class: "error" }, err.message)); }
  };
  fill(main,
    h("h1", {}, "Workflow runs"),
    workflows.items.length ? h("form", { class: "panel", "aria-label": "Start a run", onsubmit: start },
      h("h2", {}, "Start a run"), field("Workflow", workflow), h("label", { for: "run-input" }, "Input (JSON)"), input, problems,
      h("button", { type: "submit" }, "Run")) : null,
    table(`${runs.items.length} runs, newest first`, ["Run", "Workflow", "Status", "Created", "Duration"],
      runs.items.map((r) => [h("a", { href: `#/workflows/runs/${r.id}` }, r.id), `${r.workflow_id} v${r.workflow_version}`, badge(r.status), when(r.created_at), duration(r.started_at || r.created_at, r.finished_at)])));
}
