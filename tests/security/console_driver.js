// Runs the web console's own script (read from stdin, as the gateway serves it) under Node with
// just enough of a browser around it: a page of stub elements, and fetch / WebSocket that record
// every URL the console asks for. fetch is Node's real one, sent to the real gateway; a WebSocket
// is only recorded (Node 20 has none), and the test opens that URL itself.
// Usage: node console_driver.js GATEWAY_URL API_KEY < script.js  → JSON on stdout.
"use strict";
const fs = require("fs");
const vm = require("vm");

const [, , base, apiKey] = process.argv;
const script = fs.readFileSync(0, "utf8");
const requested = [];

class Element {
  constructor(id) {
    Object.assign(this, { id, value: "", checked: false, textContent: "", innerHTML: "" });
    Object.assign(this, { className: "", scrollTop: 0, scrollHeight: 0, children: [], options: [] });
  }
  appendChild(child) { this.children.push(child); return child; }
  add(option) { this.options.push(option); if (!this.value) this.value = option.value; }
}
const elements = {};
const page = (id) => (elements[id] = elements[id] || new Element(id));
const where = new URL(base);

Object.assign(globalThis, {
  document: { getElementById: page, createElement: (tag) => new Element(tag) },
  Option: class { constructor(text, value) { this.text = text; this.value = value; } },
  localStorage: { getItem: () => null, setItem: () => {} },
  location: { protocol: where.protocol, host: where.host },
});
const realFetch = globalThis.fetch;
globalThis.fetch = (path, init) => {
  const url = new URL(path, base).toString();
  requested.push({ kind: "fetch", url });
  return realFetch(url, init);
};
globalThis.WebSocket = class {
  constructor(url) { requested.push({ kind: "websocket", url }); this.readyState = 0; }
  send() {}
  close() {}
};

(async () => {
  vm.runInThisContext(script);
  page("key").value = apiKey; // the user pastes the key
  await page("load").onclick(); // "Load agents"
  await page("start").onclick(); // "New conversation": creates it, then opens its stream
  const log = page("log").children.map((line) => line.textContent);
  process.stdout.write(JSON.stringify({ requested, log }));
})().catch((error) => { console.error(error); process.exit(1); });
