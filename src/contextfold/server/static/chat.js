// The chat column: the messages of the session's branch, checkpoints shown as notes, and the
// bubbles of a turn in flight. Text is rendered as safe Markdown (markdown.js builds DOM
// nodes, never HTML); long tool outputs are collapsed; every message can be pinned.
import {byId, count, el, formatTokens, replaceChildren, timeEl} from "./dom.js";
import {renderMarkdown} from "./markdown.js";
import {indexTree, nodeLabel, nodeText, pathTo} from "./nodes.js";

// A tool output longer than this is collapsed behind its first line.
const LONG_LINES = 8;
const LONG_CHARS = 600;

/**
 * Render the branch (root → leaf) of `tree`. Handlers: onCheckpoint(node) opens a
 * checkpoint's detail; onPin(node) / onUnpin(pinId) change pins; `pins` are the active pins
 * (a message pinned from here shows "Pinned").
 */
export function renderChat(tree, {onCheckpoint, onPin, onUnpin, pins = [], locked = false}) {
  const list = byId("messages");
  if (!tree) {
    replaceChildren(list, el("li", {class: "empty"}, "No session open. Choose one above or press New."));
    return;
  }
  const index = indexTree(tree);
  const branch = pathTo(index, index.leafId);
  if (!branch.length) {
    replaceChildren(list, el("li", {class: "empty"}, "No messages yet. Write the first one below."));
    return;
  }
  const pinnedBy = new Map(pins.filter((p) => p.source_id).map((p) => [p.source_id, p.pin_id]));
  const keepScroll = list.scrollHeight - list.scrollTop - list.clientHeight > 40;
  const top = list.scrollTop;
  // A refresh rebuilds the list; the message a search opened keeps its mark and the focus.
  const found = list.querySelector("li.msg.found");
  const foundId = found?.dataset.nodeId;
  const foundFocused = Boolean(found) && document.activeElement === found;
  replaceChildren(list, branch.map((node) => chatItem(node, {onCheckpoint, onPin, onUnpin, pinnedBy, locked})));
  list.scrollTop = keepScroll ? top : list.scrollHeight;
  if (foundId && foundFocused) highlightMessage(foundId);
}

function grew(p) {
  return typeof p.tokens_before === "number" && typeof p.tokens_after_estimate === "number" &&
    p.tokens_after_estimate >= p.tokens_before;
}

// A checkpoint's sizes as far as it recorded them: an imported one (Pi's) may name only
// the size before it, and the card then says so instead of "→ ~– tokens".
function compactedText(p) {
  const number = (v) => typeof v === "number";
  const by = p.summarizer || "summary";
  if (number(p.tokens_before) && number(p.tokens_after_estimate)) {
    return `Earlier context compacted: ${formatTokens(p.tokens_before)} → ` +
      `~${formatTokens(p.tokens_after_estimate)} tokens (estimated; ${by}). `;
  }
  if (number(p.tokens_before)) {
    return `Earlier context compacted from ${formatTokens(p.tokens_before)} tokens (${by}; ` +
      "its size after was not recorded). ";
  }
  return `Earlier context compacted (${by}). `;
}

function chatItem(node, handlers) {
  if (node.kind === "checkpoint") {
    const p = node.payload || {};
    return el("li", {class: "msg checkpoint-note", dataset: {nodeId: node.id}},
      el("div", {class: "msg-head"}, el("span", {class: "msg-role"}, nodeLabel(node)),
        timeEl(node.created_at)),
      el("p", {class: "msg-text"}, compactedText(p) +
        // A manual compaction may grow a short request (the automatic one never commits
        // that): the card says so, so the numbers are not read as a saving.
        (grew(p) ? "It did not make the request smaller: the summary outweighs what it folded. " : "") +
        "The full history stays in the durable tree. "),
      el("button", {type: "button", class: "link", onclick: () => handlers.onCheckpoint(node)},
        "Show what it folded"));
  }
  if (node.kind === "pin") {
    return el("li", {class: "msg system", dataset: {nodeId: node.id}},
      el("div", {class: "msg-head"}, el("span", {class: "msg-role"}, nodeLabel(node)), timeEl(node.created_at)),
      el("p", {class: "msg-text"}, nodeText(node)));
  }
  const item = messageItem(node.role || "message", null, {nodeId: node.id, time: node.created_at});
  replaceChildren(item.querySelector(".msg-text"), messageBody(node));
  if (handlers.onPin && (node.role === "user" || node.role === "assistant" || node.role === "tool") && hasText(node)) {
    const pinId = handlers.pinnedBy.get(node.id);
    item.querySelector(".msg-head").append(pinId
      ? el("button", {type: "button", class: "pin-toggle pinned", disabled: handlers.locked,
        "aria-label": "Unpin this message", title: "Pinned: every request carries it. Press to unpin.",
        onclick: () => handlers.onUnpin(pinId)}, "Pinned ✓")
      : el("button", {type: "button", class: "pin-toggle", disabled: handlers.locked,
        "aria-label": "Pin this message", title: "Every request will carry this message verbatim",
        onclick: () => handlers.onPin(node)}, "Pin"));
  }
  return item;
}

function hasText(node) {
  const parts = node.payload?.parts || [];
  return Boolean((node.text || "").trim()) || parts.some((p) => p.type === "tool_result" && (p.output || "").trim());
}

/** What a message shows: its text as Markdown, its tool calls, its tool results (collapsed when long). */
export function messageBody(node) {
  const out = document.createDocumentFragment();
  const parts = node.payload?.parts || [];
  if ((node.text || "").trim()) out.append(renderMarkdown(node.text));
  for (const part of parts) {
    if (part.type === "tool_call") {
      out.append(el("p", {class: "tool-call"}, el("code", {}, `→ ${part.name}(${shortJson(part.input)})`)));
    } else if (part.type === "tool_result") {
      out.append(toolOutput(part));
    } else if (part.type === "reasoning") {
      out.append(thinking(part));
    } else if (part.type && !["text", "tool_call", "tool_result"].includes(part.type)) {
      out.append(el("p", {class: "muted"}, `(${part.type})`));
    }
  }
  if (!out.childNodes.length) {
    // An empty reply (an aborted or failed request, as Pi records them): say so, muted.
    const status = node.payload?.status && node.payload.status !== "complete" ? ` · ${node.payload.status}` : "";
    out.append(el("p", {class: "muted no-text"}, `(no text${status})`));
  }
  return out;
}

// The model's thinking, shown as thinking: collapsed behind its size when the provider let it
// be read, else said to be unreadable (a message of thinking alone is never a blank card).
function thinking(part) {
  const text = (part.text || "").trim();
  if (!text) return el("p", {class: "muted thinking"}, "(thinking: not readable, the provider keeps it encrypted)");
  return el("details", {class: "thinking"},
    el("summary", {}, `Thinking: ${count(text.length, "character")} — show`),
    el("pre", {class: "pre"}, text));
}

function toolOutput(part) {
  const output = part.output || "";
  const label = `${part.is_error ? "✗" : "←"} ${part.name || "result"}`;
  const lines = output.split("\n");
  if (lines.length <= LONG_LINES && output.length <= LONG_CHARS) {
    return el("div", {class: "tool-result"}, el("span", {class: "tool-label"}, `${label}: `),
      el("pre", {class: "pre"}, output));
  }
  return el("details", {class: "tool-result long"},
    el("summary", {}, `${label}: ${count(lines.length, "line")}, ${count(output.length, "character")} — show`),
    el("pre", {class: "pre"}, output));
}

function shortJson(value) {
  try {
    const text = JSON.stringify(value ?? {});
    return text.length > 160 ? `${text.slice(0, 159)}…` : text;
  } catch {
    return "…";
  }
}

/** One message bubble (`text` null: the caller fills .msg-text). */
export function messageItem(role, text, {nodeId, time, pending} = {}) {
  const item = el("li", {class: `msg ${role}${pending ? " pending" : ""}`,
    dataset: nodeId ? {nodeId, role} : {role}},
  el("div", {class: "msg-head"}, el("span", {class: "msg-role"}, role),
    el("span", {class: "msg-status"}, time ? timeEl(time) : "")),
  el("div", {class: "msg-text"}, text ?? ""));
  return item;
}

/** Bubbles for a turn in flight: the user's text (if any) and the reply as it streams. */
export function startPendingTurn(userText, status) {
  const list = byId("messages");
  list.querySelector(".empty")?.remove();
  const user = userText === null ? null : messageItem("user", userText, {pending: true});
  if (user) {
    user.classList.add("pending-user");
    user.querySelector(".msg-status").textContent = status;
    list.append(user);
  }
  const reply = messageItem("assistant", "", {pending: true});
  reply.classList.add("pending-reply");
  reply.hidden = true;
  list.append(reply);
  list.scrollTop = list.scrollHeight;
  return {
    setStatus(text) {
      if (user) user.querySelector(".msg-status").textContent = text;
    },
    addText(text) {
      reply.hidden = false;
      reply.querySelector(".msg-text").append(document.createTextNode(text));
      list.scrollTop = list.scrollHeight;
    },
    remove() {
      user?.remove();
      reply.remove();
    },
  };
}

/** Scroll to a message of the chat and mark it for a moment (a search result). */
export function highlightMessage(nodeId) {
  const item = byId("messages").querySelector(`li[data-node-id="${CSS.escape(nodeId)}"]`);
  if (!item) return false;
  for (const earlier of document.querySelectorAll("#messages .msg.found")) earlier.classList.remove("found");
  item.scrollIntoView({block: "center"});
  item.classList.add("found");
  item.setAttribute("tabindex", "-1");
  item.focus({preventScroll: true});
  // The mark stays while the found message holds the focus, not for a fixed time: on a slow
  // machine (or for a slow reader) a timed mark could vanish before it was seen.
  item.addEventListener("blur", () => item.classList.remove("found"), {once: true});
  return true;
}
