// Reading the tree the API returns: parents, children, the branch, what a node says.

/** Index the nodes of GET /tree: byId, children (parent id, "" for roots, -> nodes in order). */
export function indexTree(tree) {
  const byId = new Map();
  const children = new Map();
  for (const node of tree?.nodes || []) {
    byId.set(node.id, node);
    const key = node.parent_id && node.parent_id !== node.id ? node.parent_id : "";
    if (!children.has(key)) children.set(key, []);
    children.get(key).push(node);
  }
  return {byId, children, leafId: tree?.leaf_id || null};
}

/** The path root → `nodeId` (inclusive), following parent ids; stops at a missing parent. */
export function pathTo(index, nodeId) {
  const path = [];
  const seen = new Set();
  let node = nodeId ? index.byId.get(nodeId) : null;
  while (node && !seen.has(node.id)) {
    seen.add(node.id);
    path.push(node);
    node = node.parent_id ? index.byId.get(node.parent_id) : null;
  }
  return path.reverse();
}

/** What a node shows people: its text, or a description of its tool calls / results / pin. */
export function nodeText(node) {
  if (node.text) return node.text;
  const payload = node.payload || {};
  if (node.kind === "pin") {
    return payload.action === "unpin" ? `unpinned ${payload.pin_id || ""}` : payload.text || "";
  }
  if (node.kind === "checkpoint") return payload.summary || "";
  const pieces = [];
  for (const part of payload.parts || []) {
    if (part.type === "tool_call") pieces.push(`→ ${part.name}(${compactJson(part.input)})`);
    else if (part.type === "tool_result") {
      pieces.push(`${part.is_error ? "✗" : "←"} ${part.name || "result"}: ${part.output || ""}`);
    } else if (part.type === "reasoning") pieces.push("(thinking)");
    else if (part.type && part.type !== "text") pieces.push(`(${part.type})`);
  }
  return pieces.join("\n");
}

function compactJson(value) {
  try {
    const text = JSON.stringify(value ?? {});
    return text.length > 120 ? `${text.slice(0, 119)}…` : text;
  } catch {
    return "…";
  }
}

/** A short label for a node's role or kind. */
export function nodeLabel(node) {
  if (node.kind === "checkpoint") {
    return node.payload?.summarizer === "masking" ? "masking step" : "checkpoint";
  }
  if (node.kind === "pin") return node.payload?.action === "unpin" ? "unpin" : "pin";
  return node.role || "message";
}

/**
 * The messages a checkpoint folded away: on its own path, from the previous checkpoint's
 * keep boundary (or the start) up to its own first_kept_id (exclusive).
 */
export function foldedBy(index, checkpointNode) {
  const payload = checkpointNode.payload || {};
  const path = pathTo(index, checkpointNode.id).slice(0, -1);
  const previousId = payload.details?.previous_checkpoint_id;
  const previous = previousId ? index.byId.get(previousId) : null;
  const previousKept = previous?.payload?.first_kept_id || null;
  let start = 0;
  if (previousKept) {
    const at = path.findIndex((n) => n.id === previousKept);
    if (at >= 0) start = at;
  }
  let end = path.length;
  if (payload.first_kept_id) {
    const at = path.findIndex((n) => n.id === payload.first_kept_id);
    if (at >= 0) end = at;
  }
  return path.slice(start, end).filter((n) => n.kind === "message");
}
