// The turn inspector: the turn, its moves in order (tool calls with their arguments, results and
// errors), its usage, the model calls it made as recorded (request and response), and forking
// from it: at this turn, or re-running its message (edited) from the turn before.
import { api, ApiError } from "../api.js";
import { badge, duration, fill, h, json, when } from "../dom.js";
import { callTools } from "./call_tools.js";

function moveItem(move, index, prevAt) {
  const call = move.tool_call;
  const result = move.tool_result;
  return h("li", { class: "move" },
    h("h3", {}, `Move ${move.sequence ?? index + 1}`, call ? `: ${call.name}` : "",
      result ? [" ", badge(result.success ? "ok" : "error")] : null),
    h("p", { class: "hint" }, when(move.created_at), prevAt ? ` · +${duration(prevAt, move.created_at)}` : ""),
    move.reasoning ? h("p", { class: "reasoning" }, move.reasoning) : null,
    call ? [h("h4", {}, "Arguments"), json(call.input, `Arguments of ${call.name}`)] : null,
    result && result.success ? [h("h4", {}, "Result"), json(result.result, "Result")] : null,
    result && result.error ? [h("h4", {}, "Error"),
      h("p", { class: "error" }, `${result.error.code}: ${result.error.message}`, result.error.retriable ? " (retriable)" : "")] : null,
    !call && move.raw ? [h("h4", {}, "Step"), json(move.raw, "Step record")] : null);
}

function usageLine(usage) {
  const u = usage || {};
  return `${u.prompt_tokens ?? 0} prompt + ${u.completion_tokens ?? 0} completion tokens`;
}

function requestMessages(request) {
  const messages = request && Array.isArray(request.messages) ? request.messages : null;
  if (!messages) return json(request, "Request");
  return h("ol", { class: "prompt" }, messages.map((m) => h("li", {},
    h("span", { class: "role" }, m.role), " ",
    h("span", { class: "text" }, typeof m.content === "string" ? m.content : JSON.stringify(m.content)),
    m.tool_calls ? json(m.tool_calls, "Tool calls in this message") : null)));
}

function modelCall(call, i, path) {
  const response = call.response || {};
  return h("li", { class: "model-call" },
    h("h3", {}, `Call ${i + 1}: ${call.purpose || "answer"} · ${call.provider}/${call.model}`, " ", badge(call.status || "ok"),
      call.attempt > 1 ? ` (retry ${call.attempt})` : ""),
    h("p", { class: "hint" }, usageLine(call.usage),
      call.cost !== null && call.cost !== undefined ? ` · cost ${call.cost} ${call.currency || ""}` : "",
      call.timings ? ` · ${call.timings.duration_s?.toFixed?.(3) ?? call.timings.duration_s} s` : "",
      call.timings && call.timings.first_token_s !== null && call.timings.first_token_s !== undefined ? ` · first token ${call.timings.first_token_s.toFixed(3)} s` : ""),
    h("details", {}, h("summary", {}, "Request as sent"),
      call.request ? requestMessages(call.request) : h("p", {}, `Stored in the object store (${call.request_ref || "reference missing"}).`),
      call.request ? json(call.request, "Full request") : null),
    h("h4", {}, "Response"),
    response.content ? h("p", { class: "text" }, response.content) : null,
    response.tool_calls && response.tool_calls.length ? json(response.tool_calls, "Tool calls in the response") : null,
    response.finish_reason ? h("p", { class: "hint" }, `finish: ${response.finish_reason}`) : null,
    call.error ? h("p", { class: "error" }, `${call.error.code}: ${call.error.message}`) : null,
    callTools(path, call, i + 1));
}

/** GET `path`, or null where this gateway has no such record (a 404). */
async function optional(path) {
  try {
    return await api("GET", path);
  } catch (e) {
    if (e instanceof ApiError && e.status === 404) return null;
    throw e;
  }
}

/** The turn's recorded model calls, or null when none are recorded (or this gateway keeps none). */
export async function recordedCalls(path) {
  const page = await optional(`${path}/calls`);
  return page && Array.isArray(page.items) && page.items.length ? page.items : null;
}

/** Spans depth first, each with its depth: the rows of a waterfall. */
export function flattenSpans(root, depth = 0, out = []) {
  out.push({ span: root, depth });
  for (const child of root.children || []) flattenSpans(child, depth + 1, out);
  return out;
}

function waterfall(root) {
  const rows = flattenSpans(root);
  const t0 = new Date(root.start).getTime();
  const total = Math.max(1, root.duration_ms || (root.end ? new Date(root.end) - t0 : 1));
  return h("ol", { class: "waterfall", "aria-label": "Spans by start time" }, rows.map(({ span, depth }) => {
    const bar = h("span", { class: `bar bar-${span.status === "error" ? "error" : "ok"}` });
    // CSSOM, not a style attribute: the console's CSP allows no inline style.
    bar.style.marginLeft = `${(100 * (new Date(span.start).getTime() - t0)) / total}%`;
    bar.style.width = `${Math.max(0.5, (100 * (span.duration_ms || 0)) / total)}%`;
    const label = h("span", { class: "span-name" }, span.name);
    label.style.paddingLeft = `${depth}rem`;
    return h("li", {}, label, h("span", { class: "track" }, bar),
      h("span", { class: "span-ms" }, span.duration_ms !== null && span.duration_ms !== undefined ? `${span.duration_ms.toFixed(1)} ms` : "open"));
  }));
}

const LINK_TARGETS = {
  workflow_run: (l) => `#/workflows/runs/${l.target_id}`,
  child_turn: (l) => (l.conversation_id ? `#/conversations/${l.conversation_id}/turns/${l.target_id}` : null),
};

export async function render(main, { conversationId, turnId }, { say }) {
  const conv = `/v1/conversations/${encodeURIComponent(conversationId)}`;
  const path = `${conv}/turns/${encodeURIComponent(turnId)}`;
  const turn = await api("GET", path);
  const [calls, trace, links, totals] = await Promise.all([
    recordedCalls(path), optional(`${path}/trace`), optional(`${path}/links`), optional(`${path}/usage`),
  ]);
  const linkItems = links && Array.isArray(links.items) ? links.items : [];
  const moves = turn.moves || [];

  const edited = h("textarea", { id: "rerun-text", rows: "3" }, turn.input);
  async function fork(at, content) {
    try {
      const made = await api("POST", `${conv}/forks`, { turn_id: at });
      if (content) await api("POST", `/v1/conversations/${made.id}/messages`, { content });
      say(`Forked into ${made.id}.`);
      location.hash = `#/conversations/${made.id}`;
    } catch (e) { say(e.message, "error"); }
  }
  const running = turn.status === "active" || turn.status === "waiting";
  const forking = h("section", { class: "panel", "aria-labelledby": "fork-h" },
    h("h2", { id: "fork-h" }, "Fork"),
    h("button", { type: "button", disabled: running, onclick: () => fork(turn.id) }, "Fork at this turn"),
    turn.parent_turn_id ? h("form", { class: "rerun", onsubmit: (e) => { e.preventDefault(); fork(turn.parent_turn_id, edited.value.trim()); } },
      h("label", { for: "rerun-text" }, "Re-run this turn's message, edited, on a new branch"), edited,
      h("button", { type: "submit", disabled: running }, "Fork and re-run")) : h("p", { class: "hint" }, "The first turn of a conversation has no turn before it to re-run from."));

  const used = turn.model && turn.model.used;
  fill(main,
    h("p", { class: "crumbs" }, h("a", { href: `#/conversations/${conversationId}` }, `← ${conversationId}`)),
    h("h1", {}, `Turn ${turn.id}`),
    h("dl", { class: "facts" },
      h("dt", {}, "Status"), h("dd", {}, badge(turn.status), turn.failure_reason ? ` ${turn.failure_reason}` : ""),
      h("dt", {}, "Input"), h("dd", {}, turn.input),
      h("dt", {}, "Source"), h("dd", {}, turn.source || "human"),
      h("dt", {}, "Duration"), h("dd", {}, duration(turn.started_at || turn.created_at, turn.completed_at) || "running"),
      h("dt", {}, "Usage"), h("dd", {}, usageLine(turn.usage),
        totals && totals.calls ? ` · ${totals.calls} model call(s), ${totals.failed_calls} failed${totals.currency ? ` · cost ${totals.cost} ${totals.currency}` : ""}` : ""),
      h("dt", {}, "Model"), h("dd", {}, used ? `${used.provider}/${used.model} (${used.model_profile_id} v${used.model_profile_version})` : "the persona's profile"),
      h("dt", {}, "Replies to"), h("dd", {}, turn.parent_turn_id ? h("a", { href: `#/conversations/${conversationId}/turns/${turn.parent_turn_id}` }, turn.parent_turn_id) : "—"),
      turn.inherited_from ? [h("dt", {}, "Inherited from"), h("dd", {}, h("a", { href: `#/conversations/${turn.inherited_from}` }, turn.inherited_from))] : null),
    h("section", { class: "panel", "aria-labelledby": "moves-h" },
      h("h2", { id: "moves-h" }, `Moves (${moves.length})`),
      moves.length ? h("ol", { class: "moves" }, moves.map((m, i) => moveItem(m, i, i ? moves[i - 1].created_at : turn.started_at)))
        : h("p", { class: "empty" }, "No moves: the model answered without calling a tool.")),
    h("section", { class: "panel", "aria-labelledby": "calls-h", id: "model-calls" },
      h("h2", { id: "calls-h" }, "Model calls"),
      calls ? h("ol", { class: "calls" }, calls.map((c, i) => modelCall(c, i, path)))
        : h("p", { class: "empty", id: "no-calls" }, "No recorded model calls for this turn.")),
    h("section", { class: "panel", "aria-labelledby": "trace-h" },
      h("h2", { id: "trace-h" }, "Trace"),
      trace && trace.root ? waterfall(trace.root) : h("p", { class: "empty" }, "No recorded trace for this turn.")),
    h("section", { class: "panel", "aria-labelledby": "links-h" },
      h("h2", { id: "links-h" }, "What it caused"),
      linkItems.length ? h("ul", {}, linkItems.map((l) => {
        const href = LINK_TARGETS[l.kind] && LINK_TARGETS[l.kind](l);
        return h("li", {}, `${l.kind.replace("_", " ")}: `, href ? h("a", { href }, l.target_id) : l.target_id);
      })) : h("p", { class: "empty" }, "No recorded hook runs, workflow runs, delegations or memory writes.")),
    forking);
}
