// The JSON API as the dashboard calls it: same origin, with the saved key as a Bearer token.

const KEY_NAME = "nightshift.apiKey";
let memoryKey = null; // the key when localStorage is unavailable

/** The server answered 401: no key, or a key it does not accept. */
export class Unauthorized extends Error {}

/** Any other failure, with the HTTP status (0 when the server could not be reached). */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function savedKey() {
  try {
    return localStorage.getItem(KEY_NAME) || null;
  } catch {
    return null; // storage disabled: the user types the key again after each reload
  }
}

export function saveKey(key) {
  try {
    localStorage.setItem(KEY_NAME, key);
  } catch {
    // kept for this page only (see memoryKey)
  }
  memoryKey = key;
}

export function forgetKey() {
  try {
    localStorage.removeItem(KEY_NAME);
  } catch {
    // nothing saved
  }
  memoryKey = null;
}

function currentKey() {
  return savedKey() || memoryKey;
}

/**
 * GET a JSON route. `params` values may be arrays (repeated query parameters); null and
 * undefined values are left out.
 */
export function getJson(path, params = {}) {
  return requestJson("GET", path, params);
}

/** PATCH a route that takes no body (e.g. cancelling a run) and read its JSON answer. */
export function patchJson(path) {
  return requestJson("PATCH", path);
}

async function requestJson(method, path, params = {}) {
  const url = new URL(path, window.location.origin);
  for (const [name, value] of Object.entries(params)) {
    for (const one of Array.isArray(value) ? value : [value]) {
      if (one !== null && one !== undefined) url.searchParams.append(name, String(one));
    }
  }
  const headers = { Accept: "application/json" };
  const key = currentKey();
  if (key) headers.Authorization = `Bearer ${key}`;
  let response;
  try {
    response = await fetch(url, { method, headers, cache: "no-store" });
  } catch (error) {
    throw new ApiError(0, `cannot reach the server (${error.message})`);
  }
  if (response.ok) return response.json();
  const detail = await errorDetail(response);
  if (response.status === 401) throw new Unauthorized(detail);
  throw new ApiError(response.status, detail);
}

async function errorDetail(response) {
  const text = await response.text().catch(() => "");
  try {
    const body = JSON.parse(text);
    if (body && typeof body.detail === "string") return body.detail;
  } catch {
    // not JSON: show the text itself
  }
  return text.trim().slice(0, 300) || response.statusText || "no detail";
}
