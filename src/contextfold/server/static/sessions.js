// The session list: title (rename), which face made it (service, proxy, import, CLI), model,
// last message, and Open / Rename / Export / Archive. Archiving hides a session from this
// list; its history is append-only and stays whole (docs/web.md).
import {byId, el, replaceChildren, timeEl} from "./dom.js";

const FACES = {service: "service", proxy: "proxy", import: "import", cli: "CLI / library"};

/** Handlers: onOpen(id), onRename(id, title), onArchive(id, archived), onExport(id). */
export function renderSessionList(sessions, openId, handlers) {
  const showArchived = byId("show-archived").checked;
  const list = byId("session-list");
  const shown = sessions.filter((s) => showArchived || !s.archived).slice().reverse();
  const hidden = sessions.filter((s) => s.archived).length;
  byId("archived-count").textContent = hidden ? `(${hidden})` : "";
  if (!shown.length) {
    replaceChildren(list, el("li", {class: "empty"}, sessions.length ? "Every session is archived." : "No sessions yet: press New."));
    return;
  }
  replaceChildren(list, shown.map((s) => row(s, s.session_id === openId, handlers)));
}

function row(s, open, handlers) {
  const title = s.title;  // the server's: renamed, stored, else "Untitled"
  const item = el("li", {class: `session-row${open ? " open" : ""}${s.archived ? " archived" : ""}`,
    dataset: {sessionId: s.session_id}});
  const titleButton = el("button", {type: "button", class: "link session-open",
    "aria-current": open ? "true" : null, onclick: () => handlers.onOpen(s.session_id)}, title);
  const when = s.last_message_at || s.created_at;
  const meta = el("span", {class: "session-meta"},
    el("span", {class: `tag face face-${s.face || "cli"}`}, FACES[s.face] || s.face || "CLI / library"),
    el("span", {class: "muted"}, s.model || "–"),
    el("span", {class: "muted"}, s.last_message_at ? "last message " : "created ", timeEl(when)),
    s.archived ? el("span", {class: "tag"}, "archived") : null,
    s.read_only ? el("span", {class: "tag"}, "read-only") : null);
  const actions = el("span", {class: "session-actions"},
    el("button", {type: "button", "aria-label": `Rename ${title}`, onclick: () => startRename(item, s, handlers)}, "Rename"),
    el("button", {type: "button", "aria-label": `Export ${title}`, onclick: () => handlers.onExport(s.session_id)}, "Export"),
    el("button", {type: "button", "aria-label": `${s.archived ? "Unarchive" : "Archive"} ${title}`,
      onclick: () => handlers.onArchive(s.session_id, !s.archived)}, s.archived ? "Unarchive" : "Archive"));
  item.append(el("div", {class: "session-line"}, titleButton, actions), meta);
  return item;
}

function startRename(item, s, handlers) {
  const input = el("input", {type: "text", class: "rename-input", value: s.title || "", maxlength: 500,
    "aria-label": "New title"});
  const form = el("form", {class: "rename-form"}, input,
    el("button", {type: "submit", class: "primary"}, "Save"),
    el("button", {type: "button", onclick: () => form.replaceWith(line)}, "Cancel"));
  const line = item.querySelector(".session-line");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    handlers.onRename(s.session_id, input.value.trim());
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      form.replaceWith(line);
      line.querySelector(".session-open").focus();
    }
  });
  line.replaceWith(form);
  input.focus();
  input.select();
}
