// Differences between two texts, by line or by word (longest common subsequence), and their
// rendering with <del>/<ins> (what assistive technology announces as removed and inserted).
import { h } from "./dom.js";

/** A diff of two arrays: [[" ", item] | ["-", item] | ["+", item]]. */
export function sequenceDiff(x, y) {
  const n = x.length, m = y.length;
  const lcs = Array.from({ length: n + 1 }, () => new Int32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--)
    lcs[i][j] = x[i] === y[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
  const out = [];
  let i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && x[i] === y[j]) { out.push([" ", x[i]]); i++; j++; }
    else if (j < m && (i === n || lcs[i][j + 1] >= lcs[i + 1][j])) { out.push(["+", y[j]]); j++; }
    else { out.push(["-", x[i]]); i++; }
  }
  return out;
}

/** A line diff: [[" ", line] | ["-", line] | ["+", line]]. */
export function lineDiff(a, b) {
  return sequenceDiff(a.split("\n"), b.split("\n"));
}

/** A word diff (whitespace kept with the word before it). */
export function wordDiff(a, b) {
  const words = (s) => String(s || "").match(/\S+\s*|\s+/g) || [];
  return sequenceDiff(words(a), words(b));
}

/** A word diff shown inline: removed words struck (<del>), added ones marked (<ins>). */
export function inlineDiff(a, b, label) {
  const same = String(a || "") === String(b || "");
  return h("p", { class: `inline-diff${same ? " unchanged" : ""}`, "aria-label": label },
    same ? [h("span", { class: "hint" }, "same: "), String(a || "—")]
      : wordDiff(a, b).map(([op, w]) => (op === "+" ? h("ins", {}, w) : op === "-" ? h("del", {}, w) : w)));
}

/** A line diff in a <pre>, each line marked. */
export function linesDiff(a, b, label) {
  return h("pre", { class: "diff", tabindex: "0", "aria-label": label },
    lineDiff(a, b).map(([op, text]) =>
      op === "+" ? h("ins", { class: "add" }, `+ ${text}\n`)
        : op === "-" ? h("del", { class: "del" }, `- ${text}\n`)
          : h("span", { class: "same" }, `  ${text}\n`)));
}
