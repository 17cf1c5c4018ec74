// The library: personas, model profiles, tools, tasks and workflows; every version of one
// object, a line diff between two versions, and an editor whose validation errors show inline.
import { api, query } from "../api.js";
import { lineDiff } from "../diff.js";
import { field, fill, h, json, select, table } from "../dom.js";

export const KINDS = [
  ["personas", "Personas"], ["model-profiles", "Model profiles"], ["tools", "Tools"],
  ["tasks", "Tasks"], ["workflows", "Workflows"],
];

const pretty = (obj) => {
  const { created_at, version, ...rest } = obj; // what differs between versions by nature
  return JSON.stringify(rest, null, 2);
};

function diffView(a, b) {
  return h("pre", { class: "diff", tabindex: "0", "aria-label": `Changes from version ${a.version} to ${b.version}` },
    lineDiff(pretty(a), pretty(b)).map(([op, text]) =>
      h("span", { class: op === "+" ? "add" : op === "-" ? "del" : "same" }, `${op} ${text}\n`)));
}

async function objectView(main, kind, id, say) {
  const base = `/v1/${kind}/${encodeURIComponent(id)}`;
  const versions = (await api("GET", `${base}/versions`)).items;
  const latest = versions[versions.length - 1];
  const options = versions.map((v) => [String(v.version), `v${v.version}`]);
  const from = select(options, String(versions.length > 1 ? versions[versions.length - 2].version : latest.version), { id: "diff-from" });
  const to = select(options, String(latest.version), { id: "diff-to" });
  const out = h("div", { id: "diff-out" });
  const byVersion = (v) => versions.find((x) => String(x.version) === v);
  const showDiff = () => fill(out, diffView(byVersion(from.value), byVersion(to.value)));
  from.addEventListener("change", showDiff);
  to.addEventListener("change", showDiff);

  const editable = latest.owner !== "system";
  const { created_at, version, owner, id: _id, ...body } = latest;
  const editor = h("textarea", { id: "editor", rows: "14", spellcheck: "false" }, JSON.stringify(body, null, 2));
  const problems = h("div", { id: "editor-errors", role: "alert" });
  const save = async (e) => {
    e.preventDefault();
    let parsed;
    try { parsed = JSON.parse(editor.value); } catch (err) {
      fill(problems, h("p", { class: "error" }, `Not JSON: ${err.message}`));
      return;
    }
    try {
      const stored = await api("PUT", base, parsed);
      say(`Stored version ${stored.version}.`);
      await objectView(main, kind, id, say);
    } catch (err) {
      fill(problems, h("p", { class: "error" }, err.message));
    }
  };

  fill(main,
    h("p", { class: "crumbs" }, h("a", { href: `#/library/${kind}` }, `← ${KINDS.find(([k]) => k === kind)?.[1] || kind}`)),
    h("h1", {}, id),
    h("p", { class: "meta" }, `${versions.length} version(s), owner ${latest.owner || "you"}`),
    table("Versions", ["Version", "Lines changed from the one before"], versions.map((v, i) => [`v${v.version}`,
      i ? String(lineDiff(pretty(versions[i - 1]), pretty(v)).filter(([op]) => op !== " ").length) : "—"])),
    h("section", { class: "panel", "aria-labelledby": "latest-h" }, h("h2", { id: "latest-h" }, `Version ${latest.version}`), json(latest, "Latest version")),
    h("section", { class: "panel", "aria-labelledby": "diff-h" }, h("h2", { id: "diff-h" }, "Compare versions"),
      h("div", { class: "inline" }, field("From", from), field("To", to)), out),
    editable ? h("section", { class: "panel", "aria-labelledby": "edit-h" }, h("h2", { id: "edit-h" }, "Edit (stores a new version)"),
      h("form", { onsubmit: save }, h("label", { for: "editor" }, "Fields as JSON"), editor, problems, h("button", { type: "submit" }, "Save")))
      : h("p", { class: "hint" }, "The system library's objects are read-only here: store your own under another id."));
  showDiff();
}

export async function render(main, { kind, id }, { say }) {
  kind = kind || "personas";
  if (!KINDS.some(([k]) => k === kind)) throw new Error(`no library kind ${kind}`);
  if (id) return objectView(main, kind, id, say);
  const items = (await api("GET", `/v1/${kind}${query({})}`)).items;
  fill(main,
    h("h1", {}, "Library"),
    h("nav", { "aria-label": "Library kinds", class: "tabs" }, h("ul", {}, KINDS.map(([k, label]) =>
      h("li", {}, h("a", { href: `#/library/${k}`, "aria-current": k === kind ? "page" : null }, label))))),
    table(`${KINDS.find(([k]) => k === kind)[1]}: ${items.length}`, ["Id", "Latest version", "Owner"],
      items.map((o) => [h("a", { href: `#/library/${kind}/${encodeURIComponent(o.id)}` }, o.id), `v${o.version}`, o.owner || ""])));
}
