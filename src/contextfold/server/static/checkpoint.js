// A checkpoint's detail: what it folded, tokens before and after, the summariser, the ledger's
// evictions. Opened from the chat, the tree or the projection.
import {byId, count, el, formatTime, formatTokens, preview, replaceChildren} from "./dom.js";
import {foldedBy, indexTree, nodeLabel, nodeText} from "./nodes.js";
import {ledgerTable} from "./projection.js";

const TRIGGERS = {
  threshold: "above the automatic threshold",
  cost: "cost trigger: cheaper to compact now",
  overflow: "the next request would not fit",
  manual: "asked by the user",
  provider: "the provider's own compaction",
};

/** A signed saving as the server computed it: a loss keeps its minus sign, never $0. */
export function formatSaving(value, unit) {
  if (value === null || value === undefined) return "–";
  const sign = value < 0 ? "−" : "+";
  if (unit === "tokens") return `${sign}${formatTokens(Math.abs(value))} tokens`;
  const abs = Math.abs(value);
  return `${sign}$${abs >= 0.01 || abs === 0 ? abs.toFixed(2) : abs.toFixed(4)}`;
}

/** Why a compaction ran and what it saved (issue 40): the explanation the checkpoint stored
 * and the realised saving the session's cost object computed (`cost.checkpoints`). */
export function explanationRows(explanation, realised, row, asked = null) {
  if (!explanation) return [row("trigger", asked), row("saving", "not recorded (an older checkpoint)")];
  const e = explanation;
  const paid = realised && realised.requests
    ? formatSaving(e.unit === "tokens" ? realised.tokens : realised.usd, e.unit) +
      ` over ${count(realised.requests, "request")}`
    : "no request since";
  return [
    row("trigger", `${e.trigger} (${TRIGGERS[e.trigger] || e.trigger})`),
    row("before → after", `${formatTokens(e.tokens_before)} → ${formatTokens(e.tokens_after)} tokens`),
    row("expected saving", e.expected_saving === null ? "–" :
      `${formatSaving(e.expected_saving, e.unit)} over ${count(e.horizon, "request")}`),
    row("break-even", e.break_even === null ? (e.expected_saving === null ? "–" : "never") :
      `request ${e.break_even}`),
    row("realised saving", paid),
  ];
}

export function openCheckpoint(node, tree, cost = null) {
  const dialog = byId("checkpoint-dialog");
  const p = node.payload || {};
  const details = p.details || {};
  const index = indexTree(tree);
  const folded = foldedBy(index, node);
  const evicted = details.ledger?.evicted || [];
  const masking = details.action === "mask";
  byId("checkpoint-title").textContent =
    `${masking ? "Masking step" : "Checkpoint"} of ${formatTime(node.created_at)}`;
  const row = (label, value) => [el("dt", {}, label), el("dd", {}, value ?? "–")];
  replaceChildren(byId("checkpoint-body"),
    el("section", {},
      el("dl", {class: "counts"},
        row("tokens before", formatTokens(p.tokens_before)),
        row("tokens after (estimated)", formatTokens(p.tokens_after_estimate)),
        row("summariser", p.summarizer),
        row("model", p.model),
        row("profile", p.profile),
        row("messages folded", String(folded.length)),
        row("ledger", details.ledger ?
          `${count(details.ledger.entries, "entry", "entries")}, ${formatTokens(details.ledger.tokens)} of ` +
          `${formatTokens(details.ledger.cap)} tokens` : "–"),
        details.instructions ? row("instructions", details.instructions) : null,
        masking ? row("tool results masked", String(details.masked_messages ?? 0)) : null)),
    el("section", {"aria-label": "Why it ran"},
      el("h3", {}, "Why it ran, and what it saved"),
      el("dl", {class: "counts explanation"},
        ...explanationRows(details.explanation, cost?.checkpoints?.[node.id], row, details.trigger))),
    el("section", {"aria-label": "Folded messages"},
      el("h3", {}, `What it folded: ${count(folded.length, "message")}`),
      folded.length ? el("ol", {class: "folded"}, folded.map((n) => el("li", {},
        el("strong", {}, `${nodeLabel(n)}: `), preview(nodeText(n), 160))))
        : el("p", {class: "muted"}, masking ? "A masking step folds nothing: it only shortens old tool results in what the model sees." : "nothing")),
    el("section", {"aria-label": "Evictions"},
      el("h3", {}, `Evicted from the ledger for size: ${evicted.length}`),
      evicted.length ? ledgerTable(evicted) : el("p", {class: "muted"}, "none"),
      evicted.length ? el("p", {class: "muted"}, "Evicted identifiers stay in the durable history; the model can find them with recall.") : null),
    el("section", {"aria-label": "Summary"},
      el("h3", {}, "Summary"),
      el("div", {class: "summary-box"}, el("pre", {class: "pre"}, p.summary || ""))));
  if (!dialog.open) dialog.showModal();
  byId("checkpoint-close").focus();
}

/** The dialog with another title and body (a replay's compaction). */
export function openDetail(title, ...body) {
  const dialog = byId("checkpoint-dialog");
  byId("checkpoint-title").textContent = title;
  replaceChildren(byId("checkpoint-body"), ...body);
  if (!dialog.open) dialog.showModal();
  byId("checkpoint-close").focus();
}

export function setupCheckpointDialog() {
  const dialog = byId("checkpoint-dialog");
  byId("checkpoint-close").addEventListener("click", () => dialog.close());
  dialog.addEventListener("click", (event) => {
    if (event.target === dialog) dialog.close(); // a click on the backdrop
  });
}
