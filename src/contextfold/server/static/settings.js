// The settings view: what this server runs with (GET /v1/settings): the default model and
// window, the summariser, and which providers' keys it holds — names only, never a value.
import {byId, el, formatTokens, replaceChildren} from "./dom.js";

export function renderSettings(settings, error) {
  const box = byId("settings-body");
  if (error) {
    replaceChildren(box, el("p", {class: "error"}, error));
    return;
  }
  if (!settings) {
    replaceChildren(box, el("p", {class: "muted"}, "Loading…"));
    return;
  }
  const row = (label, value) => [el("dt", {}, label), el("dd", {}, value ?? "–")];
  const keys = settings.provider_keys || [];
  replaceChildren(box,
    el("section", {class: "card"},
      el("h3", {}, "New sessions"),
      el("dl", {class: "counts settings-list", id: "settings-counts"},
        row("default model", settings.default_model),
        row("default context window", `${formatTokens(settings.default_context_window)} tokens`),
        row("safe input limit", `${formatTokens(settings.safe_input_limit)} tokens`),
        row("summariser", settings.summarizer),
        row("models allowed", settings.allowed_models ? settings.allowed_models.join(", ") : "any the server can serve"),
        row("tokens required", settings.auth ? `yes (you are tenant ${settings.tenant})` : "no (a local server)"))),
    el("section", {class: "card"},
      el("h3", {}, "Provider keys this server holds"),
      keys.length
        ? el("ul", {id: "settings-keys"}, keys.map((k) => el("li", {}, `${k.label} (${k.env_var})`)))
        : el("p", {class: "muted", id: "settings-keys"}, "None: only offline models and keyless local servers can be used."),
      el("p", {class: "muted"}, "Only the names are shown; the keys stay on the server and never reach this page.")));
}
