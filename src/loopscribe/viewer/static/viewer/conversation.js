/* The conversation on the session page: messages as the agent saw them, tool calls
 * and results folded, subagents' threads nested, each item linked to its record and bar.
 */

import { chip, clean, enc, fill, getJSON, h, num, REPORT } from "./common.js";
import { Ctx, renderError, renderProse, renderString, renderUsage, renderValue } from "./record.js";

function blank(text) { return !String(text === null || text === undefined ? "" : text).trim(); }

function blockType(b) { return b && typeof b === "object" && !Array.isArray(b) ? (b.$ls || b.type) : null; }

export function Conversation(sid, data) {
  this.sid = sid;
  this.el = h("div", { class: "convo", role: "log", "aria-label": "conversation" });
  this.stack = [{ thread: null, el: this.el }];
  this.calls = {};    // tool call ids already shown (in a message or as a call)
  this.results = {};  // tool call ids whose result was shown
  this.moreEl = h("div", { class: "convo-more" });
  this.root = h("div", null, this.el, this.moreEl);
  this.add(data);
  if (!this.el.firstChild && (data.next === null || data.next === undefined)) {
    this.el.appendChild(h("p", { class: "note" }, "No messages or tool calls recorded in this session."));
  }
}

Conversation.prototype.add = function (data) {
  var self = this;
  data.items.forEach(function (item) { self.item(item); });
  if (data.next !== null && data.next !== undefined && !REPORT) {
    fill(this.moreEl, h("button", { class: "more", type: "button", onclick: function (ev) {
      ev.target.disabled = true; ev.target.textContent = "loading…";
      getJSON("/api/session/" + enc(self.sid) + "/conversation?from=" + data.next).then(function (res) { self.add(res); })
        .catch(function (err) { fill(self.moreEl, h("div", { class: "error-box" }, "could not load more: " + err.message)); });
    } }, "load more of the conversation (record " + num(data.next) + " of " + num(data.records) + ")"));
  } else fill(this.moreEl);
};

// The container an item goes into: its subagent's thread, nested as deep as it is.
Conversation.prototype.container = function (item) {
  var depth = item.depth || 0;
  while (this.stack.length - 1 > depth) this.stack.pop();
  if (depth > 0 && this.stack[this.stack.length - 1].thread !== item.thread) {
    if (this.stack.length - 1 === depth) this.stack.pop();
    while (this.stack.length - 1 < depth) {
      var parent = this.stack[this.stack.length - 1].el;
      var body = h("div", { class: "thread-body" });
      var name = item.thread_agent || item.thread;
      var th = h("details", { class: "thread", open: true, "data-thread": item.thread },
        h("summary", null, h("span", { class: "kind k-agent" }, "subagent"), " ", name,
          h("span", { class: "tag" }, "  " + item.thread)), body);
      parent.appendChild(th);
      this.stack.push({ thread: item.thread, el: body });
    }
  }
  return this.stack[this.stack.length - 1].el;
};

Conversation.prototype.links = function (item) {
  if (REPORT) return null;
  return h("span", { class: "ci-links" },
    h("a", { href: "/session/" + enc(this.sid) + "/record/" + item.seq, title: "record " + item.seq + " (" + item.type + ")" }, "#" + item.seq),
    item.run_id && item.span_id ? h("a", { href: "/session/" + enc(this.sid) + "/run/" + enc(item.run_id) + "?span=" + item.span_id,
      class: "to-timeline", title: "this item's bar on the run's timeline" }, "timeline") : null);
};

Conversation.prototype.item = function (item) {
  var ctx = new Ctx({ seq: item.seq, cuts: (item.cuts || []).map(function (c) { return Object.assign({}, c, { path: ["body"].concat(c.path) }); }) }, null);
  var el = null, body = item.body;
  if (item.kind === "message") el = this.message(item, body, ctx);
  else if (item.kind === "tool_call") {
    if (item.call_id && this.calls[item.call_id]) return;
    this.calls[item.call_id] = true;
    el = h("div", { class: "ci ci-call" }, this.call(item.tool, body, item.call_id, ["body"], ctx, this.links(item)));
  } else if (item.kind === "tool_result") {
    if (item.call_id && this.results[item.call_id]) return;
    this.results[item.call_id] = true;
    el = h("div", { class: "ci ci-result" }, this.result(item.tool, body, item.is_error, item.error, item.error_text, ["body"], ctx, this.links(item)));
  } else if (item.kind === "error") {
    el = h("div", { class: "ci ci-error" }, h("div", { class: "ci-head" }, h("span", { class: "who err" }, "error"), this.links(item)),
      renderError(body, ["body"], ctx), item.error_text && body && body.type === undefined ? h("div", null, item.error_text) : null);
  } else if (item.kind === "agent") {
    if (item.event === "agent_end" && body) {
      el = h("div", { class: "ci ci-error" }, h("div", { class: "ci-head" }, h("span", { class: "who err" }, "subagent failed"), this.links(item)),
        renderError(body, ["body"], ctx));
    } else return this.container(item) && undefined;
  } else if (item.kind === "note") {
    el = h("details", { class: "ci ci-note" }, h("summary", null, item.note === "compaction" ? "context compacted: summary" : "context transformed: summary", " ", this.links(item)),
      renderValue(body, ["body"], ctx));
  }
  if (!el) return;
  el.setAttribute("data-seq", item.seq);
  el.setAttribute("data-kind", item.kind);
  if (item.span_id) el.setAttribute("data-span", item.span_id);
  this.container(item).appendChild(el);
};

Conversation.prototype.call = function (name, args, id, path, ctx, links) {
  var shown = args === undefined || args === null ? "" : typeof args === "string" ? args : JSON.stringify(args);
  return h("details", { class: "call", "data-call": id || null },
    h("summary", null, h("span", { class: "arrow" }, "→ "), h("span", { class: "tn" }, name || "tool"),
      h("span", { class: "args-line" }, "(" + (shown.length > 140 ? shown.slice(0, 139) + "…" : shown) + ")"), links || null),
    h("div", { class: "call-body" }, id ? h("div", { class: "tag" }, "call " + id) : null,
      args === undefined ? null : renderValue(args, path, ctx)));
};

Conversation.prototype.result = function (name, value, isError, error, errorText, path, ctx, links) {
  if (isError) value = readableFailure(value);
  var line = isError ? clean(errorText || textOf(value)) : errorText || textOf(value);
  return h("details", { class: "result" + (isError ? " failed" : ""), open: isError ? true : null },
    h("summary", null, h("span", { class: "arrow" }, isError ? "⚠ " : "← "), h("span", { class: "tn" }, (name || "tool") + (isError ? " failed" : " result")),
      h("span", { class: "args-line" }, line ? " " + (line.length > 160 ? line.slice(0, 159) + "…" : line) : ""), links || null),
    h("div", { class: "call-body" },
      error ? renderError(error, ["error"], ctx) : null,
      value === undefined || value === null ? null : renderValue(value, path, ctx)));
};

// A failure's text as a person reads it: Claude Code's <tool_use_error>…</tool_use_error>
// wrapper gone, and newlines a tool printed escaped (\n) made real. Text only, never HTML.
function readableFailure(v) {
  function fix(t) {
    var m = /^\s*<([A-Za-z_][\w-]*)>([\s\S]*)<\/\1>\s*$/.exec(t);
    if (m) t = m[2].trim();
    if (t.indexOf("\n") < 0 && /\\[nr]/.test(t)) t = t.replace(/\\r\\n|\\n|\\r/g, "\n").replace(/\\t/g, "\t");
    return t;
  }
  if (typeof v === "string") return fix(v);
  if (Array.isArray(v)) return v.map(readableFailure);
  if (v && typeof v === "object" && typeof v.text === "string") return Object.assign({}, v, { text: fix(v.text) });
  if (v && typeof v === "object" && v.content !== undefined) return Object.assign({}, v, { content: readableFailure(v.content) });
  return v;
}

function textOf(v) {
  // The readable text of a value, for one summary line.
  if (v === null || v === undefined) return "";
  if (typeof v === "string") return v.replace(/\s+/g, " ");
  if (Array.isArray(v)) return v.map(textOf).join(" ").trim();
  if (typeof v === "object") {
    if (typeof v.text === "string") return v.text.replace(/\s+/g, " ");
    if (v.content !== undefined) return textOf(v.content);
    if (v.output !== undefined) return textOf(v.output);
    return JSON.stringify(v);
  }
  return String(v);
}

Conversation.prototype.message = function (item, m, ctx) {
  var self = this;
  if (!m || typeof m !== "object" || Array.isArray(m)) {
    return h("div", { class: "ci bubble role-other" }, h("div", { class: "ci-head" }, h("span", { class: "who" }, item.role || "message"), this.links(item)),
      renderValue(m, ["body"], ctx));
  }
  var bare = blockType(m);
  if (!m.role && (bare === "reasoning" || bare === "thinking" || bare === "function_call" || bare === "function_call_output")) {
    // A Codex (OpenAI Responses) item recorded as a message: reasoning, a call, its output.
    return h("div", { class: "ci ci-item" }, h("div", { class: "ci-head" }, h("span", { class: "who" }, bare.replace(/_/g, " ")), this.links(item)),
      this.block(m, ["body"], ctx));
  }
  var role = m.role || (m.$ls === "tool_result" ? "tool" : m.$ls) || item.role || "message";
  if (role === "tool" || role === "tool_result") {
    var callId = m.tool_call_id || m.tool_use_id;
    if (callId && this.results[callId]) return null;
    this.results[callId] = true;
    return h("div", { class: "ci ci-result" }, this.result(m.tool_name || m.name, m.content, m.is_error === true, null, null, ["body", "content"], ctx, this.links(item)));
  }
  var parts = [];
  var content = m.content;
  var path = ["body", "content"];
  if (typeof content === "string") parts.push(blank(content) ? null : renderProse(content, path, ctx));
  else if (Array.isArray(content)) content.forEach(function (b, i) { parts.push(self.block(b, path.concat([i]), ctx, true)); });
  else if (content !== undefined && content !== null) parts.push(renderValue(content, path, ctx));
  // OpenAI: tool calls beside the content; a refusal; a legacy function call.
  if (Array.isArray(m.tool_calls)) m.tool_calls.forEach(function (c, i) { parts.push(self.block(c, ["body", "tool_calls", i], ctx)); });
  if (m.function_call && typeof m.function_call === "object") parts.push(this.block({ type: "function", function: m.function_call }, ["body", "function_call"], ctx));
  if (typeof m.refusal === "string" && m.refusal) parts.push(h("div", { class: "error-box" }, "refused: " + m.refusal));
  if (m.error_message) parts.push(h("div", { class: "error-box" }, m.error_message));
  var meta = [];
  if (m.model) meta.push(chip(m.model));
  if (m.stop_reason) meta.push(chip(m.stop_reason));
  if (m.usage && renderUsage(m.usage)) meta.push(h("span", { class: "tag" }, renderUsage(m.usage).textContent));
  parts = parts.filter(Boolean);
  // A message that says nothing (whitespace, or calls already shown) is no bubble at all.
  if (!parts.length && !ctx.cutNote(path)) return null;
  return h("div", { class: "ci bubble role-" + (role === "human" ? "user" : role) },
    h("div", { class: "ci-head" }, h("span", { class: "who" }, role), meta, this.links(item)),
    h("div", { class: "ci-body" }, parts, ctx.cutNote(path)));
};

Conversation.prototype.block = function (b, path, ctx, prose) {
  var t = blockType(b);
  var text = prose ? renderProse : renderString;
  if (typeof b === "string") return text(b, path, ctx);
  if (t === "text" || t === "input_text" || t === "output_text") {
    return blank(b.text) && !ctx.cutNote(path.concat(["text"])) ? null : text(String(b.text || ""), path.concat(["text"]), ctx);
  }
  if (t === "thinking" || t === "reasoning" || t === "redacted_thinking") {
    var text = b.thinking || b.text || (Array.isArray(b.summary) ? b.summary.map(textOf).join("\n") : "") || "";
    return h("details", { class: "thinking-block" }, h("summary", null, "thinking", h("span", { class: "tag" }, "  " + num(String(text).length) + " characters")),
      h("pre", { class: "text thinking" }, String(text) || "(redacted)"), ctx.cutNote(path.concat(["thinking"])));
  }
  if (t === "tool_call" || t === "tool_use" || t === "function_call") {
    var id = b.id || b.call_id;
    if (id) this.calls[id] = true;
    return this.call(b.name, b.arguments !== undefined ? b.arguments : b.input, id, path.concat([b.arguments !== undefined ? "arguments" : "input"]), ctx);
  }
  if (b && b.function && typeof b.function === "object") {
    if (b.id) this.calls[b.id] = true;
    var args = b.function.arguments;
    if (typeof args === "string") { try { args = JSON.parse(args); } catch (e) { /* shown as text */ } }
    return this.call(b.function.name, args, b.id, path.concat(["function", "arguments"]), ctx);
  }
  if (t === "tool_result" || t === "function_call_output") {
    var cid = b.tool_use_id || b.call_id;
    if (cid) this.results[cid] = true;
    return this.result(null, b.content !== undefined ? b.content : b.output, b.is_error === true, null, null, path.concat(["content"]), ctx);
  }
  if (t === "image" || t === "image_url" || t === "input_image") return imageOf(b);
  if (t === "file" || t === "document" || t === "input_file") {
    var name = b.name || b.uri || b.file_id || (b.source && b.source.url) || "";
    return h("div", { class: "attach" }, h("span", { class: "chip" }, "file"), " ", h("span", { class: "mono" }, String(name)),
      b.mime_type || b.media_type ? h("span", { class: "tag" }, "  " + (b.mime_type || b.media_type)) : null,
      b.modality ? h("span", { class: "tag" }, "  " + b.modality) : null);
  }
  return renderValue(b, path, ctx);
};

function imageOf(b) {
  // loopscribe's ImageContent (data + mime_type), Anthropic's base64 source, OpenAI's image_url.
  var mime = b.mime_type || (b.source && b.source.media_type) || "";
  var data = b.data || (b.source && b.source.type === "base64" ? b.source.data : null);
  var url = b.image_url && (b.image_url.url || b.image_url);
  var src = null;
  if (typeof data === "string" && /^image\/(png|jpeg|gif|webp)$/.test(mime) && /^[A-Za-z0-9+/=\s]+$/.test(data)) src = "data:" + mime + ";base64," + data;
  else if (typeof url === "string" && /^data:image\//.test(url)) src = url;
  return h("div", { class: "attach" }, src ? h("img", { src: src, alt: "image " + mime, class: "thumb" }) : null,
    h("span", { class: "chip" }, "image"), " ", h("span", { class: "tag" }, mime || (typeof url === "string" ? url.slice(0, 80) : "")));
}
