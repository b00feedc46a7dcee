// Import a session file, or replay one at a chosen window and chart each request's size.
import {api, ApiError} from "./api.js";
import {explanationRows, openDetail} from "./checkpoint.js";
import {byId, count, el, formatTokens, replaceChildren} from "./dom.js";
import {ledgerTable} from "./projection.js";

const SVG = "http://www.w3.org/2000/svg";

export function setupReplay({onImportStart, onImported, onOpenSession}) {
  byId("import-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const status = byId("import-result");
    const file = byId("import-file").files[0];
    if (!file) return;
    status.className = "result";
    status.textContent = "Importing…";
    const before = onImportStart();
    try {
      const result = await api.importFile(file, byId("import-format").value, byId("import-title").value);
      status.textContent = `Imported ${count(result.nodes, "node")} as ${result.format}` +
        (result.warnings?.length ? ` (${count(result.warnings.length, "warning")}: ${result.warnings.join("; ")})` : ".");
      const opened = await onImported(result, before);
      if (!opened) {
        status.append(" ", el("button", {type: "button", class: "link",
          onclick: () => onOpenSession(result.session_id)}, "Open it"));
      }
    } catch (exc) {
      status.className = "result error";
      replaceChildren(status, ...importRefusal(exc, onOpenSession));
    }
  });
  const windowInput = byId("replay-window");
  byId("replay-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const status = byId("replay-status");
    const file = byId("replay-file").files[0];
    if (!file) return;
    // A new replay: the previous report goes, so an error is never shown above an old chart.
    replaceChildren(byId("replay-report"));
    status.className = "result";
    replaceChildren(status, "Replaying…");
    const params = {
      context_window: windowInput.value,
      model: byId("replay-model").value.trim(),
      overhead: byId("replay-overhead").value,
    };
    try {
      const report = await (await api.replay(file, params, "json")).json();
      replaceChildren(status);
      let png = null;
      if (!report.series) png = URL.createObjectURL(await (await api.replay(file, params, "png")).blob());
      renderReport(report, png);
    } catch (exc) {
      status.className = "result error";
      replaceChildren(status, sentence(exc));
      const smallest = exc instanceof ApiError ? exc.body.smallest_window : null;
      if (smallest) {
        status.append(" ", el("button", {type: "button", id: "replay-use-smallest", onclick: () => {
          windowInput.value = String(smallest);
          byId("replay-submit").click();
        }}, `Replay at ${formatTokens(smallest)} tokens`));
      }
    }
  });
}

/**
 * An API error as a sentence for people: no field names, no error codes. The server's
 * words name the request's fields (`context_window`); the page's labels are words.
 */
export function sentence(exc) {
  if (!(exc instanceof ApiError)) return String(exc?.message || exc);
  let text = (exc.message || "").trim() || "The server refused this request.";
  text = text.replace(/\bcontext_window\b/g, "context window").replace(/\bmax_tokens\b/g, "reply size")
    .replace(/`/g, "").replace(/\s*\((?:bad_request|validation_error|[a-z]+_[a-z_]+)\)\s*$/, "");
  text = text.replace(/^[a-z_.]+: /, (m) => (m.includes("_") || m.includes(".") ? "" : m));
  text = text.charAt(0).toUpperCase() + text.slice(1);
  return /[.!?]$/.test(text) ? text : `${text}.`;
}

/** A refused import: the sentence, and a link to the session that already holds the history. */
function importRefusal(exc, onOpenSession) {
  const held = exc instanceof ApiError ? (exc.body.session_id || exc.body.existing_session_id) : null;
  if (!held) return [sentence(exc)];
  const title = exc.body.session_title || exc.body.existing_title || held;
  return [`This history is already stored in the session “${title}”; importing it again would store it twice. `,
    el("button", {type: "button", class: "link", id: "import-open-existing", onclick: () => onOpenSession(held)},
      `Open “${title}”`)];
}

function renderReport(report, png) {
  const row = (label, value) => [el("dt", {}, label), el("dd", {}, String(value ?? "–"))];
  replaceChildren(byId("replay-report"),
    el("h3", {}, "Replay report"),
    el("div", {class: "report-grid"},
    el("dl", {class: "counts", id: "replay-counts"},
      row("model", report.model),
      row("requests", report.requests),
      row("compactions", report.compactions),
      row("largest request (tokens)", formatTokens(report.max_projected_tokens)),
      row("safe input limit", formatTokens(report.safe_input_limit)),
      row("over the limit", report.over_limit_requests),
      // SPEC L5: requests that carried excerpts of folded messages matching the latest one.
      row("with a recall block", report.recall_requests),
      row("invalid tool sequences", report.invalid_tool_sequences),
      row("dropped messages", report.dropped_messages),
      row("fixed overhead", `${formatTokens(report.overhead_tokens)} (${report.overhead_source || "–"})`)),
    report.series ? chart(report.series, report.safe_input_limit) :
      png ? el("img", {class: "chart", src: png, alt: "Request size over the replayed session"}) : null));
}

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

/** 1, 2 or 5 times a power of ten: round axis steps. */
function niceStep(rough) {
  const power = 10 ** Math.floor(Math.log10(Math.max(rough, 1)));
  return [1, 2, 5, 10].map((m) => m * power).find((s) => s >= rough) || 10 * power;
}

/** Request size per request (contextfold's and the original's), the limit and compactions;
 * each compaction mark is a button that opens what that compaction did. Narrow screens get
 * a narrower drawing, so its text stays readable when scaled to the screen. */
export function chart(series, fallbackLimit) {
  const requests = series.requests || [];
  const limit = series.safe_input_limit || fallbackLimit || 0;
  const narrow = (byId("replay-report").clientWidth || window.innerWidth) < 600;
  const width = narrow ? 420 : 900;
  const height = narrow ? 300 : 320;
  const pad = {left: narrow ? 54 : 62, right: 12, top: 14, bottom: 40};
  const top = Math.max(limit, ...requests.map((r) => Math.max(r.estimated_tokens || 0, r.recorded_tokens || 0)), 1);
  const step = niceStep(top / 4);
  const maxY = Math.ceil(top / step) * step;
  const n = Math.max(requests.length - 1, 1);
  const x = (i) => pad.left + ((width - pad.left - pad.right) * i) / n;
  const y = (v) => height - pad.bottom - ((height - pad.top - pad.bottom) * v) / maxY;
  const root = svg("svg", {viewBox: `0 0 ${width} ${height}`, class: `chart${narrow ? " narrow" : ""}`, role: "img",
    "aria-label": `Request size over ${count(requests.length, "request")}; limit ${limit} tokens`});
  const short = (v) => (narrow && v >= 1000 ? `${Math.round(v / 1000)}k` : formatTokens(v));
  for (let v = 0; v <= maxY; v += step) {
    root.append(svg("line", {x1: pad.left, x2: width - pad.right, y1: y(v), y2: y(v), stroke: "#e6e9ed"}));
    root.append(svg("text", {x: pad.left - 6, y: y(v) + 4, "text-anchor": "end"}, short(v)));
  }
  // x ticks: round request numbers, about six across.
  const xStep = niceStep(requests.length / (narrow ? 4 : 8));
  for (let i = 0; i < requests.length; i += xStep) {
    root.append(svg("line", {x1: x(i), x2: x(i), y1: height - pad.bottom, y2: height - pad.bottom + 4, stroke: "#9aa3ad", class: "x-tick"}));
    root.append(svg("text", {x: x(i), y: height - pad.bottom + 16, "text-anchor": "middle", class: "x-tick-label"}, String(i + 1)));
  }
  root.append(svg("text", {x: (width + pad.left) / 2, y: height - 4, "text-anchor": "middle"}, "request"));
  if (limit) {
    root.append(svg("line", {x1: pad.left, x2: width - pad.right, y1: y(limit), y2: y(limit),
      stroke: "#b3261e", "stroke-dasharray": "6 4"}));
  }
  const line = (key, color, cls) => {
    // A request the original agent recorded no usage for (0 or missing) is left out.
    const points = requests.map((r, i) => [i, r[key]]).filter(([, v]) => v > 0);
    if (!points.length) return;
    root.append(svg("polyline", {points: points.map(([i, v]) => `${x(i)},${y(v)}`).join(" "),
      fill: "none", stroke: color, "stroke-width": 1.8, class: cls}));
  };
  line("recorded_tokens", "#9aa3ad", "recorded");
  line("estimated_tokens", "#1f5fbf", "estimated");
  (series.compactions || []).forEach((c, k) => root.append(compactionMark(c, k, x(Math.max(0, (c.before_request ?? 0) - 0.5)),
    {top: pad.top, bottom: height - pad.bottom})));
  const legend = el("div", {class: "chart-legend"},
    el("span", {}, el("span", {class: "swatch swatch-est"}), "with contextfold"),
    el("span", {}, el("span", {class: "swatch swatch-rec"}), "the original agent"),
    el("span", {}, el("span", {class: "swatch swatch-limit"}), "safe input limit"),
    el("span", {}, el("span", {class: "swatch swatch-comp"}), `compaction (${(series.compactions || []).length}): press a mark for its detail`));
  return el("figure", {class: "chart-figure"}, root, legend);
}

/** A compaction's mark: a dashed line with a wide invisible target, a keyboard-usable button. */
function compactionMark(c, k, at, {top, bottom}) {
  const label = `Compaction ${k + 1}, before request ${(c.before_request ?? 0) + 1}: ` +
    `${formatTokens(c.tokens_before)} → ${formatTokens(c.tokens_after)} tokens`;
  const group = svg("g", {class: "compaction-mark", tabindex: 0, role: "button", "aria-label": label});
  group.append(svg("title", {}, label));
  group.append(svg("rect", {x: at - 6, y: top, width: 12, height: bottom - top, fill: "transparent"}));
  group.append(svg("line", {x1: at, x2: at, y1: top, y2: bottom, stroke: "#d9a400", "stroke-dasharray": "3 3", "stroke-width": 1.5}));
  const open = () => openCompaction(c, k);
  group.addEventListener("click", open);
  group.addEventListener("keydown", (event) => {
    if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      open();
    }
  });
  return group;
}

function openCompaction(c, k) {
  const row = (label, value) => [el("dt", {}, label), el("dd", {}, value ?? "–")];
  const p = c.checkpoint?.payload || {};
  const entries = p.ledger?.entries || [];
  openDetail(`Replay compaction ${k + 1} (checkpoint)`,
    el("section", {},
      el("dl", {class: "counts", id: "replay-compaction"},
        row("before request", String((c.before_request ?? 0) + 1)),
        row("tokens before", formatTokens(c.tokens_before)),
        row("tokens after (estimated)", formatTokens(c.tokens_after)),
        row("messages folded", c.summarized_messages === undefined ? "–" : String(c.summarized_messages)),
        row("messages kept raw", c.kept_messages === undefined ? "–" : String(c.kept_messages)),
        row("raw tail kept (tokens)", formatTokens(c.kept_tokens)),
        row("tail budget", formatTokens(c.tail_budget)),
        row("trigger", c.trigger),
        row("summariser", p.summarizer))),
    el("section", {"aria-label": "Why it ran"},
      el("h3", {}, "Why it ran, and what it saved"),
      el("dl", {class: "counts explanation"},
        ...explanationRows(c.explanation, c.explanation?.realised, row, c.trigger))),
    c.checkpoint ? el("section", {"aria-label": "Ledger"},
      el("h3", {}, `Ledger: ${count(entries.length, "identifier")}`), ledgerTable(entries)) : null,
    c.checkpoint ? el("section", {"aria-label": "Summary"},
      el("h3", {}, "Summary"),
      el("div", {class: "summary-box"}, el("pre", {class: "pre", id: "replay-summary"}, p.summary || ""))) : null,
    el("p", {class: "muted"}, "A replay runs in memory and stores nothing: import the file to keep this history as a session."));
}
