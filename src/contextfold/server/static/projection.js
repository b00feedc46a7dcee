// What the next request holds: the latest checkpoint's summary, its ledger and pins, the raw
// tail verbatim, and the estimate against the limit (GET /projection).
import {byId, el, formatTokens, replaceChildren} from "./dom.js";
import {nodeLabel, nodeText} from "./nodes.js";

export function renderProjection(projection, {onCheckpoint}) {
  const box = byId("projection");
  const total = byId("projection-total");
  if (!projection) {
    total.textContent = "";
    replaceChildren(box, el("p", {class: "empty"}, "No session open."));
    return;
  }
  const estimate = projection.estimate || {};
  total.textContent = `${formatTokens(estimate.tokens)} of ${formatTokens(projection.limit)} tokens`;
  const checkpoint = projection.checkpoint;
  const pins = activePins(projection);
  replaceChildren(box,
    countsSection(projection),
    checkpoint ? summarySection(checkpoint, onCheckpoint) :
      el("section", {}, el("h3", {}, "Checkpoint summary"),
        el("p", {class: "muted"}, "No checkpoint yet: the model sees the whole branch.")),
    checkpoint ? ledgerSection(checkpoint) : null,
    pinsSection(pins),
    tailSection(projection.messages || []));
}

function countsSection(projection) {
  const e = projection.estimate || {};
  const b = e.breakdown || {};
  const row = (label, value) => [el("dt", {}, label), el("dd", {}, formatTokens(value))];
  const measured = e.method === "usage+delta";
  return el("section", {"aria-label": "Token counts"},
    el("h3", {}, "Token counts"),
    el("dl", {class: "counts", id: "projection-counts"},
      row("next request", e.tokens),
      row("safe input limit", projection.limit),
      row("context window", projection.context_window),
      measured ? row("reported by the model (last reply)", b.baseline) : null,
      row(measured ? "added since (estimated)" : "messages + summary (estimated)", b.delta),
      row("system prompt", b.system),
      row("tools", b.tools)),
    el("p", {class: "muted"}, measured
      ? "Measured: the last reply's reported usage plus an estimate of what came after it."
      : "Estimated from the text (no reply has reported its usage yet)."));
}

function summarySection(node, onCheckpoint) {
  const p = node.payload || {};
  return el("section", {"aria-label": "Checkpoint summary"},
    el("h3", {}, "Checkpoint summary ",
      el("button", {type: "button", class: "link", onclick: () => onCheckpoint(node)}, "details")),
    el("p", {class: "muted"},
      `${p.summarizer || "summary"} · ${formatTokens(p.tokens_before)} → ` +
      `${formatTokens(p.tokens_after_estimate)} tokens`),
    el("div", {class: "summary-box"}, el("pre", {class: "pre", id: "projection-summary"}, p.summary || "")));
}

export function ledgerTable(entries) {
  if (!entries.length) return el("p", {class: "muted"}, "empty");
  return el("table", {},
    el("thead", {}, el("tr", {}, el("th", {}, "kind"), el("th", {}, "identifier"), el("th", {}, "note"))),
    el("tbody", {}, entries.map((e) => el("tr", {},
      el("td", {}, e.kind || ""), el("td", {}, e.value || ""), el("td", {}, e.note || "")))));
}

function ledgerSection(node) {
  const ledger = node.payload?.ledger || {};
  const entries = ledger.entries || [];
  const evicted = ledger.evicted || [];
  return el("section", {"aria-label": "Ledger"},
    el("h3", {}, `Ledger: ${entries.length} identifiers` +
      (evicted.length ? ` (${evicted.length} evicted for size, still in the history)` : "")),
    ledgerTable(entries));
}

function activePins(projection) {
  // The projection lists the active pins (the checkpoint's, then later pin events).
  if (Array.isArray(projection.pins)) return projection.pins.map((p) => p.text || "");
  return (projection.checkpoint?.payload?.pins || []).map((p) => p.text || "");
}

function pinsSection(pins) {
  return el("section", {"aria-label": "Pins"},
    el("h3", {}, `Pins: ${pins.length}`),
    pins.length ? el("ul", {}, pins.map((t) => el("li", {}, el("span", {class: "pre"}, t))))
      : el("p", {class: "muted"}, "none"));
}

function tailSection(messages) {
  const shown = messages.filter((n) => n.kind !== "pin");
  return el("section", {"aria-label": "Raw tail"},
    el("h3", {}, `Raw tail: ${shown.length} messages, verbatim`),
    shown.length ? el("ol", {class: "tail", id: "projection-tail"}, shown.map((n) =>
      el("li", {class: "tail-item", dataset: {nodeId: n.id}},
        el("div", {class: "msg-head"}, el("span", {class: "msg-role"}, nodeLabel(n))),
        el("p", {class: "msg-text"}, nodeText(n)))))
      : el("p", {class: "muted"}, "nothing yet"));
}
