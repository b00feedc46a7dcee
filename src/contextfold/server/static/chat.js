// The chat column: the messages of the session's branch, checkpoints shown as notes, and the
// bubbles of a turn in flight. Every text goes in as text (dom.js), never as HTML.
import {byId, el, formatTime, formatTokens, replaceChildren} from "./dom.js";
import {indexTree, nodeLabel, nodeText, pathTo} from "./nodes.js";

/** Render the branch (root → leaf) of `tree`; `onCheckpoint(node)` opens a checkpoint's detail. */
export function renderChat(tree, {onCheckpoint}) {
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
  replaceChildren(list, branch.map((node) => chatItem(node, onCheckpoint)));
  list.scrollTop = list.scrollHeight;
}

function chatItem(node, onCheckpoint) {
  if (node.kind === "checkpoint") {
    const p = node.payload || {};
    return el("li", {class: "msg checkpoint-note", dataset: {nodeId: node.id}},
      el("div", {class: "msg-head"}, el("span", {class: "msg-role"}, nodeLabel(node)),
        el("span", {}, formatTime(node.created_at))),
      el("p", {class: "msg-text"},
        `Earlier context compacted: ${formatTokens(p.tokens_before)} → ` +
        `${formatTokens(p.tokens_after_estimate)} tokens (${p.summarizer || "summary"}). ` +
        "The full history stays in the durable tree. "),
      el("button", {type: "button", class: "link", onclick: () => onCheckpoint(node)},
        "Show what it folded"));
  }
  if (node.kind === "pin") {
    return el("li", {class: "msg system", dataset: {nodeId: node.id}},
      el("div", {class: "msg-head"}, el("span", {class: "msg-role"}, nodeLabel(node))),
      el("p", {class: "msg-text"}, nodeText(node)));
  }
  return messageItem(node.role || "message", nodeText(node), {nodeId: node.id, time: node.created_at});
}

/** One message bubble. */
export function messageItem(role, text, {nodeId, time, pending} = {}) {
  const item = el("li", {class: `msg ${role}${pending ? " pending" : ""}`,
    dataset: nodeId ? {nodeId, role} : {role}},
  el("div", {class: "msg-head"}, el("span", {class: "msg-role"}, role),
    el("span", {class: "msg-status"}, time ? formatTime(time) : "")),
  el("p", {class: "msg-text"}, text));
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
