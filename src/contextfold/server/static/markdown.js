// A small, safe Markdown renderer: it builds DOM nodes (dom.js), never HTML strings, so
// nothing a user, a model or a tool wrote can become markup or script. It knows what chat
// replies use: fenced code, inline code, headings, lists, quotes, bold, italics and links
// (http, https and mailto only; they open in a new tab without an opener). Anything else
// stays as the text it is.
import {el} from "./dom.js";

const FENCE = /^\s*(```|~~~)\s*([\w+#.-]*)\s*$/;
const HEADING = /^(#{1,6})\s+(.*)$/;
const BULLET = /^\s*[-*+]\s+(.*)$/;
const NUMBERED = /^\s*(\d{1,9})[.)]\s+(.*)$/;
const QUOTE = /^\s*>\s?(.*)$/;
const SAFE_URL = /^(https?:\/\/|mailto:)/i;

/** A DocumentFragment for `text` read as Markdown. */
export function renderMarkdown(text) {
  const out = document.createDocumentFragment();
  const lines = String(text ?? "").replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = FENCE.exec(line);
    if (fence) {
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[i++]);
      i += 1; // the closing fence (or the end)
      const code = el("code", fence[2] ? {class: `language-${fence[2]}`} : {}, body.join("\n"));
      out.append(el("pre", {class: "md-code", "data-lang": fence[2] || null}, code));
      continue;
    }
    if (!line.trim()) {
      i += 1;
      continue;
    }
    const heading = HEADING.exec(line);
    if (heading) {
      // Headings inside a message are small: the page's own headings stay the outline.
      out.append(el("p", {class: `md-h md-h${heading[1].length}`}, ...inline(heading[2])));
      i += 1;
      continue;
    }
    if (BULLET.test(line) || NUMBERED.test(line)) {
      const numbered = !BULLET.test(line);
      const pattern = numbered ? NUMBERED : BULLET;
      const items = [];
      let start = null;
      while (i < lines.length && pattern.test(lines[i])) {
        const match = pattern.exec(lines[i]);
        if (numbered && start === null) start = Number(match[1]);
        items.push(el("li", {}, ...inline(numbered ? match[2] : match[1])));
        i += 1;
      }
      out.append(numbered ? el("ol", {start: start !== 1 ? start : null}, items) : el("ul", {}, items));
      continue;
    }
    if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && QUOTE.test(lines[i])) body.push(QUOTE.exec(lines[i++])[1]);
      out.append(el("blockquote", {}, renderMarkdown(body.join("\n"))));
      continue;
    }
    const para = [];
    while (i < lines.length && lines[i].trim() && !FENCE.test(lines[i]) && !HEADING.test(lines[i]) &&
      !BULLET.test(lines[i]) && !NUMBERED.test(lines[i]) && !QUOTE.test(lines[i])) para.push(lines[i++]);
    const parts = [];
    para.forEach((row, n) => {
      if (n) parts.push(el("br"));
      parts.push(...inline(row));
    });
    out.append(el("p", {}, parts));
  }
  return out;
}

// `code`, **bold**, *italic* / _italic_, [text](url), bare https:// links.
// Emphasis needs a non-space just inside its markers, and underscores a non-word character
// just outside them (snake_case and __dunder__ names stay as they are, as in CommonMark).
const INLINE = /`([^`\n]+)`|\*\*([^*\s](?:[^*\n]*[^*\s])?)\*\*|(?<![\w.])__([^_\s](?:[^_\n]*[^_\s])?)__(?![\w])|\*([^*\s](?:[^*\n]*[^*\s])?)\*|(?<![\w.])_([^_\s](?:[^_\n]*[^_\s])?)_(?![\w])|\[([^\]\n]+)\]\(([^)\s]+)\)|(https?:\/\/[^\s<>()]+[^\s<>().,;:!?'"])/g;

/** Nodes for one line of inline Markdown (strings become text nodes in el()). */
export function inline(text) {
  const nodes = [];
  let last = 0;
  for (const m of text.matchAll(INLINE)) {
    if (m.index > last) nodes.push(text.slice(last, m.index));
    if (m[1] !== undefined) nodes.push(el("code", {}, m[1]));
    else if (m[2] !== undefined || m[3] !== undefined) nodes.push(el("strong", {}, ...inline(m[2] ?? m[3])));
    else if (m[4] !== undefined || m[5] !== undefined) nodes.push(el("em", {}, ...inline(m[4] ?? m[5])));
    else if (m[6] !== undefined) nodes.push(link(m[7], m[6], m[0]));
    else nodes.push(link(m[8], m[8], m[0]));
    last = m.index + m[0].length;
  }
  if (last < text.length) nodes.push(text.slice(last));
  return nodes;
}

function link(url, label, original) {
  if (!SAFE_URL.test(url)) return original; // javascript:, data: ... stay text
  return el("a", {href: url, target: "_blank", rel: "noopener noreferrer"}, label);
}
