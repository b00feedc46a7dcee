// The live context gauge: the estimated size of the next request against the safe input limit.
import {byId, formatTokens} from "./dom.js";

export function renderGauge(gauge) {
  const meter = byId("gauge");
  const fill = byId("gauge-fill");
  const mark = byId("gauge-threshold");
  const text = byId("gauge-text");
  if (!gauge || !gauge.safe_input_limit) {
    fill.style.width = "0";
    mark.hidden = true;
    text.textContent = "–";
    meter.setAttribute("aria-valuenow", "0");
    meter.setAttribute("aria-valuetext", "no session");
    return;
  }
  const limit = gauge.safe_input_limit;
  const percent = Math.min(100, Math.round((100 * gauge.tokens) / limit));
  fill.style.width = `${percent}%`;
  fill.classList.toggle("warn", gauge.auto_threshold && gauge.tokens >= gauge.auto_threshold);
  fill.classList.toggle("full", gauge.tokens >= limit);
  mark.hidden = !gauge.auto_threshold;
  if (gauge.auto_threshold) mark.style.left = `${Math.min(100, (100 * gauge.auto_threshold) / limit)}%`;
  const words = `${formatTokens(gauge.tokens)} / ${formatTokens(limit)} tokens (${percent}%)`;
  text.textContent = words;
  text.title = gauge.auto_threshold
    ? `compacts automatically at ${formatTokens(gauge.auto_threshold)}; window ${formatTokens(gauge.context_window)}`
    : "";
  meter.setAttribute("aria-valuenow", String(percent));
  meter.setAttribute("aria-valuetext", words);
}
