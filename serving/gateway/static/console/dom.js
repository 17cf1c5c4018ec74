// Building the page: elements from data, never HTML from strings (text is always textContent).

/** h("a", {href: "#/x", class: "y"}, "text", child, …): an element. `on*` attributes bind handlers. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name === "class") el.className = value;
    else if (name === "dataset") Object.assign(el.dataset, value);
    else if (value === true) el.setAttribute(name, "");
    else el.setAttribute(name, String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replace what `el` holds. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** A JSON value, pretty, in a <pre> (scrollable and focusable when long). */
export function json(value, label) {
  const text = typeof value === "string" ? value : JSON.stringify(value, null, 2);
  return h("pre", { class: "json", tabindex: "0", "aria-label": label || "JSON" }, text ?? "null");
}

export function when(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso) : d.toLocaleString();
}

/** Seconds between two ISO times, "" when either is missing. */
export function duration(from, to) {
  if (!from || !to) return "";
  const s = (new Date(to) - new Date(from)) / 1000;
  return s < 1 ? `${Math.round(s * 1000)} ms` : `${s.toFixed(2)} s`;
}

export function badge(status) {
  return h("span", { class: `badge badge-${String(status).replace(/[^a-z_.-]/gi, "")}` }, status);
}

export function table(caption, headers, rows) {
  return h("table", {},
    h("caption", {}, caption),
    h("thead", {}, h("tr", {}, headers.map((x) => h("th", { scope: "col" }, x)))),
    h("tbody", {}, rows.length ? rows.map((r) => h("tr", {}, r.map((c) => h("td", {}, c))))
      : h("tr", {}, h("td", { colspan: headers.length, class: "empty" }, "Nothing here yet."))));
}

/** A labelled form control: field("Agent", select). */
export function field(label, control) {
  const id = control.id || `f-${Math.random().toString(36).slice(2, 9)}`;
  control.id = id;
  return h("span", { class: "field" }, h("label", { for: id }, label), control);
}

export function select(options, value, attrs = {}) {
  const el = h("select", attrs, options.map(([v, text]) => h("option", { value: v }, text)));
  if (value !== undefined) el.value = value;
  return el;
}
