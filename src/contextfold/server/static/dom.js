// Building DOM nodes without HTML strings: every text a user, a model or a tool wrote goes
// through textContent / text nodes, so nothing it contains can become markup or script.

/**
 * el("button", {class: "x", onclick: f, disabled: true}, "text", childNode, ...)
 * Attributes: "class", "dataset" (object), "on<event>" (listener), booleans (present/absent),
 * anything else via setAttribute. Children: strings become text nodes; null/false are skipped.
 */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key.startsWith("on") && typeof value === "function") {
      node.addEventListener(key.slice(2), value);
    } else if (value === true) node.setAttribute(key, "");
    else node.setAttribute(key, String(value));
  }
  append(node, ...children);
  return node;
}

/** Append children (strings as text nodes). */
export function append(node, ...children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** Replace all children of `node`. */
export function replaceChildren(node, ...children) {
  node.replaceChildren();
  return append(node, ...children);
}

/** document.getElementById that fails loudly (a missing id is a bug in index.html). */
export function byId(id) {
  const node = document.getElementById(id);
  if (!node) throw new Error(`#${id} is missing from the page`);
  return node;
}

/** 12 345 tokens, with a thin grouping the way people read numbers. */
export function formatTokens(n) {
  if (n === null || n === undefined) return "–";
  return Number(n).toLocaleString("en-US");
}

/** "1 message", "2 messages": a count with its noun in the right number. */
export function count(n, noun, plural = `${noun}s`) {
  return `${formatTokens(n)} ${Number(n) === 1 ? noun : plural}`;
}

/**
 * A short, readable time with its day for a created_at: "today 14:05", "2 Dec 14:05", or
 * "2 Dec 2025 14:05" for another year. fullTime() gives the whole date for a tooltip.
 */
export function formatTime(iso, now = new Date()) {
  if (!iso) return "";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return "";
  const time = date.toLocaleTimeString("en-GB", {hour: "2-digit", minute: "2-digit"});
  if (date.toDateString() === now.toDateString()) return `today ${time}`;
  const day = date.toLocaleDateString("en-GB", {day: "numeric", month: "short",
    ...(date.getFullYear() === now.getFullYear() ? {} : {year: "numeric"})});
  return `${day} ${time}`;
}

/** The whole date and time (a tooltip on a shortened one). */
export function fullTime(iso) {
  const date = iso ? new Date(iso) : null;
  return date && !Number.isNaN(date.getTime()) ? date.toLocaleString("en-GB", {dateStyle: "full", timeStyle: "short"}) : "";
}

/** A <time> element: the short form shown, the whole date as its tooltip. */
export function timeEl(iso, attrs = {}) {
  if (!iso) return null;
  return el("time", {datetime: iso, title: fullTime(iso), ...attrs}, formatTime(iso));
}

/** The first n characters of a text, on one line, for lists. */
export function preview(text, n = 80) {
  const line = (text || "").replace(/\s+/g, " ").trim();
  return line.length > n ? `${line.slice(0, n - 1)}…` : line;
}
