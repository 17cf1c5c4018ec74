// Who may do what: the client's API keys (list, create: the secret shown once, on this page only;
// revoke; rotate) and one conversation's members (grant a level, revoke). Keys need an admin-scope
// key; a secret is never put in an address.
import { api } from "../api.js";
import { badge, field, fill, h, select, table, when } from "../dom.js";

export async function renderKeys(main, _args, { say }) {
  const list = h("div", { id: "key-list" });
  const secret = h("div", { id: "new-secret", "aria-live": "polite" });
  async function load() {
    const keys = (await api("GET", "/v1/keys")).items;
    fill(list, table(`${keys.length} keys`, ["Name", "Id", "Scope", "Status", "Created", "Expires", ""],
      keys.map((k) => [k.name || "—", k.id, k.scope, badge(k.status), when(k.created_at), k.expires_at ? when(k.expires_at) : "never",
        k.status === "active" ? h("span", { class: "actions" },
          h("button", { type: "button", class: "small", "aria-label": `Rotate key ${k.name || k.id}`, onclick: async () => {
            try { show(await api("POST", `/v1/keys/${k.id}/rotate`, { grace_s: 0 }), "rotated"); await load(); } catch (e) { say(e.message, "error"); }
          } }, "Rotate"), " ",
          h("button", { type: "button", class: "danger small", "aria-label": `Revoke key ${k.name || k.id}`, onclick: async () => {
            if (!confirm(`Revoke ${k.name || k.id}? It stops working at once.`)) return;
            try { await api("POST", `/v1/keys/${k.id}/revoke`); say("Key revoked."); await load(); } catch (e) { say(e.message, "error"); }
          } }, "Revoke")) : ""])));
  }
  function show(made, what) {
    const value = h("input", { type: "text", readonly: true, value: made.api_key, id: "secret-value", class: "secret", spellcheck: "false" });
    fill(secret, h("div", { class: "panel notice-info", role: "status" },
      h("p", {}, `Key ${made.key.name || made.key.id} ${what}. Its secret, shown this once (copy it now):`),
      h("label", { for: "secret-value", class: "visually-hidden" }, "The new key's secret"), value));
  }
  const name = h("input", { name: "key-name", required: true, maxlength: "100" });
  const scope = select([["app", "app: conversations, agents, the rest"], ["admin", "admin: also keys and the library"]], "app", { name: "key-scope" });
  const form = h("form", { class: "filters", onsubmit: async (e) => {
    e.preventDefault();
    try { show(await api("POST", "/v1/keys", { name: name.value.trim(), scope: scope.value }), "created"); name.value = ""; await load(); } catch (err) { say(err.message, "error"); }
  } }, field("Name", name), field("Scope", scope), h("button", { type: "submit" }, "Create key"));
  fill(main, h("h1", {}, "API keys"),
    h("p", { class: "hint" }, "A key's secret is shown once, when it is made: it is never listed again."),
    h("section", { class: "panel", "aria-labelledby": "new-key-h" }, h("h2", { id: "new-key-h" }, "New key"), form, secret),
    h("section", { class: "panel", "aria-labelledby": "keys-h" }, h("h2", { id: "keys-h" }, "Keys"), list));
  await load();
}

export async function renderMembers(main, { conversationId }, { say }) {
  const path = `/v1/conversations/${encodeURIComponent(conversationId)}/members`;
  const list = h("div", { id: "member-list" });
  const levels = [["reader", "reader"], ["writer", "writer"], ["manager", "manager"], ["owner", "owner"]];
  async function load() {
    const members = (await api("GET", path)).items;
    fill(list, table(`${members.length} members`, ["User", "Level", "Granted", "By", ""],
      members.map((m) => [m.user_id, m.level, when(m.granted_at), m.granted_by || "the client",
        h("button", { type: "button", class: "danger small", "aria-label": `Revoke ${m.user_id}`, onclick: async () => {
          try { await api("DELETE", `${path}/${encodeURIComponent(m.user_id)}`); say(`${m.user_id} revoked.`); await load(); } catch (e) { say(e.message, "error"); }
        } }, "Revoke")])));
  }
  const user = h("input", { name: "member-user", required: true, maxlength: "200" });
  const level = select(levels, "reader", { name: "member-level" });
  const form = h("form", { class: "filters", onsubmit: async (e) => {
    e.preventDefault();
    try { await api("PUT", `${path}/${encodeURIComponent(user.value.trim())}`, { level: level.value }); say(`${user.value.trim()} is now ${level.value}.`); user.value = ""; await load(); } catch (err) { say(err.message, "error"); }
  } }, field("User", user), field("Level", level), h("button", { type: "submit" }, "Grant"));
  fill(main,
    h("p", { class: "crumbs" }, h("a", { href: `#/conversations/${conversationId}` }, `← ${conversationId}`)),
    h("h1", {}, `Members of ${conversationId}`),
    h("p", { class: "hint" }, "Members are your app's users (X-Wonder-User): each level includes the ones below (reader, writer, manager, owner)."),
    h("section", { class: "panel", "aria-labelledby": "grant-h" }, h("h2", { id: "grant-h" }, "Grant"), form),
    h("section", { class: "panel", "aria-labelledby": "members-h" }, h("h2", { id: "members-h" }, "Members"), list));
  await load();
}
