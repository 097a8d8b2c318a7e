// The one way the console talks to the server: JSON over fetch, with a bearer credential
// when one is set. The prompt takes an API token and logs in with it (POST /api/sessions):
// the console keeps only the session token it gets, in sessionStorage (this tab only), so
// the long-lived API token is not stored in the browser. A 401 answer (no credential, or a
// session that expired) opens the prompt and, once logged in, the request is sent again.

const TOKEN_KEY = "noetl.api_token";

export class ApiError extends Error {
  constructor(status, body) {
    const message = (body && body.message) || (status ? `HTTP ${status}` : "the server did not answer");
    super(message);
    this.status = status;
    this.body = body || {};
    this.code = this.body.error || (status ? "http_error" : "unreachable");
  }
}

export function getToken() {
  try {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  } catch {
    return "";
  }
}

export function setToken(token) {
  try {
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch {
    /* storage disabled: the token lasts until the page reloads */
  }
}

let pendingPrompt = null;
let dismissedAt = 0; // when the prompt was last closed without a token
const QUIET_MS = 30000; // polls do not reopen a dismissed prompt for this long

/** Ask for a token (one prompt at a time); resolves to the new token or "" if canceled. */
export function askToken(reason) {
  if (pendingPrompt) return pendingPrompt;
  const dialog = document.getElementById("token-dialog");
  const form = document.getElementById("token-form");
  const input = form.elements.namedItem("token");
  document.getElementById("token-reason").textContent =
    reason || "Set the token sent with every request (Authorization: Bearer).";
  input.value = getToken();
  pendingPrompt = new Promise((resolve) => {
    const finish = (action) => {
      form.removeEventListener("submit", onSubmit);
      form.removeEventListener("click", onClick);
      dialog.removeEventListener("cancel", onCancel);
      if (action === "clear") setToken("");
      if (dialog.open) dialog.close();
      if (action !== "save") dismissedAt = Date.now();
      pendingPrompt = null;
      resolve(action === "save" ? getToken() : "");
    };
    const onSubmit = async (event) => {
      event.preventDefault();
      setToken(await login(input.value.trim()));
      finish("save");
    };
    const onClick = (event) => {
      const action = event.target && event.target.dataset && event.target.dataset.action;
      if (action === "clear" || action === "cancel") finish(action);
    };
    const onCancel = () => finish("cancel");
    form.addEventListener("submit", onSubmit);
    form.addEventListener("click", onClick);
    dialog.addEventListener("cancel", onCancel);
    dialog.showModal();
    input.focus();
  });
  return pendingPrompt;
}

/**
 * Log in with an API token: the session token the server answers with, or the credential
 * as given when it cannot open a session (it is a session token already, or the server
 * has no sessions); the next request says whether it is good.
 */
export async function login(credential) {
  if (!credential) return "";
  try {
    const response = await fetch("/api/sessions", {
      method: "POST",
      headers: { Accept: "application/json", Authorization: `Bearer ${credential}` },
      cache: "no-store",
    });
    if (response.ok) {
      const body = await response.json();
      if (body && typeof body.session_token === "string") return body.session_token;
    }
  } catch {
    /* unreachable: keep the credential, the next request reports the server's state */
  }
  return credential;
}

function url(path, query) {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query || {})) {
    if (value !== null && value !== undefined && value !== "") params.set(key, String(value));
  }
  const qs = params.toString();
  return qs ? `${path}?${qs}` : path;
}

async function send(path, { method = "GET", body, query, signal } = {}) {
  const headers = { Accept: "application/json" };
  const token = getToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  try {
    return await fetch(url(path, query), {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
      cache: "no-store",
    });
  } catch (err) {
    if (err && err.name === "AbortError") throw err;
    throw new ApiError(0, { error: "unreachable", message: "the server did not answer" });
  }
}

/**
 * Call the API: `api("/api/executions", {query: {limit: 50}})`. Resolves to the parsed JSON
 * body; rejects with an ApiError (status, code, message, body) on any non-2xx answer.
 */
export async function api(path, options = {}) {
  let response = await send(path, options);
  if (response.status === 401 && Date.now() - dismissedAt > QUIET_MS) {
    const token = await askToken("The server needs an API token (401 Unauthorized).");
    if (token) response = await send(path, options);
  }
  const text = await response.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = { message: text.slice(0, 300) };
    }
  }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}
