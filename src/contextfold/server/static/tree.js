// The durable tree: every node of the session, never rewritten. One path is shown at a time
// (the session's branch by default); where a node has siblings (an edit, a retry) arrows move
// between them. Nodes that are not on the session's branch are greyed; checkpoints are marked.
import {byId, el, formatTime, formatTokens, preview, replaceChildren} from "./dom.js";
import {indexTree, nodeLabel, nodeText} from "./nodes.js";

// parent id ("" for the roots) -> the child chosen by the arrows; kept per session.
const choices = new Map();

export function resetBranchChoices() {
  choices.clear();
}

/**
 * Render `tree`. Handlers: onCheckpoint(node), onFork(node); `locked` disables Fork (U4)
 * with `lockReason` as its title.
 */
export function renderTree(tree, handlers) {
  const list = byId("tree");
  if (!tree || !tree.nodes?.length) {
    replaceChildren(list, el("li", {class: "empty"}, tree ? "Nothing stored yet." : "No session open."));
    return;
  }
  const index = indexTree(tree);
  const items = [];
  let parentKey = "";
  const seen = new Set();
  for (;;) {
    const siblings = index.children.get(parentKey) || [];
    if (!siblings.length) break;
    const node = chosen(parentKey, siblings);
    if (seen.has(node.id)) break;
    seen.add(node.id);
    items.push(treeItem(node, siblings, parentKey, handlers, () => renderTree(tree, handlers)));
    parentKey = node.id;
  }
  const end = index.byId.get(parentKey);
  if (end && !end.on_branch) items.push(continueItem(end, handlers));
  const focus = focusedControl(list);
  replaceChildren(list, items);
  focus?.();
}

/** Re-rendering replaces the buttons: give focus back to the same control of the same node. */
function focusedControl(list) {
  const active = document.activeElement;
  if (!active || !list.contains(active)) return null;
  const nodeId = active.closest("li")?.dataset.nodeId;
  const label = active.getAttribute("aria-label") || active.textContent;
  return () => {
    const item = nodeId && list.querySelector(`li[data-node-id="${CSS.escape(nodeId)}"]`);
    const again = item && [...item.querySelectorAll("button")].find(
      (b) => (b.getAttribute("aria-label") || b.textContent) === label);
    again?.focus();
  };
}

function chosen(parentKey, siblings) {
  const picked = choices.get(parentKey);
  return siblings.find((n) => n.id === picked) || siblings.find((n) => n.on_branch) ||
    siblings[siblings.length - 1];
}

function treeItem(node, siblings, parentKey, handlers, rerender) {
  const classes = ["node", node.kind];
  if (!node.on_branch) classes.push("off");
  const head = el("div", {class: "node-head"},
    el("span", {class: "node-role"}, nodeLabel(node)),
    el("span", {class: "muted"}, formatTime(node.created_at)));
  if (siblings.length > 1) head.append(branchNav(node, siblings, parentKey, rerender));
  const actions = el("span", {class: "node-actions"});
  if (node.kind === "checkpoint") {
    head.append(el("span", {class: "tag tag-checkpoint"},
      `${formatTokens(node.payload?.tokens_before)} → ${formatTokens(node.payload?.tokens_after_estimate)}`));
    actions.append(el("button", {type: "button", onclick: () => handlers.onCheckpoint(node),
      "aria-label": "Checkpoint details"}, "Details"));
  }
  if (node.kind === "message" && node.role === "assistant") {
    actions.append(el("button", {type: "button", class: "fork",
      disabled: handlers.locked, title: handlers.locked ? handlers.lockReason : "A new session that continues from this reply",
      onclick: () => handlers.onFork(node)}, "Fork here"));
  }
  head.append(actions);
  const text = node.kind === "checkpoint" ? preview(nodeText(node), 140) : preview(nodeText(node), 300);
  return el("li", {class: classes.join(" "), dataset: {nodeId: node.id}},
    head, el("p", {class: "node-text"}, text));
}

/**
 * The end of a branch that is not the session's (chosen with the arrows): offer to go on
 * from it. A session's history is append-only, so this is a fork (SPEC O3) at the branch's
 * last reply: a new session that continues exactly this branch, the original untouched.
 */
function continueItem(end, handlers) {
  const canFork = end.kind === "message" && end.role === "assistant";
  const note = canFork
    ? "You are viewing another branch than the session's. Continue it in a new session (the " +
      "session you are in stays as it is):"
    : "You are viewing another branch than the session's. It ends without a reply, so it " +
      "cannot be continued; fork from one of its replies instead.";
  const item = el("li", {class: "continue-branch"}, el("p", {}, note));
  if (canFork) {
    item.append(el("button", {type: "button", class: "continue", disabled: handlers.locked,
      title: handlers.locked ? handlers.lockReason : "A new session whose history is this branch",
      onclick: () => handlers.onFork(end)}, "Continue on this branch"));
  }
  return item;
}

function branchNav(node, siblings, parentKey, rerender) {
  const at = siblings.indexOf(node);
  const go = (step) => {
    const next = siblings[(at + step + siblings.length) % siblings.length];
    choices.set(parentKey, next.id);
    rerender();
    // Keep the keyboard where it was: on the same arrow, now on the sibling shown.
    const label = step < 0 ? "Previous branch" : "Next branch";
    document.querySelector(
      `#tree [data-node-id="${CSS.escape(next.id)}"] button[aria-label="${label}"]`)?.focus();
  };
  return el("span", {class: "branch-nav", role: "group", "aria-label": "Branches here"},
    el("button", {type: "button", "aria-label": "Previous branch", onclick: () => go(-1)}, "◀"),
    el("span", {class: "branch-pos"}, `${at + 1} / ${siblings.length}`),
    el("button", {type: "button", "aria-label": "Next branch", onclick: () => go(1)}, "▶"));
}
