/* Message text as Markdown, built as DOM nodes (never parsed as HTML).
 *
 * Message text is Markdown more often than not. It is drawn here with createElement and
 * text nodes only: raw HTML in a body stays visible text (never parsed), entities are not
 * decoded, a link is a link only to http(s) or mailto (anything else, javascript: and
 * data: included, is shown as text), and an image is never loaded (its link is shown).
 */

import { add, h } from "./common.js";

const MD_MAX_CHARS = 100000;  // longer text is shown as it is
const SAFE_URL = /^(?:https?:\/\/|mailto:)[^\s\u0000-\u001f\u007f<>"'`\\]+$/i;
const INLINE = [
  ["code", /`([^`\n]+)`/],
  ["link", /(!?)\[([^\]\n]{0,500})\]\(\s*<?([^\s()<>]*(?:\([^\s()<>]*\)[^\s()<>]*)*)>?(?:\s+"[^"\n]*")?\s*\)/],
  ["auto", /<((?:https?:\/\/|mailto:)[^\s<>]+)>/],
  ["url", /\bhttps?:\/\/[^\s<>()"'`]*[^\s<>()"'`.,;:!?*_~]/],
  ["strong", /\*\*(?=\S)([\s\S]*?\S)\*\*|__(?=\S)([\s\S]*?\S)__/],
  ["del", /~~(?=\S)([\s\S]*?\S)~~/],
  ["em", /\*(?=[^\s*])([^*\n]*?[^\s*])\*|(?:^|(?<=[\s(]))_(?=\S)([^_\n]*?\S)_(?![A-Za-z0-9])/],
];

function safeLink(url, text) {
  var u = String(url || "").trim();
  if (!SAFE_URL.test(u)) return null;
  return h("a", { href: u, rel: "noopener noreferrer nofollow", target: "_blank", referrerpolicy: "no-referrer" }, text);
}

function mdInline(text, depth) {
  var out = [];
  var rest = String(text);
  while (rest) {
    var best = null;
    if (depth < 4) {
      INLINE.forEach(function (p) {
        var m = p[1].exec(rest);
        if (m && (!best || m.index < best.m.index)) best = { kind: p[0], m: m };
      });
    }
    if (!best) { out.push(rest); break; }
    var m = best.m;
    if (m.index) out.push(rest.slice(0, m.index));
    rest = rest.slice(m.index + m[0].length);
    if (best.kind === "code") out.push(h("code", null, m[1]));
    else if (best.kind === "link") {
      var label = m[2], url = m[3];
      if (m[1]) {
        // An image: never loaded, shown as its link.
        out.push(safeLink(url, "image: " + (label || url)) || m[0]);
      } else {
        var a = safeLink(url, null);
        if (a) { add(a, mdInline(label || url, depth + 1)); out.push(a); }
        else out.push(m[0]);  // an unsafe link stays text, whole, so it can be read
      }
    } else if (best.kind === "auto" || best.kind === "url") {
      var target = best.kind === "auto" ? m[1] : m[0];
      out.push(safeLink(target, target) || m[0]);
    } else if (best.kind === "strong") out.push(h("strong", null, mdInline(m[1] || m[2], depth + 1)));
    else if (best.kind === "del") out.push(h("del", null, mdInline(m[1], depth + 1)));
    else out.push(h("em", null, mdInline(m[1] || m[2], depth + 1)));
  }
  return out;
}

function mdBlocks(lines, depth) {
  var out = [], i = 0, para = [];
  function flush() {
    if (para.length) out.push(h("p", null, mdInline(para.join("\n"), 0)));
    para = [];
  }
  while (i < lines.length) {
    var line = lines[i], m;
    if (/^\s*$/.test(line)) { flush(); i++; continue; }
    if ((m = /^\s{0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/.exec(line))) {
      flush();
      var fence = m[1], code = [];
      for (i++; i < lines.length && lines[i].trim().indexOf(fence) !== 0; i++) code.push(lines[i]);
      i++;
      out.push(h("pre", { class: "text md-code", "data-lang": m[2] || null }, h("code", null, code.join("\n"))));
      continue;
    }
    if ((m = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/.exec(line))) {
      flush();
      out.push(h("h" + Math.min(6, m[1].length + 2), { class: "md-h" }, mdInline(m[2], 0)));
      i++; continue;
    }
    if (/^\s{0,3}([-*_])(\s*\1){2,}\s*$/.test(line)) { flush(); out.push(h("hr")); i++; continue; }
    if (/^\s{0,3}>/.test(line) && depth < 4) {
      flush();
      var quoted = [];
      for (; i < lines.length && /^\s{0,3}>/.test(lines[i]); i++) quoted.push(lines[i].replace(/^\s{0,3}>\s?/, ""));
      out.push(h("blockquote", null, mdBlocks(quoted, depth + 1)));
      continue;
    }
    var bullet = /^\s*([-*+]|\d{1,9}[.)])\s+(.*)$/.exec(line);
    if (bullet) {
      flush();
      var ordered = /\d/.test(bullet[1]);
      var items = [];
      for (; i < lines.length; i++) {
        var b = /^\s*([-*+]|\d{1,9}[.)])\s+(.*)$/.exec(lines[i]);
        if (b && /\d/.test(b[1]) === ordered) items.push([b[2]]);
        else if (items.length && /^\s{2,}\S/.test(lines[i])) items[items.length - 1].push(lines[i].trim());
        else break;
      }
      var start = ordered ? parseInt(bullet[1], 10) : null;
      out.push(h(ordered ? "ol" : "ul", ordered && start !== 1 ? { start: start } : null,
        items.map(function (it) { return h("li", null, mdInline(it.join("\n"), 0)); })));
      continue;
    }
    if (/\|/.test(line) && i + 1 < lines.length && /^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$/.test(lines[i + 1])) {
      flush();
      var cells = function (l) { return l.trim().replace(/^\|/, "").replace(/\|$/, "").split("|").map(function (c) { return c.trim(); }); };
      var head = cells(line), body = [];
      for (i += 2; i < lines.length && /\|/.test(lines[i]) && lines[i].trim(); i++) body.push(cells(lines[i]));
      out.push(h("table", { class: "md-table" },
        h("thead", null, h("tr", null, head.map(function (c) { return h("th", null, mdInline(c, 0)); }))),
        h("tbody", null, body.map(function (r) { return h("tr", null, r.map(function (c) { return h("td", null, mdInline(c, 0)); })); }))));
      continue;
    }
    para.push(line);
    i++;
  }
  flush();
  return out;
}

// Text as Markdown (see above); text too long to parse cheaply is shown as it is.
export function markdown(text) {
  var s = String(text);
  if (s.length > MD_MAX_CHARS) return h("pre", { class: "text" }, s);
  return h("div", { class: "md" }, mdBlocks(s.replace(/\r\n?/g, "\n").split("\n"), 0));
}
