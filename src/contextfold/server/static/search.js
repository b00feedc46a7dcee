// The search box over the open session's history: the recall index the model's
// history_search uses (GET /v1/sessions/{id}/search), the session's own branch only (SPEC L4),
// compacted parts included. A result opens its message in the chat.
import {api} from "./api.js";
import {byId, el, replaceChildren, timeEl} from "./dom.js";

/** Wire the form; `sessionId()` gives the open session, `onOpen(hit)` shows a result. */
export function setupSearch({sessionId, onOpen}) {
  const form = byId("search-form");
  const input = byId("search-input");
  const results = byId("search-results");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const id = sessionId();
    const query = input.value.trim();
    if (!id || !query) {
      clearSearch();
      return;
    }
    results.hidden = false;
    replaceChildren(results, el("li", {class: "muted"}, "Searching…"));
    try {
      const answer = await api.search(id, query);
      if (sessionId() !== id) return;
      renderHits(answer.hits || [], query, onOpen);
    } catch (exc) {
      replaceChildren(results, el("li", {class: "error"}, exc.message || String(exc)));
    }
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      input.value = "";
      clearSearch();
    }
  });
}

export function clearSearch() {
  const results = byId("search-results");
  results.hidden = true;
  replaceChildren(results);
}

function renderHits(hits, query, onOpen) {
  const results = byId("search-results");
  if (!hits.length) {
    replaceChildren(results, el("li", {class: "muted"}, `Nothing on this branch matches “${query}”.`));
    return;
  }
  replaceChildren(results,
    el("li", {class: "muted search-count"}, `${hits.length} ${hits.length === 1 ? "match" : "matches"} on this branch, best first`),
    hits.map((hit) => el("li", {class: "search-hit"},
      el("button", {type: "button", class: "hit-open", onclick: () => onOpen(hit)},
        el("span", {class: "hit-head"}, el("strong", {}, hit.role || "message"), " · turn ", String(hit.turn ?? "–"), " · ",
          timeEl(hit.created_at)),
        el("span", {class: "hit-snippet"}, hit.snippet || "")))));
}
