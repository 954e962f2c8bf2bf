// The list of batch runs, newest first, and the empty state that says how to start one.

import {
  formatAgo,
  formatClock,
  formatDuration,
  formatInt,
  formatUsd,
  fullTime,
  h,
  icon,
  parseTime,
} from "./format.js";
import {
  agentCounts,
  costCell,
  isActive,
  metadataTexts,
  progressBar,
  progressLabel,
  runBadge,
  runName,
  stepOf,
  tokensCell,
} from "./parts.js";

// Each filter's query to GET /v1/messages/batches. "Failed" finds runs that failed and completed
// runs in which some agent failed (the API's has_failures); the statuses are Letta's. "Sleep-time"
// keeps the sleep-time agents' runs (the API's kind), which the poller gathers on its own.
export const FILTERS = {
  all: { label: "All", params: {} },
  active: { label: "Active", params: { status: ["created", "running"] } },
  completed: { label: "Completed", params: { status: ["completed"] } },
  failed: { label: "Failed", params: { has_failures: true } },
  cancelled: { label: "Cancelled", params: { status: ["cancelled"] } },
  sleeptime: { label: "Sleep-time", params: { kind: "sleeptime" } },
};

export function renderRuns(state, actions) {
  const runs = state.runs;
  const parts = [header(state, actions)];
  if (runs === null) {
    parts.push(h("div", { class: "panel loading" }, "Loading runs…"));
  } else if (runs.length === 0 && state.filter === "all") {
    parts.push(emptyState(state));
  } else if (runs.length === 0) {
    parts.push(h("div", { class: "panel empty-small" }, `No ${FILTERS[state.filter].label.toLowerCase()} runs.`));
  } else {
    parts.push(table(runs, actions));
    if (runs.length >= state.limit) {
      parts.push(
        h("div", { class: "more" }, h("button", { class: "button", onclick: actions.showMoreRuns }, "Show older runs")),
      );
    }
  }
  return parts;
}

function header(state, actions) {
  const runs = state.runs || [];
  const nothingYet = state.runs !== null && runs.length === 0 && state.filter === "all";
  const active = runs.filter(isActive).length;
  const summary = [];
  if (runs.length) summary.push(`${formatInt(runs.length)} ${runs.length === 1 ? "run" : "runs"}`);
  if (active) summary.push(`${formatInt(active)} active`);
  return h(
    "div",
    { class: "page-head" },
    h(
      "div",
      {},
      h("h1", {}, "Batch runs"),
      h("p", { class: "muted subtitle" }, summary.join(" · ") || "\u00a0"),
      sleeptimeCost(state.costs),
    ),
    nothingYet
      ? null
      : h(
          "div",
          { class: "chips", role: "group", "aria-label": "Filter runs by status or kind" },
          Object.entries(FILTERS).map(([name, filter]) =>
            h(
              "button",
              {
                class: `chip${state.filter === name ? " chip-on" : ""}`,
                "aria-pressed": state.filter === name ? "true" : "false",
                onclick: () => actions.setFilter(name),
              },
              filter.label,
            ),
          ),
        ),
  );
}

/**
 * What the sleep-time agents' runs cost, apart from the runs users asked for, with what the
 * normal API would have charged for the same tokens; nothing when there is no sleep-time run.
 */
function sleeptimeCost(costs) {
  const found = (costs?.kinds || []).find((kind) => kind.kind === "sleeptime");
  if (!found || !found.runs) return null;
  return h(
    "p",
    {
      class: "sleeptime-cost small",
      title: `${formatInt(found.requests)} requests of ${formatInt(found.agents)} sleep-time agents in ${formatInt(found.runs)} runs`,
    },
    h("span", { class: "kind-tag" }, "sleep-time"),
    ` ${formatUsd(found.cost_usd)} `,
    h("span", { class: "muted" }, `(normal API: ${formatUsd(found.cost_without_batch_usd)})`),
  );
}

function table(runs, actions) {
  return h(
    "div",
    { class: "panel table-wrap" },
    h(
      "table",
      { class: "runs" },
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          h("th", {}, "Run"),
          h("th", {}, "Status"),
          h("th", { class: "col-progress" }, "Agents done"),
          h("th", { class: "num" }, "Step"),
          h("th", { class: "num" }, "Tokens"),
          h("th", { class: "num" }, "Cost"),
          h("th", {}, "Created"),
        ),
      ),
      h(
        "tbody",
        {},
        runs.map((run) => row(run, actions)),
      ),
    ),
  );
}

function row(run, actions) {
  const counts = agentCounts(run);
  const created = parseTime(run.created_at);
  const completed = parseTime(run.completed_at);
  const href = `#/runs/${encodeURIComponent(run.id)}`;
  const name = runName(run);
  const metadata = metadataTexts(run).slice(0, 3).join(" · ");
  const batches = run.progress?.provider_batches?.length || 0;
  return h(
    "tr",
    {
      class: "run-row",
      dataset: { runId: run.id, status: run.status },
      onclick: (event) => {
        if (!event.target.closest("a")) actions.navigate(href);
      },
    },
    h(
      "td",
      {},
      name ? h("a", { class: "run-name", href }, name) : null,
      h("a", { class: `mono run-id${name ? " muted small" : ""}`, href }, run.id),
      metadata ? h("div", { class: "muted small run-metadata" }, metadata) : null,
      run.kind === "sleeptime"
        ? h("span", { class: "kind-tag", title: "Sleep-time agents' run, gathered by the poller" }, "sleep-time")
        : null,
    ),
    h("td", {}, runBadge(run)),
    h("td", { class: "col-progress" }, progressBar(counts), progressLabel(counts)),
    h(
      "td",
      { class: "num" },
      h("div", {}, String(stepOf(run))),
      h("div", { class: "muted small" }, `${batches} ${batches === 1 ? "batch" : "batches"}`),
    ),
    h("td", { class: "num" }, tokensCell(run)),
    h("td", { class: "num" }, costCell(run)),
    h(
      "td",
      { title: fullTime(created) },
      h("div", {}, formatAgo(created)),
      h(
        "div",
        { class: "muted small" },
        completed && created ? `took ${formatDuration(completed - created)}` : formatClock(created),
      ),
    ),
  );
}

function emptyState(state) {
  const origin = window.location.origin;
  const auth = state.keyInUse ? ` \\\n  -H "Authorization: Bearer $NIGHTSHIFT_KEY"` : "";
  const agent = [
    `curl -s ${origin}/v1/agents/ -H 'content-type: application/json'${auth} -d '{`,
    `  "name": "ada", "model": "anthropic/claude-3-5-haiku-20241022",`,
    `  "memory_blocks": [{"label": "persona", "value": "I am Ada, a careful archivist."}]`,
    `}'`,
  ].join("\n");
  const run = [
    `curl -s ${origin}/v1/messages/batches -H 'content-type: application/json'${auth} -d '{`,
    `  "requests": [{"agent_id": "<the agent id>", "messages": [{"role": "user", "content": "Hello!"}]}]`,
    `}'`,
  ].join("\n");
  return h(
    "section",
    { class: "panel empty" },
    h("div", { class: "empty-icon" }, icon("moon")),
    h("h2", {}, "No runs yet"),
    h(
      "p",
      {},
      "A batch run steps many agents at once through the providers' batch APIs, at half the price. ",
      "Create an agent, then start a run with its id; it shows up here.",
    ),
    codeBlock("1. Create an agent", agent),
    codeBlock("2. Start a batch run", run),
    h(
      "p",
      { class: "muted small" },
      "This page refreshes every 2 s while a run is active. Press Refresh after starting one.",
    ),
  );
}

function codeBlock(title, text) {
  const copy = h("button", { class: "button button-small copy" }, "Copy");
  copy.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(text);
      copy.textContent = "Copied";
    } catch {
      copy.textContent = "Select and copy";
    }
    setTimeout(() => {
      copy.textContent = "Copy";
    }, 1500);
  });
  return h("div", { class: "code" }, h("div", { class: "code-head" }, h("span", {}, title), copy), h("pre", {}, text));
}
