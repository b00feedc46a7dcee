// The page's controller: token, sessions, views, the live events of the open session, and
// re-rendering the chat, the durable tree and the projection from the API.
import {api, ApiError, getToken, readEvents, setToken} from "./api.js";
import {highlightMessage, renderChat} from "./chat.js";
import {openCheckpoint, setupCheckpointDialog} from "./checkpoint.js";
import {LOCK_REASON, setupComposer} from "./composer.js";
import {byId, el, formatTime, replaceChildren} from "./dom.js";
import {renderGauge} from "./gauge.js";
import {activePins, clearPinField, renderProjection} from "./projection.js";
import {setupReplay} from "./replay.js";
import {clearSearch, setupSearch} from "./search.js";
import {renderSessionList as renderSessionRows} from "./sessions.js";
import {renderSettings} from "./settings.js";
import {renderTree, resetBranchChoices} from "./tree.js";

const state = {
  config: null, sessions: [], sessionId: null, session: null, tree: null, projection: null, context: null,
  phase: "idle", busy: false, frozen: false, editing: null, events: null, generation: 0,
  loading: Promise.resolve(),
};

const app = {
  state,
  setPhase,
  refresh,
  notify,
  updateControls,
  onCompactionEvent,
  clearDraftStore: () => composer.clearDraftStore(),
};
const composer = setupComposer(app);

// ------------------------------------------------------------------ messages to the user

function notify(text, isError = false) {
  const box = byId("notice");
  box.hidden = !text;
  box.textContent = text || "";
  box.classList.toggle("error", Boolean(isError));
}

function banner(text) {
  const box = byId("banner");
  box.hidden = !text;
  box.textContent = text || "";
}

// ------------------------------------------------------------------ compaction state

function setPhase(phase, detail = {}) {
  state.phaseChanges = (state.phaseChanges || 0) + 1;
  state.phase = phase || "idle";
  const box = byId("compacting");
  const compacting = state.phase === "compacting";
  // The Cancel button disappears with the banner: keyboard focus goes to the message box.
  if (!compacting && box.contains(document.activeElement)) byId("draft").focus();
  box.hidden = !compacting;
  if (compacting) {
    const trigger = detail.trigger ? ` (${detail.trigger})` : "";
    byId("compacting-text").textContent = `Compacting earlier context…${trigger}`;
    byId("cancel-compaction").disabled = false;
  }
  if (state.phase === "failed" && detail.reason && byId("notice").hidden) {
    notify(`The last compaction failed: ${detail.reason}`, true);
  }
  updateControls();
}

function onCompactionEvent(name, data) {
  // A notice already shown (e.g. "nothing was sent, your draft is kept" of a waiting send)
  // says more than the bare event: the two streams deliver it in either order.
  const quiet = !byId("notice").hidden;
  const outcome = data?.outcome || {};
  if (name === "compaction_started") setPhase("compacting", data);
  else if (name === "compaction_finished" && outcome.note && !quiet) {
    // A manual compaction committed although the request did not shrink: say so (item 7).
    notify(`Compacted, but ${outcome.note}.`, true);
  } else if (name === "compaction_noop" && data?.trigger === "manual" && !quiet) {
    notify(`Nothing was compacted: ${outcome.reason || data.reason || "there is nothing to fold yet"}.`);
  } else if (name === "compaction_cancelled" && !quiet) notify("Compaction cancelled: the history is unchanged.");
  else if (name === "compaction_failed" && !quiet) notify(`Compaction failed: ${data.reason || "unknown reason"}`, true);
  if (name !== "compaction_started") scheduleRefresh();
}

/** Enable and disable controls from the state (U4: locked while compacting). */
function updateControls() {
  const open = Boolean(state.sessionId && state.session);
  const readOnly = Boolean(state.session?.read_only);
  const compacting = state.phase === "compacting";
  const locked = !open || readOnly || compacting || state.busy || state.phase === "busy";
  const reason = compacting ? LOCK_REASON : state.busy ? "Wait for the reply" : readOnly ? "This session is read-only" : "";
  // A model this server cannot serve: no turn can go out, compacting and switching still can.
  const unservable = state.session?.model_available === false;
  for (const id of ["retry", "edit", "compact", "switch-model"]) {
    const button = byId(id);
    const noTurn = unservable && (id === "retry" || id === "edit");
    button.disabled = locked || noTurn || (id === "edit" && Boolean(state.editing));
    button.title = locked ? reason : noTurn ? "This server cannot send to this model" : "";
  }
  byId("model-input").disabled = locked;
  byId("send").disabled = !open || readOnly || unservable || state.frozen;
  byId("draft").disabled = !open || readOnly;
  for (const button of document.querySelectorAll("#tree button.fork")) {
    button.disabled = locked;
    button.title = locked ? reason : "A new session that continues from this reply";
  }
}

// ------------------------------------------------------------------ rendering

const handlers = {
  onCheckpoint: (node) => openCheckpoint(node, state.tree, state.session?.cost || null),
  onFork: (node) => fork(node),
  onPin: (node) => changePins(() => api.pin(state.sessionId, {node_id: node.id}), "Pinned: every request now carries this message."),
  onUnpin: (pinId) => changePins(() => api.unpin(state.sessionId, pinId), "Unpinned (the pin stays in the durable history)."),
  onPinText: (text) => changePins(async () => {
    await api.pin(state.sessionId, {text});
    clearPinField();
  }, "Pinned."),
};

function render() {
  const pinsLocked = isLocked() || Boolean(state.session?.read_only);
  renderChat(state.sessionId ? state.tree : null,
    {...handlers, pins: activePins(state.projection), locked: pinsLocked});
  renderTree(state.tree, {...handlers, locked: isLocked(), lockReason: LOCK_REASON});
  renderProjection(state.projection, {...handlers, context: state.context,
    cost: state.session?.cost || null, locked: pinsLocked});
  renderGauge(state.session?.gauge);
  const s = state.session;
  byId("session-model").textContent = s ? `${s.model}${s.read_only ? " · read-only (damaged history)" : ""}` : "";
  if (s && document.activeElement !== byId("model-input")) byId("model-input").value = s.model;
  const problem = sessionProblem(s);
  byId("session-problem").hidden = !problem;
  byId("session-problem").textContent = problem || "";
  updateControls();
}

/** What keeps the open session from working as usual: damage, or a model this server cannot serve. */
function sessionProblem(s) {
  if (!s) return null;
  if (s.read_only) return `Read-only: the stored history is damaged; shown is what can be read safely (${(s.problems || []).join("; ")}).`;
  if (s.model_available === false) return `This server cannot send to ${s.model}: ${s.model_problem}. Switch the model to send; the history can still be read, compacted and replayed.`;
  return null;
}

function isLocked() {
  return state.phase === "compacting" || state.busy;
}

function renderSessionList() {
  const select = byId("session-select");
  // Archived sessions stay out of the quick switch (the Sessions view shows them on demand).
  const options = state.sessions.filter((s) => !s.archived || s.session_id === state.sessionId)
    .map((s) => el("option", {value: s.session_id},
      `${s.title} · ${s.model} · ${formatTime(s.last_message_at || s.created_at)} · ${s.session_id.slice(-6)}`));
  if (!options.length) options.push(el("option", {value: ""}, "no sessions yet"));
  replaceChildren(select, options);
  select.value = state.sessionId || "";
  renderSessionRows(state.sessions, state.sessionId, sessionHandlers);
}

const sessionHandlers = {
  onOpen: async (id) => {
    showView("chat");
    if (id !== state.sessionId) await openSession(id);
    byId("draft").focus();
  },
  onRename: (id, title) => patchSession(id, {title}, `Renamed to “${title || "its stored title"}”.`),
  onArchive: (id, archived) => patchSession(id, {archived},
    archived ? "Archived: hidden from the list, nothing deleted." : "Unarchived."),
  onExport: (id) => exportSession(id),
};

async function patchSession(id, body, message) {
  try {
    const changed = await api.patchSession(id, body);
    const at = state.sessions.findIndex((s) => s.session_id === id);
    if (at >= 0) state.sessions[at] = {...state.sessions[at], ...changed};
    if (id === state.sessionId && state.session) state.session.title = changed.title;
    renderSessionList();
    byId("sessions-status").textContent = message;
    const row = byId("session-list").querySelector(`li[data-session-id="${CSS.escape(id)}"] .session-open`);
    row?.focus();
  } catch (exc) {
    byId("sessions-status").textContent = exc.message || String(exc);
  }
}

async function exportSession(id) {
  try {
    const blob = await api.exportSession(id);
    const url = URL.createObjectURL(blob);
    const link = el("a", {href: url, download: `contextfold-session-${id}.json`, hidden: true});
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10_000);
    byId("sessions-status").textContent = "Exported: the session, its durable branch and the next request, as JSON.";
  } catch (exc) {
    byId("sessions-status").textContent = exc.message || String(exc);
  }
}

async function changePins(operation, message) {
  try {
    await operation();
    notify(message);
  } catch (exc) {
    notify(exc.message || String(exc), true);
  }
  await refresh();
}

// ------------------------------------------------------------------ loading

async function refresh() {
  const id = state.sessionId;
  if (!id) return render();
  const generation = state.generation;
  const phaseChanges = state.phaseChanges || 0;
  try {
    const [session, tree] = await Promise.all([api.session(id), api.tree(id)]);
    // A damaged session is read-only: its readable part is shown, it has no projection.
    const [projection, context] = session.read_only ? [null, null]
      : await Promise.all([api.projection(id), api.context(id).catch(() => null)]);
    if (generation !== state.generation || id !== state.sessionId) return; // stale answer
    Object.assign(state, {session, tree, projection, context});
    // A phase set meanwhile (an event, Compact now's answer) is newer than this answer's.
    if (!state.busy && phaseChanges === (state.phaseChanges || 0)) setPhase(session.state?.phase, session.state || {});
  } catch (exc) {
    if (generation !== state.generation) return;
    handleLoadError(exc);
  }
  render();
}

let refreshTimer = null;
function scheduleRefresh() {
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(refresh, 120);
}

function handleLoadError(exc) {
  if (exc instanceof ApiError && exc.status === 401) {
    clearSession();
    needToken("This server needs a token: paste yours above (it is kept for this tab only).");
  } else if (exc instanceof ApiError && exc.status === 404) {
    clearSession();
    banner("No such session (or it is not yours).");
  } else {
    banner(exc.message || String(exc));
  }
}

function clearSession() {
  stopEvents();
  Object.assign(state, {sessionId: null, session: null, tree: null, projection: null, context: null, phase: "idle"});
  render();
}

function needToken(text) {
  banner(text);
  byId("token-form").hidden = false;
  byId("token-form").classList.add("needed");
  byId("token-input").focus();
}

async function openSession(id, {updateHash = true} = {}) {
  stopEvents();
  resetBranchChoices();
  state.generation += 1;
  Object.assign(state, {sessionId: id || null, session: null, tree: null, projection: null, context: null, phase: "idle"});
  banner(null);
  notify(null);
  clearSearch();
  composer.loadDraft();
  if (updateHash) history.replaceState(null, "", id ? `#session=${encodeURIComponent(id)}` : "#");
  renderSessionList();
  render();
  if (!id) return;
  await refresh();
  if (state.sessionId === id && state.session) startEvents(id, state.generation);
}

// Whatever the user does first (a click on "New" while the page is still loading) waits
// for this: otherwise the load's own "open the latest session" lands after it and undoes it.
function loadAll() {
  state.loading = loadEverything();
  return state.loading;
}

async function loadEverything() {
  state.generation += 1;
  const generation = state.generation;
  stopEvents();
  // Nothing of the previous token's tenant may stay on the page.
  Object.assign(state, {config: null, sessions: [], sessionId: null, session: null, tree: null, projection: null, context: null});
  render();
  renderSessionList();
  banner(null);
  try {
    state.config = await api.config();
    const listing = await api.sessions();
    state.sessions = listing.sessions || [];
  } catch (exc) {
    state.sessions = [];
    renderSessionList();
    if (exc instanceof ApiError && exc.status === 401) {
      needToken(getToken() ? "This token is not valid here (unknown or revoked)." :
        "This server needs a token: paste yours above (it is kept for this tab only).");
    } else banner(exc.message || String(exc));
    return;
  }
  byId("token-form").classList.remove("needed");
  // Without --auth there is no token to give: the field would only cost a row (on a phone).
  byId("token-form").hidden = !state.config?.auth && !getToken();
  if (state.config?.default_model) {
    replaceChildren(byId("model-list"), el("option", {value: state.config.default_model}));
  }
  renderSessionList();
  if (generation !== state.generation) return;  // the user opened a session meanwhile
  const asked = hashSession();
  const wanted = asked ? await wholeId(asked) : latestActive(state.sessions);
  if (generation !== state.generation) return;
  await openSession(wanted);
}

// The session active last (its latest message, compaction or retry), archived ones only
// when nothing else is left: what a newcomer expects to see first.
function latestActive(sessions) {
  const shown = sessions.filter((s) => !s.archived);
  const pool = shown.length ? shown : sessions;
  let best = null;
  for (const s of pool) {
    const at = s.last_active_at || s.created_at || "";
    if (!best || at >= (best.last_active_at || best.created_at || "")) best = s;
  }
  return best ? best.session_id : null;
}

// A link may name a session by any unique prefix of its id, or `latest` (as the CLI and
// the API take it): the server answers with the whole id, which the page then uses.
async function wholeId(ref) {
  if (state.sessions.some((s) => s.session_id === ref)) return ref;
  try {
    return (await api.session(ref)).session_id || ref;
  } catch {
    return ref;  // the session's own load shows the error
  }
}

function hashSession() {
  const match = /session=([^&]+)/.exec(location.hash);
  return match ? decodeURIComponent(match[1]) : null;
}

// ------------------------------------------------------------------ live events

function stopEvents() {
  state.events?.abort();
  state.events = null;
}

async function startEvents(id, generation) {
  const controller = new AbortController();
  state.events = controller;
  let delay = 500;
  while (!controller.signal.aborted && generation === state.generation) {
    try {
      const response = await api.events(id, controller.signal);
      delay = 500;
      await readEvents(response, (name, data) => {
        if (generation !== state.generation) return;
        if (name === "state") {
          if (!state.busy || data.phase === "compacting") setPhase(data.phase, data);
          if (data.phase !== "compacting") scheduleRefresh();
        } else if (name === "gauge") {
          if (state.session) state.session.gauge = data;
          renderGauge(data);
        } else if (name.startsWith("compaction_")) {
          if (!state.busy) onCompactionEvent(name, data);
        } else if (["message", "branch_changed", "model_switched"].includes(name) && !state.busy) {
          scheduleRefresh();
        }
      });
    } catch (exc) {
      if (controller.signal.aborted) return;
      if (exc instanceof ApiError && (exc.status === 401 || exc.status === 404)) return;
    }
    // The stream ended (server restart, proxy timeout): reconnect, backing off.
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(delay * 2, 10000);
  }
}

// ------------------------------------------------------------------ actions

async function fork(node) {
  try {
    const session = await api.fork(state.sessionId, node.id);
    state.sessions.push(session);
    renderSessionList();
    await openSession(session.session_id);
    notify("Forked: this is a new session that continues from that reply.");
  } catch (exc) {
    notify(exc.message, true);
  }
}

async function newSession() {
  await state.loading;
  try {
    const session = await api.createSession({});
    state.sessions.push(session);
    renderSessionList();
    await openSession(session.session_id);
    byId("draft").focus();
  } catch (exc) {
    handleLoadError(exc);
  }
}

function showView(view) {
  byId("workspace").dataset.view = view;
  for (const tab of document.querySelectorAll(".view-tab")) {
    tab.setAttribute("aria-pressed", String(tab.dataset.view === view));
  }
  if (view === "settings") loadSettings();
}

function currentView() {
  return byId("workspace").dataset.view;
}

async function loadSettings() {
  renderSettings(null);
  try {
    renderSettings(await api.settings());
  } catch (exc) {
    renderSettings(null, exc.message || String(exc));
  }
}

// ------------------------------------------------------------------ wiring

function setup() {
  setupCheckpointDialog();
  setupReplay({
    // What the user was looking at when the import started: if they moved on meanwhile
    // (another view, another session), the import does not pull them away from it.
    onImportStart: () => ({view: currentView(), sessionId: state.sessionId}),
    onImported: async (result, before) => {
      const stayed = currentView() === before.view && state.sessionId === before.sessionId;
      await state.loading;
      const listing = await api.sessions().catch(() => null);
      if (listing) state.sessions = listing.sessions || [];
      renderSessionList();
      if (!stayed) return false;
      await openSession(result.session_id);
      showView("chat");
      return true;
    },
    onOpenSession: (id) => sessionHandlers.onOpen(id),
  });
  setupSearch({
    sessionId: () => state.sessionId,
    onOpen: (hit) => {
      showView("chat");
      if (!highlightMessage(hit.node_id)) notify("That message is not on the chat's branch any more.", true);
    },
  });
  byId("show-archived").addEventListener("change", renderSessionList);
  for (const tab of document.querySelectorAll(".view-tab")) {
    tab.addEventListener("click", () => showView(tab.dataset.view));
  }
  byId("session-select").addEventListener("change", (event) => openSession(event.target.value));
  byId("new-session").addEventListener("click", newSession);
  byId("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const input = byId("token-input");
    setToken(input.value.trim());
    input.value = "";
    input.placeholder = getToken() ? "token set (paste to replace)" : "Bearer token";
    loadAll();
  });
  byId("token-clear").addEventListener("click", () => {
    setToken("");
    byId("token-input").placeholder = "Bearer token";
    loadAll();
  });
  byId("token-input").placeholder = getToken() ? "token set (paste to replace)" : "Bearer token";
  window.addEventListener("hashchange", () => {
    const ref = hashSession();
    if (ref && ref !== state.sessionId) {
      wholeId(ref).then((id) => { if (id !== state.sessionId) openSession(id); });
    }
  });
  loadAll();
}

setup();
