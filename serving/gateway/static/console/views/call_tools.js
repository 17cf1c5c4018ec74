// Two tools on a recorded model call, in the turn inspector: its context window (each part of
// the request with its tokens against the model's window: counted by the local model's own
// tokenizer, else estimated) and the playground (the same request sent to another model profile,
// its answer beside the recorded one).
import { api } from "../api.js";
import { inlineDiff } from "../diff.js";
import { fill, h, json, select } from "../dom.js";

let profilesLoaded = null; // one listing per page view: every call's form offers the same profiles

function profiles() {
  profilesLoaded = profilesLoaded || api("GET", "/v1/model-profiles").then((page) => page.items);
  return profilesLoaded;
}

function share(tokens, of) {
  return of ? `${((100 * tokens) / of).toFixed(1)}%` : "—";
}

/** How the context window's tokens were counted, in words (exact, or estimated and why). */
export function countedBy(cw) {
  if (cw.counted_by === "tokenizer") {
    return { exact: true, text: `${cw.total_tokens} tokens, counted by the tokenizer and chat template of ${cw.tokenizer}. ` };
  }
  const why = cw.count_note ? `: ${cw.count_note}` : "";
  return { exact: false, text: `≈ ${cw.total_tokens} tokens, estimated (about four characters a token${why}). ` };
}

function contextTable(cw, n) {
  const of = cw.window;
  const counted = countedBy(cw);
  const bar = (tokens) => {
    const b = h("span", { class: "bar bar-ok" });
    b.style.width = `${Math.min(100, (100 * tokens) / Math.max(1, of || cw.total_tokens))}%`;
    return h("span", { class: "track", "aria-hidden": "true" }, b);
  };
  return h("div", { class: "context-window", dataset: { countedBy: cw.counted_by } },
    h("p", { class: "hint", id: `cw-note-${n}` },
      counted.text,
      cw.reported_prompt_tokens !== null && cw.reported_prompt_tokens !== undefined ? `The model counted ${cw.reported_prompt_tokens} prompt tokens. ` : "",
      of ? `Window: ${of} tokens; ${share(cw.reported_prompt_tokens ?? cw.total_tokens, of)} used before the answer` : "Window: not stated by the deployment",
      cw.max_tokens ? ` (the answer may take up to ${cw.max_tokens} more).` : "."),
    h("table", { class: "cw-table" },
      h("caption", {}, `Context window of call ${n}`),
      h("thead", {}, h("tr", {}, ["Part", "Items", counted.exact ? "Tokens" : "Tokens (estimated)", "Of the window", ""].map((x, i) => h("th", { scope: "col" }, i === 4 ? h("span", { class: "visually-hidden" }, "Bar") : x)))),
      h("tbody", {}, cw.sections.map((s) => h("tr", { dataset: { section: s.name } },
        h("th", { scope: "row" }, s.label), h("td", {}, String(s.items)), h("td", { class: "tokens" }, String(s.tokens)),
        h("td", {}, share(s.tokens, of)), h("td", { class: "cw-bar" }, bar(s.tokens)))))),
    cw.sections.filter((s) => s.text).map((s) => h("details", {}, h("summary", {}, `${s.label}: as sent`),
      h("pre", { class: "json", tabindex: "0", "aria-label": `${s.label} of call ${n}` }, s.text))));
}

function answer(title, response, usage, extra) {
  const r = response || {};
  return h("div", { class: "side" },
    h("h5", {}, title),
    h("p", { class: "text" }, r.content || (r.tool_calls && r.tool_calls.length ? "" : "—")),
    r.tool_calls && r.tool_calls.length ? json(r.tool_calls.map((c) => ({ name: c.name, arguments: c.arguments })), `${title}: tool calls`) : null,
    h("p", { class: "hint" }, `${usage?.prompt_tokens ?? 0} prompt + ${usage?.completion_tokens ?? 0} completion tokens`,
      r.finish_reason ? ` · finish: ${r.finish_reason}` : "", extra || ""));
}

/** The context window and playground controls of recorded call `call` (the n-th of the turn). */
export function callTools(path, call, n) {
  const callPath = `${path}/calls/${encodeURIComponent(call.id)}`;
  const cwOut = h("div", { class: "cw-out", "aria-live": "polite" });
  const cwButton = h("button", { type: "button", "aria-expanded": "false", onclick: async () => {
    if (cwButton.getAttribute("aria-expanded") === "true") {
      fill(cwOut); cwButton.setAttribute("aria-expanded", "false"); return;
    }
    try {
      fill(cwOut, contextTable(await api("GET", `${callPath}/context`), n));
      cwButton.setAttribute("aria-expanded", "true");
    } catch (e) { fill(cwOut, h("p", { class: "error", role: "alert" }, e.message)); }
  } }, `Context window of call ${n}`);

  const chooser = select([], undefined, { id: `replay-profile-${n}`, name: "replay-profile" });
  const out = h("div", { class: "replay-out", "aria-live": "polite" });
  const run = h("button", { type: "submit" }, "Replay");
  const form = h("form", { class: "replay", onsubmit: async (e) => {
    e.preventDefault();
    run.disabled = true;
    fill(out, h("p", { class: "loading" }, "Asking the model…"));
    try {
      const r = await api("POST", `${callPath}/replay`, { model_profile: chooser.value });
      fill(out,
        h("div", { class: "pair replay-pair" },
          answer(`Recorded: ${call.provider}/${call.model}`, r.original, r.original_usage),
          answer(`Replay: ${r.model_profile_id} v${r.model_profile_version} (${r.provider}/${r.model})`, r.response, r.usage,
            ` · ${r.duration_s.toFixed(3)} s`)),
        r.error ? h("p", { class: "error" }, `${r.error.code}: ${r.error.message}`) : null,
        h("h5", {}, "What changed in the text"),
        inlineDiff(r.original?.content, r.response.content, `Text: recorded to replay, call ${n}`),
        h("p", { class: "hint" }, "Not written to the conversation: the replay is shown here only."));
    } catch (err) {
      fill(out, h("p", { class: "error", role: "alert" }, err.message));
    } finally { run.disabled = false; }
  } },
  h("label", { for: chooser.id }, `Replay call ${n} with the model profile`), " ", chooser, " ", run);
  profiles().then((items) => {
    for (const p of items) chooser.append(h("option", { value: p.id }, `${p.id} (${p.provider}/${p.model})`));
  }).catch((e) => fill(out, h("p", { class: "error" }, e.message)));

  return h("div", { class: "call-tools" }, cwButton, cwOut, call.request || call.request_ref ? form : null, out);
}
