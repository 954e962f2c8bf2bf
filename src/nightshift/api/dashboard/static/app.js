// The dashboard: routing (#/ and #/runs/<id>), loading, polling every 2 s while a shown run is
// active, and asking for the key when the server answers 401.

import { ApiError, Unauthorized, forgetKey, getJson, saveKey, savedKey } from "./api.js";
import { formatClock, h, icon } from "./format.js";
import { isActive } from "./parts.js";
import { renderRun } from "./run.js";
import { FILTERS, renderRuns } from "./runs.js";

const POLL_MS = 2000;
const RETRY_MS = 5000;
const PAGE = 50;
const RUN_MESSAGES = 1000; // the API's largest page
const AGENT_MESSAGES = 30;

const state = {
  route: parseRoute(),
  filter: "all",
  limit: PAGE,
  runs: null, // the list view's runs, newest first
  run: null, // the run view's run
  messages: null, // the run view's latest messages, newest first
  messagesTruncated: false,
  openAgent: null, // the agent expanded in the run view
  agentDetails: new Map(), // agent id -> {agent, messages} or {error}
  agentsShown: PAGE,
  error: null, // the last failed load, shown above the data
  auth: null, // {message} while the server wants a key
  keyInUse: Boolean(savedKey()),
  updatedAt: null,
  polling: false,
  forceReload: false, // the Refresh button: fetch everything, even what seems unchanged
};

let generation = 0; // bumped by every load and navigation: an older answer is dropped
let navigation = 0; // bumped by every navigation: an agent loaded for another page is dropped
let timer = null;

const main = document.getElementById("main");
const live = document.getElementById("live");
const forgetButton = document.getElementById("forget");
const refreshButton = document.getElementById("refresh");

function parseRoute() {
  const match = window.location.hash.match(/^#\/runs\/(.+)$/);
  return match ? { view: "run", runId: decodeURIComponent(match[1]) } : { view: "list" };
}

const actions = {
  navigate(href) {
    window.location.hash = href;
  },
  setFilter(name) {
    state.filter = name;
    state.limit = PAGE;
    state.runs = null;
    render();
    refresh();
  },
  showMoreRuns() {
    state.limit = Math.min(state.limit + PAGE, 1000);
    refresh();
  },
  showMoreAgents() {
    state.agentsShown += PAGE;
    render();
  },
  async toggleAgent(agentId) {
    state.openAgent = state.openAgent === agentId ? null : agentId;
    render();
    if (state.openAgent && !state.agentDetails.has(agentId)) {
      const mine = navigation;
      try {
        const details = await loadAgent(state.route.runId, agentId);
        if (mine !== navigation) return;
        state.agentDetails.set(agentId, details);
      } catch (error) {
        if (mine !== navigation) return;
        handleError(error);
      }
      render();
    }
  },
};

async function loadList() {
  const runs = await getJson("/v1/messages/batches", {
    order: "desc",
    limit: state.limit,
    status: FILTERS[state.filter].statuses,
  });
  return () => {
    state.runs = runs;
  };
}

/** What changes when a run's messages can have changed: a step applied, an agent done. */
function signature(run) {
  const batches = (run.progress?.provider_batches || []).map((b) => [b.id, b.status, b.ended_at]);
  return JSON.stringify([run.status, run.updated_at, run.progress?.agents, batches]);
}

async function loadRun(runId) {
  const path = `/v1/messages/batches/${encodeURIComponent(runId)}`;
  const agentId = state.openAgent;
  const run = await getJson(path);
  // A provider batch can stay in progress for hours: while nothing moves, the messages (up to a
  // thousand) are not fetched again every 2 s.
  const same =
    !state.forceReload &&
    state.run?.id === run.id &&
    state.messages !== null &&
    signature(state.run) === signature(run);
  const [page, details] = await Promise.all([
    same ? null : getJson(`${path}/messages`, { order: "desc", limit: RUN_MESSAGES }),
    agentId && !(same && state.agentDetails.has(agentId)) ? loadAgent(runId, agentId) : null,
  ]);
  return () => {
    state.run = run;
    if (page) {
      state.messages = page.messages;
      state.messagesTruncated = page.messages.length >= RUN_MESSAGES;
    }
    if (details) state.agentDetails.set(agentId, details);
  };
}

/** The agent (with its memory blocks) and its latest messages in the run, oldest first. */
async function loadAgent(runId, agentId) {
  try {
    const [agent, page] = await Promise.all([
      getJson(`/v1/agents/${encodeURIComponent(agentId)}`),
      getJson(`/v1/messages/batches/${encodeURIComponent(runId)}/messages`, {
        agent_id: agentId,
        order: "desc",
        limit: AGENT_MESSAGES,
      }),
    ]);
    return { agent, messages: page.messages.reverse() };
  } catch (error) {
    if (error instanceof Unauthorized) throw error;
    return { error: error.message }; // e.g. the agent was deleted: the rest of the run still shows
  }
}

function handleError(error) {
  if (error instanceof Unauthorized) {
    clearTimeout(timer); // no refresh under the form while the user types
    timer = null;
    // A refused key is forgotten: it would only be refused again.
    state.auth = {
      message: state.keyInUse
        ? `The server did not accept that key (${error.message}).`
        : "This server needs an API key or the server password.",
    };
    forgetKey();
    state.keyInUse = false;
  } else {
    if (!(error instanceof ApiError)) console.error(error); // a bug of this page, not a server answer
    state.error = error instanceof ApiError ? error : new ApiError(0, String(error?.message || error));
  }
}

async function refresh() {
  clearTimeout(timer);
  timer = null;
  const mine = ++generation;
  if (document.hidden) {
    state.polling = false; // resumed by visibilitychange
    return;
  }
  try {
    const apply = state.route.view === "run" ? await loadRun(state.route.runId) : await loadList();
    if (mine !== generation) return;
    apply();
    state.forceReload = false;
    state.error = null;
    state.auth = null;
    state.updatedAt = new Date();
  } catch (error) {
    if (mine !== generation) return;
    handleError(error);
  }
  render();
  schedule();
}

function shownRuns() {
  if (state.route.view === "run") return state.run ? [state.run] : [];
  return state.runs || [];
}

function schedule() {
  state.polling = false;
  if (state.auth) {
    renderLive();
    return;
  }
  const notFound = state.error?.status === 404;
  if ((state.error && !notFound) || shownRuns().some(isActive)) {
    state.polling = true;
    timer = setTimeout(refresh, state.error ? RETRY_MS : POLL_MS);
  }
  renderLive();
}

function renderLive() {
  let text;
  let mode;
  if (state.auth) {
    [text, mode] = ["Locked", "locked"];
  } else if (state.error) {
    [text, mode] = [state.polling ? "Connection problem · retrying" : "Error", "error"];
  } else if (state.polling) {
    [text, mode] = ["Live · updating every 2 s", "live"];
  } else if (state.updatedAt) {
    [text, mode] = [`Updated ${formatClock(state.updatedAt)} · all runs final`, "idle"];
  } else {
    [text, mode] = ["Loading…", "idle"];
  }
  live.dataset.mode = mode;
  live.title = text;
  live.replaceChildren(h("span", { class: "dot", "aria-hidden": "true" }), h("span", { class: "live-text" }, text));
  forgetButton.hidden = !savedKey();
  refreshButton.hidden = Boolean(state.auth);
}

function render() {
  document.title = state.route.view === "run" ? `nightshift · ${state.route.runId}` : "nightshift · batch runs";
  let content;
  if (state.auth) content = [authForm()];
  else if (state.error && !shownData()) content = [errorPanel(state.error)];
  else {
    content = state.route.view === "run" ? renderRun(state, actions) : renderRuns(state, actions);
    if (state.error) content.unshift(errorBanner(state.error));
  }
  main.replaceChildren(...content.filter(Boolean));
  renderLive();
}

function shownData() {
  return state.route.view === "run" ? state.run !== null : state.runs !== null;
}

function describeError(error) {
  if (error.status === 0) return error.message;
  return `HTTP ${error.status}: ${error.message}`;
}

function errorBanner(error) {
  return h(
    "div",
    { class: "banner banner-error", role: "alert" },
    h("strong", {}, "Could not refresh. "),
    describeError(error),
    state.polling ? " Retrying in 5 s; the data below may be stale." : "",
  );
}

function errorPanel(error) {
  const notFound = error.status === 404;
  return h(
    "section",
    { class: "panel error-panel", role: "alert" },
    h("h2", {}, notFound ? "Not found" : "Something went wrong"),
    h("p", {}, describeError(error)),
    h(
      "p",
      {},
      state.route.view === "run" ? h("a", { href: "#/" }, "← All runs") : null,
      " ",
      h("button", { class: "button", onclick: refresh }, "Try again"),
    ),
  );
}

function authForm() {
  const input = h("input", {
    id: "api-key",
    name: "api-key",
    type: "password",
    autocomplete: "current-password",
    placeholder: "ns-… or the server password",
    required: true,
  });
  const form = h(
    "form",
    { class: "panel auth", "aria-labelledby": "auth-title" },
    h("div", { class: "empty-icon" }, icon("lock")),
    h("h2", { id: "auth-title" }, "Sign in to this server"),
    h("p", { class: "muted" }, state.auth.message),
    h("label", { for: "api-key" }, "API key or server password"),
    h("div", { class: "auth-row" }, input, h("button", { class: "button button-primary", type: "submit" }, "Connect")),
    h(
      "p",
      { class: "muted small" },
      "Kept in this browser's local storage and sent as ",
      h("code", {}, "Authorization: Bearer …"),
      " with every request. Create a key with ",
      h("code", {}, "nightshift keys create"),
      ".",
    ),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const key = input.value.trim();
    if (!key) return;
    saveKey(key);
    state.keyInUse = true;
    state.auth = null;
    main.replaceChildren(h("div", { class: "panel loading" }, "Connecting…"));
    refresh();
  });
  setTimeout(() => input.focus(), 0);
  return form;
}

function onNavigate() {
  const route = parseRoute();
  state.route = route;
  state.run = null;
  state.messages = null;
  state.openAgent = null;
  state.agentDetails = new Map();
  state.agentsShown = PAGE;
  state.error = null;
  navigation += 1;
  generation += 1;
  render();
  window.scrollTo(0, 0);
  refresh();
}

async function showVersion() {
  try {
    const health = await getJson("/v1/health");
    document.getElementById("version").textContent = `v${health.version}`;
  } catch {
    // the main view shows why the server cannot be reached
  }
}

window.addEventListener("hashchange", onNavigate);
document.addEventListener("visibilitychange", () => {
  if (!document.hidden && !state.auth) refresh();
});
refreshButton.addEventListener("click", () => {
  state.forceReload = true;
  if (!state.auth) refresh();
});
forgetButton.addEventListener("click", () => {
  forgetKey();
  state.keyInUse = false;
  refresh();
});
// Keep "2 min ago" and the open timeline's bars current between loads, even when not polling.
setInterval(() => {
  if (!state.auth && !document.hidden && shownData() && !document.activeElement?.closest?.("form")) render();
}, 30000);

showVersion();
render();
refresh();
