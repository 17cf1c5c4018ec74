// The console's shell: the key form, the navigation, and a hash router (#/conversations/…):
// a view's address names only ids, never the key.
import { currentKey, forgetKey, setKey } from "./api.js";
import { fill, h } from "./dom.js";
import * as conversations from "./views/conversations.js";
import * as conversation from "./views/conversation.js";
import * as turn from "./views/turn.js";
import * as compare from "./views/compare.js";
import * as memories from "./views/memories.js";
import * as library from "./views/library.js";
import * as workflows from "./views/workflows.js";
import * as operations from "./views/operations.js";
import { renderKeys, renderMembers } from "./views/access.js";

const ROUTES = [
  [/^conversations\/([^/]+)\/turns\/([^/]+)$/, turn, ["conversationId", "turnId"]],
  [/^conversations\/([^/]+)\/compare$/, compare, ["conversationId"]],
  [/^conversations\/([^/]+)\/members$/, { render: renderMembers }, ["conversationId"]],
  [/^conversations\/([^/]+)$/, conversation, ["conversationId"]],
  [/^(?:conversations)?$/, conversations, []],
  [/^memories$/, memories, []],
  [/^library(?:\/([^/]+))?(?:\/([^/]+))?$/, library, ["kind", "id"]],
  [/^workflows(?:\/runs\/([^/]+))?$/, workflows, ["runId"]],
  [/^operations$/, operations, []],
  [/^keys$/, { render: renderKeys }, []],
];

const main = document.getElementById("main");
const notice = document.getElementById("notice");
let cleanup = null;

/** Say something in the live region (errors too: they are read out, and stay visible). */
export function say(text, kind = "info") {
  notice.textContent = text;
  notice.className = `notice notice-${kind}`;
}

function parse() {
  const [path, search] = location.hash.replace(/^#\/?/, "").split("?");
  return { path: path.replace(/\/$/, ""), params: new URLSearchParams(search || "") };
}

let generation = 0; // the latest navigation: a slower, older one must not paint over it

async function route() {
  const mine = ++generation;
  if (cleanup) { cleanup(); cleanup = null; }
  const { path, params } = parse();
  const top = path.split("/")[0] || "conversations";
  for (const link of document.querySelectorAll("nav a[data-view]")) {
    if (link.dataset.view === top) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (!currentKey()) return; // the welcome text stays until a key is given
  for (const [pattern, view, names] of ROUTES) {
    const m = path.match(pattern);
    if (!m) continue;
    const args = Object.fromEntries(names.map((n, i) => [n, m[i + 1] && decodeURIComponent(m[i + 1])]));
    fill(main, h("p", { class: "loading" }, "Loading…"));
    main.setAttribute("aria-busy", "true");
    // The view renders off the page and is shown only if it is still the one asked for.
    const container = h("div", { class: "view" });
    let done = null;
    try {
      done = (await view.render(container, { ...args, params }, { say })) || null;
    } catch (e) {
      fill(container, h("h1", {}, "Something went wrong"), h("p", { class: "error", role: "alert" }, String(e.message || e)));
    }
    if (mine !== generation) {
      if (done) done();
      return;
    }
    cleanup = done;
    fill(main, container);
    main.dataset.route = location.hash; // which view is shown (tests wait on it)
    main.removeAttribute("aria-busy");
    document.title = `${main.querySelector("h1")?.textContent || "Wonder"} · Wonder console`;
    return;
  }
  fill(main, h("h1", {}, "Not found"), h("p", {}, "No view at this address. ", h("a", { href: "#/conversations" }, "Conversations")));
}

document.getElementById("key").value = currentKey();
document.getElementById("remember").checked = Boolean(localStorage.getItem("wonder_key"));
document.getElementById("key-form").addEventListener("submit", (e) => {
  e.preventDefault();
  setKey(document.getElementById("key").value, document.getElementById("remember").checked);
  say("Key set.");
  route();
});
document.getElementById("forget").addEventListener("click", () => {
  forgetKey();
  document.getElementById("key").value = "";
  say("Key forgotten.");
  location.reload();
});
// A keyboard user who follows a link lands in the new view, not back at the top of the page.
document.addEventListener("click", (e) => {
  if (e.target.closest && e.target.closest("main a[href^='#/'], nav a")) setTimeout(() => main.focus(), 0);
});
window.addEventListener("hashchange", route);
route();
