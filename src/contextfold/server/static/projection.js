// What the next request holds: the latest checkpoint's summary, its ledger and pins, the raw
// tail verbatim, and the estimate against the limit (GET /projection).
import {byId, count, el, formatTokens, replaceChildren} from "./dom.js";
import {nodeLabel, nodeText} from "./nodes.js";

// The categories of core/report/breakdown.py, labelled as `contextfold context` labels them.
const CATEGORY_LABELS = [
  ["system", "System prompt"], ["tools", "Tools"], ["checkpoint", "Checkpoint summary"],
  ["pins", "Pins"], ["recall", "Recalled excerpts"], ["messages", "Recent messages (tail)"],
  ["tool_results", "Tool results"],
];

export function renderProjection(projection, {onCheckpoint, onUnpin, onPinText, context, cost, locked}) {
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
  // Every refresh rebuilds this pane; what someone is typing into the pin field (and its focus)
  // must survive a refresh that lands mid-typing, or the text and the Enter are lost.
  const field = document.getElementById("pin-text"); // absent before the first render
  const draft = field ? field.value : "";
  const typing = Boolean(field) && document.activeElement === field;
  replaceChildren(box,
    context ? contextSection(context, cost) : null,
    countsSection(projection),
    checkpoint ? summarySection(checkpoint, onCheckpoint) :
      el("section", {}, el("h3", {}, "Checkpoint summary"),
        el("p", {class: "muted"}, "No checkpoint yet: the model sees the whole branch.")),
    checkpoint ? ledgerSection(checkpoint) : null,
    pinsSection(pins, {onUnpin, onPinText, locked}),
    tailSection(projection.messages || []));
  const rebuilt = document.getElementById("pin-text");
  if (rebuilt) {
    rebuilt.value = draft;
    if (typing && !rebuilt.disabled) rebuilt.focus();
  }
}

/** Empty the pin field once its text is stored (a refresh alone keeps what was typed). */
export function clearPinField() {
  const field = document.getElementById("pin-text");
  if (field) field.value = "";
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
      // Measured, the system prompt and tools are inside the reported usage: the breakdown
      // below shows each category, so this list shows no second, different "tools" count.
      measured ? null : row("system prompt", b.system),
      measured ? null : row("tools", b.tools)),
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
  // An identifier is copied and compared: it may wrap only after its own separators (a
  // path's "/", a DOI's ".", a key's "-"), never inside a run of letters and digits; one
  // longer than the panel scrolls sideways instead of breaking ("9KH9TNS|J").
  return el("div", {class: "table-scroll"}, el("table", {class: "ledger"},
    el("thead", {}, el("tr", {}, el("th", {}, "kind"), el("th", {}, "identifier"), el("th", {}, "note"))),
    el("tbody", {}, entries.map((e) => el("tr", {},
      el("td", {}, e.kind || ""), el("td", {class: "ident"}, breakable(e.value || "")),
      el("td", {}, e.note || ""))))));
}

/** `text` with a line-break opportunity after each separator, none elsewhere. */
export function breakable(text) {
  return String(text).split(/(?<=[\/.\-_:?&=#@,;])/).flatMap((piece, i) => (i ? [el("wbr"), piece] : [piece]));
}

function ledgerSection(node) {
  const ledger = node.payload?.ledger || {};
  const entries = ledger.entries || [];
  const evicted = ledger.evicted || [];
  return el("section", {"aria-label": "Ledger"},
    el("h3", {}, `Ledger: ${count(entries.length, "identifier")}` +
      (evicted.length ? ` (${evicted.length} evicted for size, still in the history)` : "")),
    ledgerTable(entries));
}

export function activePins(projection) {
  // The projection lists the active pins (the checkpoint's, then later pin events).
  if (Array.isArray(projection?.pins)) return projection.pins;
  return projection?.checkpoint?.payload?.pins || [];
}

function pinsSection(pins, {onUnpin, onPinText, locked}) {
  const input = el("input", {type: "text", id: "pin-text", maxlength: 2000, spellcheck: "false",
    placeholder: "e.g. never overwrite refs/library.bib", disabled: locked});
  const form = el("form", {class: "pin-form", id: "pin-form"},
    el("label", {for: "pin-text"}, "Pin a short text"), input,
    el("button", {type: "submit", disabled: locked, title: locked ? "Wait for the compaction or the reply" : ""}, "Pin"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (input.value.trim()) onPinText?.(input.value.trim());
  });
  return el("section", {"aria-label": "Pins"},
    el("h3", {}, `Pins: ${pins.length}`),
    el("p", {class: "muted"}, "Every request carries the pins verbatim, after any compaction. Pin a message with its Pin button in the chat."),
    pins.length ? el("ul", {class: "pins", id: "pin-list"}, pins.map((p) => el("li", {},
      el("span", {class: "pre"}, p.text || ""),
      el("button", {type: "button", class: "unpin", disabled: locked, "aria-label": `Unpin: ${(p.text || "").slice(0, 40)}`,
        onclick: () => onUnpin?.(p.pin_id)}, "Unpin"))))
      : el("p", {class: "muted", id: "pin-list"}, "none"),
    form);
}

/** Where the next request's tokens go (GET /context, SPEC E9): a stacked bar and a table. */
function contextSection(context, cost) {
  const limit = context.limit || 1;
  const parts = context.parts || {};
  const bar = el("div", {class: "breakdown-bar", role: "img",
    "aria-label": `${formatTokens(context.used)} of ${formatTokens(context.limit)} tokens used, ${formatTokens(context.free)} free`});
  for (const [key] of CATEGORY_LABELS) {
    const share = (100 * (parts[key] || 0)) / Math.max(limit, context.used);
    if (share <= 0) continue;
    const seg = el("span", {class: `seg seg-${key}`, title: key});
    seg.style.width = `${share}%`; // CSSOM, not a style attribute: the CSP allows only this
    bar.append(seg);
  }
  const pct = (n) => `${Math.round((100 * n) / limit)}%`;
  const rows = CATEGORY_LABELS.map(([key, label]) => el("tr", {dataset: {category: key}},
    el("th", {scope: "row"}, el("span", {class: `swatch-box seg-${key}`}), label),
    el("td", {}, formatTokens(parts[key] || 0)), el("td", {}, pct(parts[key] || 0))));
  rows.push(el("tr", {dataset: {category: "free"}, class: "free-row"},
    el("th", {scope: "row"}, el("span", {class: "swatch-box seg-free"}), "Free"),
    el("td", {}, formatTokens(context.free)), el("td", {}, pct(context.free))));
  const saved = context.saved_tokens || 0;  // may be negative: the request grew
  return el("section", {"aria-label": "Context breakdown", id: "context-breakdown"},
    el("h3", {}, "Context breakdown"),
    bar,
    el("table", {class: "breakdown"},
      el("thead", {}, el("tr", {}, el("th", {}, "category"), el("th", {}, "tokens"), el("th", {}, "of limit"))),
      el("tbody", {}, rows)),
    el("p", {class: "muted"}, `Of the safe input limit of ${formatTokens(context.limit)} tokens ` +
      `(window ${formatTokens(context.context_window)}).` +
      (context.scaled ? " Parts are estimated and scaled to the measured total." : "")),
    nextCompaction(context.next_compaction),
    el("p", {class: "savings", id: "context-savings"},
      context.checkpoints
        ? `${saved >= 0 ? `Saved: ${formatTokens(saved)} tokens per request` : `Lost: the next request is ${formatTokens(-saved)} tokens larger than the whole history`}` +
          ` — the whole history is ${formatTokens(context.full_history_tokens)} ` +
          `tokens, the next request ${formatTokens(context.used)} (${count(context.checkpoints, "compaction")}).`
        : `Nothing saved yet: no compaction so far (the whole history is ${formatTokens(context.full_history_tokens)} tokens).`),
    cost ? costLine(cost) : null);
}

// When the next automatic compaction is expected (core/report/breakdown.next_compaction).
function nextCompaction(next) {
  if (!next) return null;
  const pace = next.turns !== null && next.turns !== undefined ? `, about ${count(next.turns, "turn")} at this session's pace` : "";
  return el("p", {class: "muted", id: "context-next"}, next.tokens_to_go
    ? `Next compaction in ${formatTokens(next.tokens_to_go)} tokens${pace} (automatic threshold ${formatTokens(next.auto_threshold)}).`
    : `Next compaction: due now (past the automatic threshold of ${formatTokens(next.auto_threshold)} tokens).`);
}

function costLine(cost) {
  const money = (v) => (v === null || v === undefined ? "–" : `$${Math.abs(Number(v)).toFixed(4)}`);
  const known = (v) => v !== null && v !== undefined;
  // `saved_usd` is the service's (core/money/costs: the full history against the requests as sent,
  // both through one cache model); it is compared with `as_sent_usd`, its other side, never
  // with the reported bill. A negative saving is a loss, said as one.
  let saved = "";
  if (known(cost.saved_usd) && known(cost.full_history_usd)) {
    const modelled = ` (modelled: the full history ${money(cost.full_history_usd)}, as sent ${money(cost.as_sent_usd)})`;
    saved = !cost.compactions ? ` — nothing saved yet: no compaction${modelled}`
      : cost.saved_usd < 0 ? ` — compaction cost ${money(cost.saved_usd)} more than sending the full history${modelled}`
      : ` — compaction saved ${money(cost.saved_usd)} against sending the full history${modelled}`;
  }
  // No price: say which model the catalog lacks instead of a bare dash.
  const spent = cost.usd === null || cost.usd === undefined
    ? `no price known for ${cost.model || "this model"} (the models file can add one)`
    : money(cost.usd);
  return el("p", {class: "savings", id: "context-cost"},
    `Cost so far: ${spent}${saved}. ${formatTokens(cost.input_tokens)} input tokens ` +
    `(${formatTokens(cost.cached_tokens)} cached), ${formatTokens(cost.output_tokens)} output` +
    (cost.summarizer_usd ? `; summaries ${money(cost.summarizer_usd)}` : "") + ".");
}

function tailSection(messages) {
  const shown = messages.filter((n) => n.kind !== "pin");
  return el("section", {"aria-label": "Raw tail"},
    el("h3", {}, `Raw tail: ${count(shown.length, "message")}, verbatim`),
    shown.length ? el("ol", {class: "tail", id: "projection-tail"}, shown.map((n) =>
      el("li", {class: "tail-item", dataset: {nodeId: n.id}},
        el("div", {class: "msg-head"}, el("span", {class: "msg-role"}, nodeLabel(n))),
        el("p", {class: "msg-text"}, nodeText(n)))))
      : el("p", {class: "muted"}, "nothing yet"));
}
