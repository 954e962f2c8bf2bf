// One run: its progress, the cancel button, the cost and throughput chart, the step timeline
// (provider batches), its agents (by name, with tokens and cost) and their memory.

import {
  describeMessage,
  formatAgo,
  formatClock,
  formatDuration,
  formatInt,
  formatUsd,
  fullTime,
  h,
  parseTime,
  savingText,
} from "./format.js";
import { stepChart } from "./chart.js";
import {
  agentCounts,
  agentLabel,
  badge,
  batchEnd,
  batchOpen,
  isActive,
  memoryBlocks,
  metadataTexts,
  neverSubmitted,
  progressBar,
  runBadge,
  runName,
  shownStep,
  stepOf,
  usageOf,
  usageParts,
  usageTitle,
} from "./parts.js";

export function renderRun(state, actions) {
  const run = state.run;
  const back = h("a", { class: "back", href: "#/" }, "← All runs");
  if (run === null) return [back, h("div", { class: "panel loading" }, "Loading run…")];
  return [
    back,
    title(state, run, actions),
    runError(run),
    cards(run),
    failures(run),
    callback(run),
    stepChart(run),
    timeline(run),
    agents(state, run, actions),
  ];
}

// Why a run failed before its first step (its agents deleted meanwhile, or the step could not be
// written); failures after it are the failed agents' own.
function runError(run) {
  if (!run.error) return null;
  return h("p", { class: "panel run-error", role: "alert" }, h("strong", {}, "The run failed: "), run.error);
}

function cancelButton(state, run, actions) {
  const failed = state.cancelError
    ? h("span", { class: "error-text small cancel-error", role: "alert" }, `Could not cancel: ${state.cancelError}`)
    : null;
  if (!isActive(run)) return failed;
  const button = h(
    "button",
    {
      class: "button button-danger cancel-run",
      type: "button",
      disabled: state.cancelling,
      title: "Stop the run: no further steps; its open provider batches are cancelled at the provider",
      onclick: () => actions.cancelRun(run),
    },
    state.cancelling ? "Cancelling…" : "Cancel run",
  );
  return h("div", { class: "run-actions" }, failed, button);
}

function title(state, run, actions) {
  const created = parseTime(run.created_at);
  const completed = parseTime(run.completed_at);
  const meta = [h("span", { title: fullTime(created) }, `created ${formatClock(created)} (${formatAgo(created)})`)];
  if (completed) {
    meta.push(h("span", { title: fullTime(completed) }, `ended ${formatClock(completed)}`));
    meta.push(h("span", {}, `took ${formatDuration(completed - created)}`));
  } else if (isActive(run)) {
    meta.push(h("span", {}, `running for ${formatDuration(Date.now() - created)}`));
  }
  for (const text of metadataTexts(run)) meta.push(h("span", { class: "run-metadata" }, text));
  const name = runName(run);
  return h(
    "div",
    { class: "run-head" },
    h(
      "div",
      { class: "run-head-line" },
      h(
        "h1",
        {},
        name ? h("span", { class: "run-name" }, name) : null,
        h("span", { class: `mono run-title${name ? " run-title-small" : ""}` }, run.id),
        runBadge(run, "badge-large"),
      ),
      cancelButton(state, run, actions),
    ),
    h("p", { class: "muted run-meta" }, meta),
  );
}

function card(label, value, ...rest) {
  return h(
    "div",
    { class: "card" },
    h("div", { class: "card-label" }, label),
    h("div", { class: "card-value" }, value),
    rest,
  );
}

function cards(run) {
  const counts = agentCounts(run);
  const usage = usageOf(run);
  const cost = run.progress?.cost_usd || 0;
  const without = run.progress?.cost_without_batch_usd || 0;
  const batches = run.progress?.provider_batches || [];
  const legend = ["running", "finished", "failed", "cancelled"].map((name) =>
    h("span", { class: `legend legend-${name}` }, `${formatInt(counts[name])} ${name}`),
  );
  return h(
    "div",
    { class: "cards" },
    // Done counts the agents that finished: failed and cancelled ones show in the bar, not here.
    card("Agents done", `${counts.percent}%`, progressBar(counts), h("div", { class: "legends" }, legend)),
    card(
      isActive(run) ? "Current step" : "Last step",
      String(stepOf(run)),
      h("div", { class: "muted" }, `${batches.length} provider ${batches.length === 1 ? "batch" : "batches"}`),
    ),
    card(
      "Tokens",
      formatInt(usage.total),
      h(
        "div",
        { class: "muted", title: usageTitle(usage) },
        `${formatInt(usage.input)} in · ${formatInt(usage.output)} out`,
        h("br"),
        `cache ${formatInt(usage.cacheRead)} read · ${formatInt(usage.cacheWrite)} written`,
      ),
    ),
    card(
      "Cost",
      formatUsd(cost),
      h("div", { class: "muted" }, `${formatUsd(without)} without batch`),
      savedLine("batch-saved", "batch", run.progress?.batch_savings_usd ?? without - cost),
      savedLine("cache-saved", "prompt cache", run.progress?.cache_savings_usd || 0),
      // What the stragglers taken over for the deadline cost above the batch price, when any were.
      takenOver(run).length
        ? h("div", { class: "takeover-cost muted" }, `deadline take-over ${formatUsd(run.progress?.takeover_usd || 0)}`)
        : null,
    ),
  );
}

function takenOver(run) {
  return (run.progress?.provider_batches || []).filter((b) => b.taken_over);
}

// What the batch discount or the prompt cache saved; the cache can lose money (one-hour writes
// cost twice the input price and may never be read back), shown as what it cost.
function savedLine(kind, by, value) {
  return h("div", { class: `${kind} ${value > 0 ? "text-saved" : "muted"}` }, savingText(value, by));
}

function failures(run) {
  const list = run.progress?.failures || [];
  if (!list.length) return null;
  return section(
    "Failed agents",
    `${list.length}`,
    h(
      "div",
      { class: "panel table-wrap" },
      h(
        "table",
        {},
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            h("th", {}, "Agent"),
            h("th", { class: "num" }, "Failed at step"),
            h("th", {}, "Request"),
            h("th", {}, "Error"),
          ),
        ),
        h(
          "tbody",
          {},
          list.map((f) =>
            h(
              "tr",
              {},
              h("td", {}, agentLabel(f.agent_name, f.agent_id, f.agent_deleted)),
              h("td", { class: "num" }, String(shownStep(f.step_number))),
              h("td", {}, badge(f.request_status)),
              h("td", { class: "error-text" }, f.error || ""),
            ),
          ),
        ),
      ),
    ),
  );
}

function callback(run) {
  if (!run.callback_url) return null;
  let status = "not sent yet";
  if (run.callback_sent_at)
    status = `sent ${formatClock(parseTime(run.callback_sent_at))}, HTTP ${run.callback_status_code}`;
  else if (run.callback_error) status = `failing: ${run.callback_error}`;
  return h(
    "p",
    { class: "panel callback" },
    h("strong", {}, "Callback "),
    h("span", { class: "mono" }, run.callback_url),
    ` · ${status}`,
  );
}

function section(name, note, ...body) {
  return h("section", { class: "section" }, h("h2", {}, name, note ? h("span", { class: "count" }, note) : null), body);
}

const COUNT_ORDER = ["processing", "succeeded", "errored", "canceled", "expired"];

function requestCounts(counts) {
  const entries = Object.entries(counts || {})
    .filter(([, n]) => n)
    .sort(([a], [b]) => COUNT_ORDER.indexOf(a) - COUNT_ORDER.indexOf(b));
  if (!entries.length) return h("span", { class: "muted" }, "—");
  return entries.map(([name, n]) => h("span", { class: `count-chip count-${name}` }, `${formatInt(n)} ${name}`));
}

function timeline(run) {
  const batches = run.progress?.provider_batches || [];
  if (!batches.length) {
    return section("Step timeline", "", h("div", { class: "panel empty-small" }, "No provider batch submitted yet."));
  }
  const now = Date.now();
  const starts = batches.map((b) => parseTime(b.created_at)?.getTime() ?? now);
  const ends = batches.map((b) => batchEnd(run, b, now));
  const runStart = Math.min(parseTime(run.created_at)?.getTime() ?? now, ...starts);
  const runEnd = Math.max(parseTime(run.completed_at)?.getTime() ?? 0, ...ends, runStart + 1);
  const span = runEnd - runStart;
  const rows = batches.map((b, i) => {
    const left = (100 * (starts[i] - runStart)) / span;
    const width = Math.max(0.8, (100 * (ends[i] - starts[i])) / span);
    const open = batchOpen(run, b);
    const unsent = neverSubmitted(b);
    return h(
      "tr",
      { class: "batch-row", dataset: { batchId: b.id, status: b.status } },
      h("td", { class: "num" }, String(shownStep(b.step_number))),
      h(
        "td",
        {},
        h("div", {}, b.provider),
        h(
          "div",
          { class: "mono muted small", title: b.id },
          b.provider_batch_id || (unsent ? "never submitted" : "not submitted yet"),
        ),
      ),
      h(
        "td",
        {},
        // Applied or not, a batch the provider never had did nothing there: it says so instead.
        unsent && b.status !== "cancelled"
          ? h("span", { class: "badge badge-unsent", dataset: { status: b.status } }, "not submitted")
          : badge(b.status),
        b.provider_status ? h("div", { class: "muted small" }, `provider: ${b.provider_status}`) : null,
        b.taken_over
          ? h("div", { class: "taken-over small" }, `${formatInt(b.taken_over)} taken over for the deadline`)
          : null,
        b.error ? h("div", { class: "error-text small" }, b.error) : null,
      ),
      h("td", { class: "counts" }, requestCounts(b.request_counts)),
      h("td", { title: fullTime(parseTime(b.created_at)) }, formatClock(parseTime(b.created_at))),
      h(
        "td",
        { title: fullTime(parseTime(b.ended_at)) },
        b.ended_at ? formatClock(parseTime(b.ended_at)) : h("span", { class: "muted" }, "—"),
      ),
      h(
        "td",
        { class: "num" },
        formatDuration(ends[i] - starts[i]),
        open ? h("span", { class: "muted" }, " so far") : null,
      ),
      h(
        "td",
        { class: "col-gantt" },
        h(
          "div",
          { class: "gantt" },
          h("span", {
            class: `gantt-bar gantt-${b.status}${b.error ? " gantt-error" : ""}`,
            style: `left: ${left}%; width: ${width}%`,
          }),
        ),
      ),
    );
  });
  return section(
    "Step timeline",
    `${batches.length} provider ${batches.length === 1 ? "batch" : "batches"}`,
    h(
      "div",
      { class: "panel table-wrap" },
      h(
        "table",
        { class: "timeline" },
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            h("th", { class: "num" }, "Step"),
            h("th", {}, "Provider"),
            h("th", {}, "Status"),
            h("th", {}, "Requests"),
            h("th", {}, "Created"),
            h("th", {}, "Ended"),
            h("th", { class: "num" }, "Duration"),
            h(
              "th",
              { class: "col-gantt" },
              h("span", { class: "gantt-scale" }, h("span", {}, "start"), h("span", {}, formatDuration(span))),
            ),
          ),
        ),
        h("tbody", {}, rows),
      ),
    ),
  );
}

/** The latest messages of the run by agent: how many, the last one, the last thing said. */
function messagesByAgent(messages) {
  const groups = new Map();
  for (const message of [...messages].reverse()) {
    let group = groups.get(message.agent_id);
    if (!group) {
      group = { count: 0, last: null, lastSaid: null };
      groups.set(message.agent_id, group);
    }
    group.count += 1;
    group.last = message;
    if (message.role === "assistant") group.lastSaid = message;
  }
  return groups;
}

function agents(state, run, actions) {
  const total = agentCounts(run).total;
  const list = state.runAgents;
  const note = list === null ? "" : `${formatInt(list.length)} of ${formatInt(total)}`;
  if (list === null || !list.length) {
    const text = list === null ? "Loading agents…" : "No agents in this run yet.";
    return section("Agents", note, h("div", { class: "panel empty-small" }, text));
  }
  const groups = messagesByAgent(state.messages || []);
  return section(
    "Agents",
    note,
    state.messagesTruncated
      ? h("p", { class: "muted small" }, `Last words from the latest ${formatInt(state.messages.length)} messages.`)
      : null,
    h(
      "div",
      { class: "panel agents" },
      list.map((agent) => agentRow(state, agent, groups.get(agent.agent_id), actions)),
    ),
    total > list.length
      ? h(
          "div",
          { class: "more" },
          h(
            "button",
            { class: "button", onclick: actions.showMoreAgents },
            `Show more agents (${formatInt(total - list.length)} hidden)`,
          ),
        )
      : null,
  );
}

function agentRow(state, agent, group, actions) {
  const open = state.openAgent === agent.agent_id;
  // What the agent last said or did tells more than the "OK" of the tool result that follows it.
  const shownMessage = group?.last?.role === "tool" && group.lastSaid ? group.lastSaid : group?.last;
  const last = shownMessage ? describeMessage(shownMessage) : null;
  const lastAt = group?.last ? parseTime(group.last.created_at) : null;
  const head = h(
    "button",
    {
      class: "agent-head",
      "aria-expanded": open ? "true" : "false",
      onclick: () => actions.toggleAgent(agent.agent_id),
    },
    h("span", { class: "chevron", "aria-hidden": "true" }, open ? "▾" : "▸"),
    h(
      "span",
      { class: "agent-main" },
      h(
        "span",
        { class: "agent-line" },
        agentLabel(agent.agent_name, agent.agent_id, agent.agent_deleted),
        badge(agent.state),
        h("span", { class: "muted small agent-step" }, `step ${shownStep(agent.step_number)}`),
        h("span", { class: "muted small agent-cost" }, formatUsd(agent.cost_usd)),
        lastAt ? h("span", { class: "muted small", title: fullTime(lastAt) }, formatClock(lastAt)) : null,
      ),
      preview(agent, last),
    ),
  );
  return h(
    "div",
    {
      class: `agent${open ? " agent-open" : ""}${agent.agent_deleted ? " agent-gone" : ""}`,
      dataset: { agentId: agent.agent_id, state: agent.state, deleted: agent.agent_deleted ? "true" : "false" },
    },
    head,
    open ? agentPanel(state.agentDetails.get(agent.agent_id), agent) : null,
  );
}

function preview(agent, last) {
  if (agent.state === "failed") {
    const why = agent.error || "failed";
    return h(
      "span",
      { class: "preview preview-failed" },
      h("span", { class: "preview-label" }, `failed at step ${shownStep(agent.step_number)}`),
      ` ${why}`,
    );
  }
  if (agent.agent_deleted && !last) {
    return h(
      "span",
      { class: "preview preview-deleted" },
      h("span", { class: "preview-label" }, "deleted"),
      agent.error ? ` ${agent.error}` : " its messages went with it",
    );
  }
  if (!last) return h("span", { class: "preview muted" }, "no messages");
  return h(
    "span",
    { class: `preview preview-${last.kind}` },
    h("span", { class: "preview-label" }, last.label),
    ` ${last.text}`,
  );
}

/** The agent's steps, tokens and cost in this run. */
function agentSpend(agent) {
  const usage = usageParts(agent.usage);
  return h(
    "dl",
    { class: "spend" },
    spendItem("Steps answered", formatInt(agent.steps)),
    spendItem("Tokens in", formatInt(usage.input + usage.cacheRead + usage.cacheWrite), usageTitle(usage)),
    spendItem("Tokens out", formatInt(usage.output)),
    spendItem("Cost", formatUsd(agent.cost_usd)),
    spendItem("Without batch", formatUsd(agent.cost_without_batch_usd)),
  );
}

function spendItem(label, value, title) {
  return h("div", { class: "spend-item", title }, h("dt", {}, label), h("dd", {}, value));
}

function agentPanel(details, summary) {
  if (summary.agent_deleted) return deletedAgentPanel(summary);
  if (!details) return h("div", { class: "agent-panel muted" }, "Loading agent…");
  if (details.error)
    return h("div", { class: "agent-panel error-text" }, `Could not load this agent: ${details.error}`);
  const agent = details.agent;
  const blocks = agent.blocks || agent.memory?.blocks || [];
  return h(
    "div",
    { class: "agent-panel" },
    h(
      "div",
      { class: "agent-title" },
      h("strong", {}, agent.name),
      h("span", { class: "muted" }, ` · ${agent.model || agent.llm_config?.handle || ""}`),
      agent.tags?.length ? h("span", { class: "muted" }, ` · tags: ${agent.tags.join(", ")}`) : null,
    ),
    agentSpend(summary),
    agentFailure(summary),
    h(
      "div",
      { class: "agent-columns" },
      h(
        "div",
        {},
        h("h3", {}, "Core memory"),
        memoryBlocks(blocks),
      ),
      h(
        "div",
        {},
        h("h3", {}, "Messages in this run"),
        details.messages.length
          ? h("ol", { class: "transcript" }, details.messages.map(transcriptLine))
          : h("p", { class: "muted" }, "No messages."),
      ),
    ),
  );
}

/** Where and why the agent failed in this run, when it did. */
function agentFailure(summary) {
  if (summary.state !== "failed") return null;
  return h(
    "p",
    { class: "error-text agent-failure" },
    `Failed at step ${shownStep(summary.step_number)}: ${summary.error || "no reason given"}`,
  );
}

/** A deleted agent: what it did in this run stays; its memory and messages went with it. */
function deletedAgentPanel(summary) {
  return h(
    "div",
    { class: "agent-panel" },
    h(
      "div",
      { class: "agent-title" },
      h("strong", {}, summary.agent_name || summary.agent_id),
      h("span", { class: "muted" }, " · deleted"),
    ),
    agentSpend(summary),
    agentFailure(summary),
    h(
      "p",
      { class: "muted agent-deleted-note" },
      "This agent was deleted: its memory and messages went with it. What it did in this run stays.",
    ),
  );
}

function transcriptLine(message) {
  const said = describeMessage(message);
  const at = parseTime(message.created_at);
  return h(
    "li",
    { class: `line line-${said.kind}` },
    h(
      "div",
      { class: "line-head" },
      h("span", { class: "line-label" }, said.label),
      h("span", { class: "muted small", title: fullTime(at) }, formatClock(at)),
    ),
    said.thoughts ? h("div", { class: "thoughts" }, said.thoughts) : null,
    said.text ? h("div", { class: "line-text" }, said.text) : null,
  );
}
