// The dashboard: routing (#/, #/runs/<id> and #/agents), loading, polling every 2 s while a shown
// run is active, cancelling a run, and asking for the key when the server answers 401.

import { renderAgents } from "./agents.js";
import { ApiError, Unauthorized, forgetKey, getJson, patchJson, saveKey, savedKey } from "./api.js";
import { formatClock, h, icon } from "./format.js";
import { isActive, runName } from "./parts.js";
import { renderRun } from "./run.js";
import { FILTERS, renderRuns } from "./runs.js";

const POLL_MS = 2000;
const RETRY_MS = 5000;
const PAGE = 50;
const RUN_MESSAGES = 1000; // the API's largest page
const AGENT_MESSAGES = 30;
const API_PAGE = 1000; // the largest page of the API's lists

const state = {
  route: parseRoute(),
  filter: "all",
  limit: PAGE,
  runs: null, // the list view's runs, newest first
  costs: null, // the organization's costs by kind of run (main, sleeptime), for the list's header
  costsFor: null, // the list's ended runs when the costs were read
  run: null, // the run view's run
  messages: null, // the run view's latest messages, newest first
  messagesTruncated: false,
  runAgents: null, // the run view's agents (name, state, step, tokens, cost), by agent id
  runAgentsFor: 0, // how many agents runAgents was loaded for
  cancelling: false, // the run view's cancel request is on its way
  cancelError: null, // why the last cancel failed
  agents: null, // the agents view's agents, newest first
  agentLimit: PAGE,
  openAgent: null, // the agent expanded in the run view or the agents view
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
  const hash = window.location.hash;
  const match = hash.match(/^#\/runs\/(.+)$/);
  if (match) return { view: "run", runId: decodeURIComponent(match[1]) };
  if (/^#\/agents\/?$/.test(hash)) return { view: "agents" };
  return { view: "list" };
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
    refresh();
  },
  showMoreAgentsListed() {
    state.agentLimit = Math.min(state.agentLimit + PAGE, API_PAGE);
    refresh();
  },
  toggleListedAgent(agentId) {
    state.openAgent = state.openAgent === agentId ? null : agentId;
    render();
  },
  async cancelRun(run) {
    const name = runName(run);
    const which = name ? `"${name}" (${run.id})` : run.id;
    const question =
      `Cancel run ${which}?\n\nNo further steps are taken and its open provider batches are ` +
      "cancelled at the provider. Steps already applied stay applied.";
    if (!window.confirm(question)) return;
    const mine = navigation;
    state.cancelling = true;
    state.cancelError = null;
    render();
    try {
      const cancelled = await patchJson(`/v1/messages/batches/${encodeURIComponent(run.id)}/cancel`);
      if (mine !== navigation) return;
      state.run = cancelled;
      state.forceReload = true; // its agents and messages changed too
    } catch (error) {
      if (mine !== navigation) return;
      if (error instanceof Unauthorized) handleError(error);
      else state.cancelError = error.message;
    } finally {
      if (mine === navigation) state.cancelling = false;
    }
    render();
    if (!state.auth) refresh();
  },
  async toggleAgent(agentId) {
    state.openAgent = state.openAgent === agentId ? null : agentId;
    render();
    if (state.openAgent && !state.agentDetails.has(agentId) && !deletedAgent(agentId)) {
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
    ...FILTERS[state.filter].params,
  });
  // The costs add up every run of the organization: read again when a shown run has ended since
  // (or on Refresh), not at each poll of a running one.
  const ended = runs
    .filter((run) => !isActive(run))
    .map((run) => run.id)
    .join();
  const reread = state.costs === null || state.forceReload || ended !== state.costsFor;
  const costs = reread ? await getJson("/v1/messages/batches/costs") : null;
  return () => {
    state.runs = runs;
    if (costs) {
      state.costs = costs;
      state.costsFor = ended;
    }
  };
}

/** What changes when a run's messages can have changed: a step applied, an agent done. */
function signature(run) {
  const batches = (run.progress?.provider_batches || []).map((b) => [b.id, b.status, b.ended_at]);
  return JSON.stringify([run.status, run.updated_at, run.progress?.agents, batches]);
}

async function loadAgentsList() {
  const agents = await getJson("/v1/agents/", { order: "desc", limit: state.agentLimit });
  return () => {
    state.agents = agents;
  };
}

/** The first `count` agents of the run (by agent id), following the API's pages. */
async function loadRunAgents(runId, count) {
  const path = `/v1/messages/batches/${encodeURIComponent(runId)}/agents`;
  const found = [];
  let after = null;
  while (found.length < count) {
    const limit = Math.min(API_PAGE, count - found.length);
    const page = (await getJson(path, { after, limit })).agents;
    found.push(...page);
    if (page.length < limit) break;
    after = page[page.length - 1].agent_id;
  }
  return found;
}

async function loadRun(runId) {
  const path = `/v1/messages/batches/${encodeURIComponent(runId)}`;
  const agentId = deletedAgent(state.openAgent) ? null : state.openAgent;
  const wanted = state.agentsShown;
  const run = await getJson(path);
  // A provider batch can stay in progress for hours: while nothing moves, the messages (up to a
  // thousand) are not fetched again every 2 s.
  const same =
    !state.forceReload &&
    state.run?.id === run.id &&
    state.messages !== null &&
    signature(state.run) === signature(run);
  const [page, details, runAgents] = await Promise.all([
    same ? null : getJson(`${path}/messages`, { order: "desc", limit: RUN_MESSAGES }),
    agentId && !(same && state.agentDetails.has(agentId)) ? loadAgent(runId, agentId) : null,
    same && state.runAgents !== null && state.runAgentsFor === wanted ? null : loadRunAgents(runId, wanted),
  ]);
  return () => {
    state.run = run;
    if (runAgents) {
      state.runAgents = runAgents;
      state.runAgentsFor = wanted;
    }
    if (page) {
      state.messages = page.messages;
      state.messagesTruncated = page.messages.length >= RUN_MESSAGES;
    }
    if (details) state.agentDetails.set(agentId, details);
  };
}

/** Whether the run view lists this agent as deleted: there is nothing of it left to load. */
function deletedAgent(agentId) {
  return Boolean(agentId && state.runAgents?.some((a) => a.agent_id === agentId && a.agent_deleted));
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
    const loaders = { run: () => loadRun(state.route.runId), agents: loadAgentsList, list: loadList };
    const apply = await loaders[state.route.view]();
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
  } else if (state.updatedAt && state.route.view === "agents") {
    [text, mode] = [`Updated ${formatClock(state.updatedAt)}`, "idle"];
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

const TITLES = { list: "batch runs", agents: "agents" };
const VIEWS = { list: renderRuns, run: renderRun, agents: renderAgents };

function render() {
  const view = state.route.view;
  const runTitle = state.run ? runName(state.run) || state.run.id : state.route.runId;
  document.title = `nightshift · ${view === "run" ? runTitle : TITLES[view]}`;
  for (const link of document.querySelectorAll(".nav a")) {
    const current = link.dataset.view === (view === "run" ? "list" : view);
    if (current) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  let content;
  if (state.auth) content = [authForm()];
  else if (state.error && !shownData()) content = [errorPanel(state.error)];
  else {
    content = VIEWS[view](state, actions);
    if (state.error) content.unshift(errorBanner(state.error));
  }
  main.replaceChildren(...content.filter(Boolean));
  renderLive();
}

function shownData() {
  const shown = { run: state.run, agents: state.agents, list: state.runs };
  return shown[state.route.view] !== null;
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
      state.route.view !== "list" ? h("a", { href: "#/" }, "← All runs") : null,
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
  state.runAgents = null;
  state.runAgentsFor = 0;
  state.cancelling = false;
  state.cancelError = null;
  state.agents = null;
  state.agentLimit = PAGE;
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
