// Sending, retrying and editing, and the rules while a compaction runs (SPEC U1-U4):
// the draft stays editable during a compaction; an explicit send freezes it, the request
// waits on the server and goes out when the compaction succeeds (U2); on cancel or failure
// nothing is sent and the draft is given back (U3); retry / edit / fork / model switch /
// compact are disabled meanwhile (U4).
import {api, ApiError, newKey, readEvents} from "./api.js";
import {startPendingTurn} from "./chat.js";
import {byId} from "./dom.js";
import {indexTree, nodeText, pathTo} from "./nodes.js";

export const LOCK_REASON = "Not while earlier context is being compacted";

/**
 * Wire the composer. `app` provides: state ({sessionId, session, tree, phase, busy, frozen,
 * editing}), setPhase(phase, detail), refresh(), notify(text, isError), updateControls().
 */
export function setupComposer(app) {
  const draft = byId("draft");
  const form = byId("composer");
  const draftKey = () => `contextfold.draft.${app.state.sessionId}`;

  draft.addEventListener("input", () => {
    if (app.state.sessionId && !app.state.editing) sessionStorage.setItem(draftKey(), draft.value);
  });
  draft.addEventListener("keydown", (event) => {
    // Enter sends, Shift+Enter is a new line; never while an input method composes a word.
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const text = draft.value;
    if (!text.trim() || !app.state.sessionId || app.state.frozen) return;
    runTurn(app, app.state.editing ? "edit" : "messages", text);
  });
  byId("retry").addEventListener("click", () => runTurn(app, "retry", null));
  byId("edit").addEventListener("click", () => startEditing(app));
  byId("edit-cancel").addEventListener("click", () => stopEditing(app, true));
  byId("compact").addEventListener("click", () => compactNow(app));
  byId("cancel-compaction").addEventListener("click", () => cancelCompaction(app));
  byId("switch-model").addEventListener("click", () => switchModel(app));
  byId("model-input").addEventListener("keydown", (event) => {
    if (event.key === "Enter") {
      event.preventDefault();
      switchModel(app);
    }
  });

  return {
    /** Show the draft saved for the session just opened. */
    loadDraft() {
      stopEditing(app, false);
      draft.value = (app.state.sessionId && sessionStorage.getItem(draftKey())) || "";
    },
    clearDraftStore() {
      if (app.state.sessionId) sessionStorage.removeItem(draftKey());
    },
  };
}

function lastUserMessage(app) {
  if (!app.state.tree) return null;
  const index = indexTree(app.state.tree);
  return pathTo(index, index.leafId).filter((n) => n.kind === "message" && n.role === "user").pop() || null;
}

function startEditing(app) {
  const node = lastUserMessage(app);
  if (!node) {
    app.notify("There is no message of yours to edit yet.", true);
    return;
  }
  const draft = byId("draft");
  app.state.editing = {savedDraft: draft.value};
  draft.value = nodeText(node);
  byId("composer").classList.add("editing");
  byId("draft-label").textContent = "Editing your last message: Send replaces it on a new branch and asks again";
  byId("send").textContent = "Send edit";
  byId("edit-cancel").hidden = false;
  app.updateControls();
  draft.focus();
}

function stopEditing(app, restore) {
  const editing = app.state.editing;
  app.state.editing = null;
  byId("composer").classList.remove("editing");
  byId("draft-label").textContent = "Message";
  byId("send").textContent = "Send";
  byId("edit-cancel").hidden = true;
  if (restore && editing) byId("draft").value = editing.savedDraft;
  app.updateControls();
}

function freeze(app, frozen) {
  app.state.frozen = frozen;
  const draft = byId("draft");
  draft.readOnly = frozen;
  byId("composer").classList.toggle("frozen", frozen);
  app.updateControls();
}

// One Idempotency-Key per draft: sending the same text again in the same session (after a
// dropped connection, a failed stream) reuses it, so the server never stores it twice.
let sendKey = null;

function keyFor(sessionId, text) {
  if (!sendKey || sendKey.sessionId !== sessionId || sendKey.text !== text) {
    sendKey = {sessionId, text, key: newKey()};
  }
  return sendKey.key;
}

/** messages / retry / edit, streamed; the outcome decides what happens to the draft. */
async function runTurn(app, operation, text) {
  const sessionId = app.state.sessionId;
  const waiting = app.state.phase === "compacting";
  const status = byId("send-status");
  freeze(app, true);
  app.state.busy = true;
  app.updateControls();
  app.notify(null);
  const waitText = "Waiting for the compaction to finish; your message goes out right after.";
  status.textContent = waiting ? waitText : "Sending…";
  const bubbles = startPendingTurn(operation === "retry" ? null : text, waiting ? "waiting" : "sending");
  let outcome = null;
  const body = operation === "retry" ? {} : {text};
  const key = operation === "messages" ? keyFor(sessionId, text) : null;
  try {
    const response = await api.turn(sessionId, operation, body, undefined, key);
    await readEvents(response, (name, data) => {
      if (name === "state") {
        app.setPhase(data.phase, data);
        const compacting = data.phase === "compacting";
        status.textContent = compacting ? waitText : "Sending…";
        bubbles.setStatus(compacting ? "waiting" : "sending");
      } else if (name.startsWith("compaction_")) {
        app.onCompactionEvent(name, data);
        if (name === "compaction_finished" || name === "compaction_noop") {
          status.textContent = "Sending…";
          bubbles.setStatus("sending");
        }
      } else if (name === "delta") {
        bubbles.addText(data.text || "");
      } else if (name === "done") {
        outcome = {ok: true, turn: data};
      } else if (name === "error") {
        outcome = {ok: false, error: new ApiError(data.status || 0, data)};
      }
    });
  } catch (exc) {
    outcome = {ok: false, error: exc};
  }
  if (!outcome) {
    outcome = {ok: false, error: new ApiError(0, {error: "The reply stream ended early.", type: "stream_ended"})};
  }
  app.state.busy = false;
  status.textContent = "";
  freeze(app, false);
  const keyDone = outcome.ok ||
    ["idempotency_key_reused", "idempotency_key_replaced"].includes(outcome.error.type);
  if (key && keyDone && sendKey && sendKey.key === key) sendKey = null; // the next one is new
  if (app.state.sessionId !== sessionId) return; // the user opened another session meanwhile
  if (outcome.ok) {
    if (operation !== "retry") {
      byId("draft").value = "";
      app.clearDraftStore();
    }
    if (app.state.editing) stopEditing(app, false);
  } else {
    bubbles.remove();
    app.notify(turnError(outcome.error), true);
  }
  await app.refresh();
  // Back to the message box, unless the user moved the keyboard elsewhere while the reply was
  // being recorded (the tree's arrows, a pin): the refresh must not take their focus away.
  if ((!outcome.ok || operation !== "retry") && keyboardIdle()) byId("draft").focus();
}

/** True while no control outside the composer holds the keyboard. */
function keyboardIdle() {
  const active = document.activeElement;
  return !active || active === document.body || byId("composer").contains(active);
}

function turnError(error) {
  if (!(error instanceof ApiError)) return String(error);
  if (error.type === "send_aborted") {
    const why = error.body.reason === "cancelled" ? "The compaction was cancelled" : "The compaction failed";
    return `${why}: nothing was sent. Your draft is kept below.`;
  }
  if (error.type === "draft_too_large") {
    return `This message cannot fit the model even after compaction (${error.body.estimated_tokens} tokens ` +
      `against a limit of ${error.body.safe_input_limit}). Nothing was saved; your draft is kept.`;
  }
  return `${error.message} Nothing was lost: your draft is kept.`;
}

async function compactNow(app) {
  try {
    const answer = await api.compact(app.state.sessionId, null);
    if (answer?.state) app.setPhase(answer.state.phase, answer.state);
    else await app.refresh();
    // "Compact now" is disabled while it runs: keep the keyboard on the control that matters.
    if (app.state.phase === "compacting") byId("cancel-compaction").focus();
  } catch (exc) {
    app.notify(exc.message, true);
  }
}

async function cancelCompaction(app) {
  byId("cancel-compaction").disabled = true;
  byId("compacting-text").textContent = "Cancelling…";
  try {
    await api.cancel(app.state.sessionId);
  } catch (exc) {
    app.notify(exc.message, true);
  }
  await app.refresh();
}

async function switchModel(app) {
  const model = byId("model-input").value.trim();
  if (!model || !app.state.sessionId || model === app.state.session?.model) return;
  try {
    await api.switchModel(app.state.sessionId, model);
    app.notify(`Switched to ${model}.`, false);
  } catch (exc) {
    app.notify(exc.message, true);
  }
  await app.refresh();
}
