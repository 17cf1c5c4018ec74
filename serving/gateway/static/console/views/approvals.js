// Tool calls waiting for a person's approval (GET …/approvals), each with its tool, its arguments
// as editable JSON and three decisions: Approve (as the model asked), Edit & approve (with the
// arguments as edited; the tool's schema must hold), Deny (the model hears it, with the reason).
// Shown in the chat and in the turn inspector; plain buttons and labelled fields, so every
// decision is reachable with the keyboard.
import { api } from "../api.js";
import { fill, h, when } from "../dom.js";

function timeoutNote(a) {
  const then = a.on_timeout === "approve" ? "approved" : "denied";
  return `Waits until ${when(a.expires_at)} (${a.timeout_s} s), then it is ${then}.`;
}

/** The panel of `conversationId`'s waiting calls (of `turnId` only, when given). */
export function approvalsPanel(conversationId, { say, turnId = null, decided = () => {} }) {
  const path = `/v1/conversations/${encodeURIComponent(conversationId)}/approvals`;
  const list = h("div", { class: "approvals-list", "aria-live": "polite" });
  const panel = h("section", { class: "panel approvals", id: "approvals", "aria-labelledby": "approvals-h" },
    h("h2", { id: "approvals-h" }, "Waiting for approval"), list);

  function card(a) {
    const id = a.approval_id.replace(/[^A-Za-z0-9_-]/g, "");
    const args = h("textarea", { id: `args-${id}`, class: "json-edit", rows: "5", spellcheck: "false" },
      JSON.stringify(a.arguments, null, 2));
    const reason = h("input", { id: `reason-${id}`, type: "text", maxlength: "500" });
    const problem = h("p", { class: "error", id: `problem-${id}`, role: "alert" });
    args.setAttribute("aria-describedby", problem.id);
    async function decide(decision) {
      const body = { decision };
      if (decision === "edit") {
        try {
          body.arguments = JSON.parse(args.value);
        } catch (e) {
          problem.textContent = `The arguments are not valid JSON: ${e.message}`;
          args.focus();
          return;
        }
      }
      if (reason.value.trim()) body.reason = reason.value.trim();
      try {
        await api("POST", `${path}/${encodeURIComponent(a.approval_id)}`, body);
        say(`${a.tool}: ${decision === "deny" ? "denied" : "approved"}.`);
        await refresh();
        decided(a, decision);
      } catch (e) {
        problem.textContent = e.message;
      }
    }
    return h("article", { class: "approval", dataset: { approval: a.approval_id }, "aria-labelledby": `h-${id}` },
      h("h3", { id: `h-${id}` }, `${a.tool} waits for approval`),
      h("p", { class: "hint" },
        h("a", { href: `#/conversations/${conversationId}/turns/${a.turn_id}` }, `turn ${a.turn_id}`),
        ` · requested ${when(a.requested_at)}. ${timeoutNote(a)}`),
      h("label", { for: args.id }, `Arguments of ${a.tool} (JSON; edit, then Edit & approve)`), args,
      h("label", { for: reason.id }, "Reason (optional; the model hears a denial's)"), reason,
      problem,
      h("div", { class: "actions" },
        h("button", { type: "button", onclick: () => decide("approve") }, "Approve"),
        h("button", { type: "button", onclick: () => decide("edit") }, "Edit & approve"),
        h("button", { type: "button", class: "danger", onclick: () => decide("deny") }, "Deny")));
  }

  async function refresh() {
    try {
      const { items } = await api("GET", path);
      const shown = turnId ? items.filter((a) => a.turn_id === turnId) : items;
      panel.dataset.pending = String(shown.length);
      fill(list, shown.length ? shown.map(card) : h("p", { class: "empty" }, "No tool call waits for approval."));
    } catch (e) {
      say(e.message, "error");
    }
  }

  return { panel, refresh };
}
