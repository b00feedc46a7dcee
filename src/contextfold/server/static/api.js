// The HTTP API of `contextfold serve` (docs/service.md), from the browser.
// The token lives in sessionStorage (gone when the tab closes) and is sent only in the
// Authorization header; server-sent events are read with fetch() because EventSource cannot
// send headers.

const TOKEN_KEY = "contextfold.token";

export function getToken() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** An error answer of the API: `status`, `type` and the whole JSON `body`. */
export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error) || `HTTP ${status}`);
    this.status = status;
    this.type = (body && body.type) || "http_error";
    this.body = body || {};
  }
}

function headers(extra = {}) {
  const h = {...extra};
  const token = getToken();
  if (token) h.Authorization = `Bearer ${token}`;
  return h;
}

async function errorOf(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = {error: `${response.status} ${response.statusText}`, type: "http_error"};
  }
  return new ApiError(response.status, body);
}

/** fetch() with the token; throws ApiError on a network failure or an error status. */
export async function request(method, path, {json, body, accept, signal, contentType, extraHeaders} = {}) {
  const h = headers({...(accept ? {Accept: accept} : {}), ...(extraHeaders || {})});
  let payload = body;
  if (json !== undefined) {
    h["Content-Type"] = "application/json";
    payload = JSON.stringify(json);
  } else if (contentType) {
    h["Content-Type"] = contentType;
  }
  let response;
  try {
    response = await fetch(path, {method, headers: h, body: payload, signal});
  } catch (exc) {
    if (exc.name === "AbortError") throw exc;
    throw new ApiError(0, {error: "The server cannot be reached.", type: "network"});
  }
  if (!response.ok) throw await errorOf(response);
  return response;
}

/** JSON in, JSON out. */
export async function call(method, path, json, options = {}) {
  const response = await request(method, path, {...options, json});
  if (response.status === 204) return null;
  return response.json();
}

/**
 * Read a text/event-stream body, calling onEvent(name, data) per event (data JSON-parsed
 * when it is JSON). Comment lines (": keep-alive") are skipped. Resolves when the stream ends.
 */
export async function readEvents(response, onEvent) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    buffer += value.replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      dispatch(block, onEvent);
    }
  }
  if (buffer.trim()) dispatch(buffer, onEvent);
}

function dispatch(block, onEvent) {
  let name = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") name = value;
    else if (field === "data") data.push(value);
  }
  if (!data.length) return;
  const text = data.join("\n");
  let parsed = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // not JSON: hand over the text as it is
  }
  onEvent(name, parsed);
}

const enc = encodeURIComponent;

/** The endpoints the page uses, one function each. */
export const api = {
  config: () => call("GET", "/v1/config"),
  sessions: () => call("GET", "/v1/sessions"),
  createSession: (body) => call("POST", "/v1/sessions", body),
  session: (id) => call("GET", `/v1/sessions/${enc(id)}`),
  tree: (id) => call("GET", `/v1/sessions/${enc(id)}/tree`),
  projection: (id) => call("GET", `/v1/sessions/${enc(id)}/projection`),
  compact: (id, instructions) =>
    call("POST", `/v1/sessions/${enc(id)}/compact`, {instructions: instructions || null, wait: false}),
  cancel: (id) => call("POST", `/v1/sessions/${enc(id)}/cancel`, {}),
  fork: (id, nodeId) => call("POST", `/v1/sessions/${enc(id)}/fork`, {node_id: nodeId}),
  switchModel: (id, model) => call("POST", `/v1/sessions/${enc(id)}/model`, {model}),
  settings: () => call("GET", "/v1/settings"),
  context: (id) => call("GET", `/v1/sessions/${enc(id)}/context`),
  search: (id, q) => call("GET", `/v1/sessions/${enc(id)}/search?${new URLSearchParams({q})}`),
  pin: (id, body) => call("POST", `/v1/sessions/${enc(id)}/pins`, body),
  unpin: (id, pinId) => call("DELETE", `/v1/sessions/${enc(id)}/pins/${enc(pinId)}`),
  patchSession: (id, body) => call("PATCH", `/v1/sessions/${enc(id)}`, body),
  /** The export as a Blob (fetched with the token, so a plain link would not do). */
  exportSession: (id, format = "openai") =>
    request("GET", `/v1/sessions/${enc(id)}/export?format=${enc(format)}`).then((r) => r.blob()),
  /**
   * messages / retry / edit as a stream of events (the reply as it is written). `key`: the
   * Idempotency-Key of a send (the same for every attempt of one message).
   */
  turn: (id, operation, body, signal, key) =>
    request("POST", `/v1/sessions/${enc(id)}/${operation}`,
      {json: body, accept: "text/event-stream", signal,
        extraHeaders: key ? {"Idempotency-Key": key} : {}}),
  events: (id, signal) =>
    request("GET", `/v1/sessions/${enc(id)}/events`, {accept: "text/event-stream", signal}),
  importFile: (file, format, title) => {
    // The file's name is the title when neither the form nor the recording gives one.
    const query = new URLSearchParams({format: format || "auto", filename: file.name || ""});
    if (title) query.set("title", title);
    return request("POST", `/v1/import?${query}`,
      {body: file, contentType: "application/octet-stream"}).then((r) => r.json());
  },
  replay: (file, params, chart) => {
    const query = new URLSearchParams({chart});
    for (const [key, value] of Object.entries(params)) if (value) query.set(key, value);
    return request("POST", `/v1/replay?${query}`,
      {body: file, contentType: "application/octet-stream"});
  },
};

/** A fresh Idempotency-Key (crypto.randomUUID needs a secure context; this does not). */
export function newKey() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}
