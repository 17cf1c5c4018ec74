// Operations: your quota and the audit trail of your changes (any key); and, for an operator
// (admin) key, the cluster: resident conversation actors against the cap, activations and
// evictions, the Serve deployments and their replicas, the models' throughput, and links to
// each resident actor's page in the Ray dashboard.
import { api, ApiError, query } from "../api.js";
import { badge, field, fill, h, json, table, when } from "../dom.js";

function facts(pairs) {
  return h("dl", { class: "facts" }, pairs.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v ?? "—")]));
}

function dashboard(port, actorId) {
  const base = `${location.protocol}//${location.hostname}:${port}`;
  return actorId ? `${base}/#/actors/${actorId}` : `${base}/#/actors`;
}

function clusterPart(ops) {
  const r = ops.residency;
  const m = ops.model_calls;
  const meter = r ? h("meter", { id: "resident-meter", min: "0", max: String(r.max_resident), value: String(r.resident), "aria-label": "Resident conversation actors against the cap" }) : null;
  return [
    h("section", { class: "panel", "aria-labelledby": "residency-h" },
      h("h2", { id: "residency-h" }, "Conversation actors"),
      r ? [
        h("p", { id: "residency-line" }, `${r.resident} resident of ${r.max_resident} allowed `, meter,
          ` (peak ${r.peak_resident}); ${r.starting} starting, ${r.waiting} waiting, ${r.idle} idle.`),
        facts([
          ["Activations", String(r.activations)], ["Evictions", String(r.evictions)],
          ["Refused at the cap", String(r.refused)], ["Median start", r.start_ms_p50 !== null && r.start_ms_p50 !== undefined ? `${r.start_ms_p50} ms` : "—"],
          ["By node", r.nodes ? Object.entries(r.nodes).map(([n, c]) => `${n.slice(0, 12)}…: ${c}`).join(", ") || "—" : "—"],
        ]),
        table("Resident actors, most recently active first", ["Conversation", "Actor", "Ray dashboard"],
          (r.actors || []).map((a) => [
            h("a", { href: `#/conversations/${a.conversation_id}` }, a.conversation_id), a.name,
            a.actor_id ? h("a", { href: dashboard(ops.dashboard_port, a.actor_id), rel: "noreferrer", "aria-label": `${a.name} in the Ray dashboard` }, "Ray dashboard") : "—"])),
      ] : h("p", { class: "empty" }, "The conversation directory could not be read.")),
    h("section", { class: "panel", "aria-labelledby": "models-h" },
      h("h2", { id: "models-h" }, "Models"),
      h("p", { id: "throughput" }, `Last ${m.window_s} s: ${m.totals.calls} model calls (${m.calls_per_minute} a minute), ${m.totals.failed_calls} failed; `,
        `${m.totals.prompt_tokens} prompt and ${m.totals.completion_tokens} completion tokens (${m.completion_tokens_per_s} completion tokens a second).`),
      ops.deployments ? table("Serve deployments", ["Application", "Deployment", "Status", "Replicas"],
        ops.deployments.map((d) => [d.application, d.name, badge(d.status),
          Object.entries(d.replicas).map(([s, n]) => `${n} ${s.toLowerCase()}`).join(", ") || "none"]))
        : h("p", { class: "empty" }, "The Serve deployments could not be read."),
      h("p", { class: "hint" }, "Queue lengths are not reported by Ray Serve's status: see the deployment's metrics in the ",
        h("a", { href: `${location.protocol}//${location.hostname}:${ops.dashboard_port}/#/serve`, rel: "noreferrer" }, "Ray dashboard"), "."),
      ops.notes.length ? h("ul", { class: "notes" }, ops.notes.map((n) => h("li", {}, n))) : null),
  ];
}

export async function render(main, { params }) {
  const [quota, cluster] = await Promise.all([
    api("GET", "/v1/quota"),
    api("GET", "/v1/operations").catch((e) => {
      if (e instanceof ApiError && e.status === 403) return null;
      throw e;
    }),
  ]);
  const action = params.get("action") || "";
  const audit = await api("GET", `/v1/audit${query({ action: action || undefined, limit: 100 })}`);

  const actionField = h("input", { name: "audit-action", value: action, placeholder: "key. or library.put" });
  const form = h("form", { class: "filters", onsubmit: (e) => {
    e.preventDefault();
    location.hash = `#/operations${query({ action: actionField.value.trim() })}`;
  } }, field("Action (one, or a family ending in a dot)", actionField), h("button", { type: "submit" }, "Filter"));

  const limits = Object.entries(quota);
  fill(main,
    h("h1", {}, "Operations"),
    cluster ? clusterPart(cluster)
      : h("section", { class: "panel", id: "cluster-needs-admin" }, h("h2", {}, "The cluster"),
        h("p", {}, "Resident actors, deployments and throughput are the whole cluster's: they need an operator (admin) key.")),
    h("section", { class: "panel", "aria-labelledby": "quota-h" },
      h("h2", { id: "quota-h" }, "Your quota"),
      limits.length ? facts(limits.map(([k, v]) => [k.replace(/_/g, " "), String(v)])) : h("p", {}, "No limits set: the deployment's defaults apply (none by default).")),
    h("section", { class: "panel", "aria-labelledby": "audit-h" },
      h("h2", { id: "audit-h" }, "Audit trail"),
      form,
      h("div", { id: "audit-list" }, table("Recorded changes, oldest first", ["When", "Who", "Action", "Target", "Details"],
        audit.items.map((a) => [when(a.at), a.user_id ? `${a.actor} as ${a.user_id}` : a.actor, a.action, a.target,
          Object.keys(a.details || {}).length ? json(a.details, `Details of ${a.action}`) : ""])))));
}
