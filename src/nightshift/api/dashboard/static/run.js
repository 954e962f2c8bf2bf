// One run: its progress, the step timeline (provider batches), its agents and their memory.

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
} from "./format.js";
import { agentCounts, badge, isActive, progressBar, progressLabel, stepOf, usageOf, usageTitle } from "./parts.js";

export function renderRun(state, actions) {
  const run = state.run;
  const back = h("a", { class: "back", href: "#/" }, "← All runs");
  if (run === null) return [back, h("div", { class: "panel loading" }, "Loading run…")];
  return [back, title(run), cards(run), failures(run), callback(run), timeline(run), agents(state, run, actions)];
}

function title(run) {
  const created = parseTime(run.created_at);
  const completed = parseTime(run.completed_at);
  const meta = [h("span", { title: fullTime(created) }, `created ${formatClock(created)} (${formatAgo(created)})`)];
  if (completed) {
    meta.push(h("span", { title: fullTime(completed) }, `ended ${formatClock(completed)}`));
    meta.push(h("span", {}, `took ${formatDuration(completed - created)}`));
  } else if (isActive(run)) {
    meta.push(h("span", {}, `running for ${formatDuration(Date.now() - created)}`));
  }
  for (const [key, value] of Object.entries(run.metadata || {})) {
    meta.push(h("span", {}, `${key}: ${typeof value === "string" ? value : JSON.stringify(value)}`));
  }
  return h(
    "div",
    { class: "run-head" },
    h("h1", {}, h("span", { class: "mono run-title" }, run.id), badge(run.status, "badge-large")),
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
    card("Agents done", `${counts.percent}%`, progressBar(counts), h("div", { class: "legends" }, legend)),
    card(
      "Current step",
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
      savedLine("batch-saved", "batch saved", run.progress?.batch_savings_usd ?? without - cost),
      savedLine("cache-saved", "prompt cache saved", run.progress?.cache_savings_usd || 0),
    ),
  );
}

// What the batch discount or the prompt cache saved; the cache can lose money (one-hour writes
// cost twice the input price and may never be read back), shown as "-$0.0012".
function savedLine(kind, label, value) {
  const amount = value < 0 ? `-${formatUsd(-value)}` : formatUsd(value);
  return h("div", { class: `${kind} ${value > 0 ? "text-saved" : "muted"}` }, `${label} ${amount}`);
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
            h("th", { class: "num" }, "Step"),
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
              h("td", { class: "mono" }, f.agent_id),
              h("td", { class: "num" }, String((f.step_number || 0) + 1)),
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
  const ends = batches.map((b) => parseTime(b.ended_at)?.getTime() ?? now);
  const runStart = Math.min(parseTime(run.created_at)?.getTime() ?? now, ...starts);
  const runEnd = Math.max(parseTime(run.completed_at)?.getTime() ?? 0, ...ends, runStart + 1);
  const span = runEnd - runStart;
  const rows = batches.map((b, i) => {
    const left = (100 * (starts[i] - runStart)) / span;
    const width = Math.max(0.8, (100 * (ends[i] - starts[i])) / span);
    const open = !b.ended_at;
    return h(
      "tr",
      { class: "batch-row", dataset: { batchId: b.id, status: b.status } },
      h("td", { class: "num" }, String((b.step_number || 0) + 1)),
      h(
        "td",
        {},
        h("div", {}, b.provider),
        h("div", { class: "mono muted small", title: b.id }, b.provider_batch_id || "not submitted yet"),
      ),
      h(
        "td",
        {},
        badge(b.status),
        b.provider_status ? h("div", { class: "muted small" }, `provider: ${b.provider_status}`) : null,
        b.error ? h("div", { class: "error-text small" }, b.error) : null,
      ),
      h("td", { class: "counts" }, requestCounts(b.request_counts)),
      h("td", { title: fullTime(parseTime(b.created_at)) }, formatClock(parseTime(b.created_at))),
      h(
        "td",
        { title: fullTime(parseTime(b.ended_at)) },
        open ? h("span", { class: "muted" }, "—") : formatClock(parseTime(b.ended_at)),
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

/** The run's agents, in the order they first appear, from its latest messages and its failures. */
function groupAgents(run, messages) {
  const groups = new Map();
  for (const message of [...messages].reverse()) {
    let group = groups.get(message.agent_id);
    if (!group) {
      group = { id: message.agent_id, count: 0, last: null, lastSaid: null, failure: null };
      groups.set(message.agent_id, group);
    }
    group.count += 1;
    group.last = message;
    if (message.role === "assistant") group.lastSaid = message;
  }
  for (const failure of run.progress?.failures || []) {
    if (!groups.has(failure.agent_id))
      groups.set(failure.agent_id, { id: failure.agent_id, count: 0, last: null, lastSaid: null, failure: null });
    groups.get(failure.agent_id).failure = failure;
  }
  return [...groups.values()];
}

function agentState(run, group) {
  if (group.failure) return "failed";
  // Per-agent states are known only in aggregate; a completed run with no cancellations has no
  // agent left but the failed ones, so every other agent finished.
  if (run.status === "completed" && !run.progress?.agents?.cancelled) return "finished";
  return null;
}

function agents(state, run, actions) {
  const messages = state.messages || [];
  const groups = groupAgents(run, messages);
  const total = agentCounts(run).total;
  const note = `${formatInt(groups.length)} of ${formatInt(total)}`;
  if (!groups.length) {
    const text = state.messages === null ? "Loading messages…" : "No messages in this run yet.";
    return section("Agents", note, h("div", { class: "panel empty-small" }, text));
  }
  const shown = groups.slice(0, state.agentsShown);
  return section(
    "Agents",
    note,
    state.messagesTruncated
      ? h("p", { class: "muted small" }, `From the latest ${formatInt(messages.length)} messages of the run.`)
      : null,
    h(
      "div",
      { class: "panel agents" },
      shown.map((group) => agentRow(state, run, group, actions)),
    ),
    groups.length > shown.length
      ? h(
          "div",
          { class: "more" },
          h(
            "button",
            { class: "button", onclick: actions.showMoreAgents },
            `Show more agents (${formatInt(groups.length - shown.length)} hidden)`,
          ),
        )
      : null,
  );
}

function agentRow(state, run, group, actions) {
  const open = state.openAgent === group.id;
  const status = agentState(run, group);
  // What the agent last said or did tells more than the "OK" of the tool result that follows it.
  const shownMessage = group.last?.role === "tool" && group.lastSaid ? group.lastSaid : group.last;
  const last = shownMessage ? describeMessage(shownMessage) : null;
  const lastAt = group.last ? parseTime(group.last.created_at) : null;
  const head = h(
    "button",
    {
      class: "agent-head",
      "aria-expanded": open ? "true" : "false",
      onclick: () => actions.toggleAgent(group.id),
    },
    h("span", { class: "chevron", "aria-hidden": "true" }, open ? "▾" : "▸"),
    h(
      "span",
      { class: "agent-main" },
      h(
        "span",
        { class: "agent-line" },
        h("span", { class: "mono agent-id" }, group.id),
        status ? badge(status) : null,
        h("span", { class: "muted small agent-count" }, `${group.count} ${group.count === 1 ? "message" : "messages"}`),
        lastAt ? h("span", { class: "muted small", title: fullTime(lastAt) }, formatClock(lastAt)) : null,
      ),
      preview(group, last),
    ),
  );
  return h(
    "div",
    { class: `agent${open ? " agent-open" : ""}`, dataset: { agentId: group.id } },
    head,
    open ? agentPanel(state.agentDetails.get(group.id), group) : null,
  );
}

function preview(group, last) {
  if (group.failure) {
    const why = group.failure.error || group.failure.request_status;
    return h("span", { class: "preview preview-failed" }, h("span", { class: "preview-label" }, "error"), ` ${why}`);
  }
  if (!last) return h("span", { class: "preview muted" }, "no messages");
  return h(
    "span",
    { class: `preview preview-${last.kind}` },
    h("span", { class: "preview-label" }, last.label),
    ` ${last.text}`,
  );
}

function agentPanel(details, group) {
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
    group.failure
      ? h(
          "p",
          { class: "error-text" },
          `Failed at step ${(group.failure.step_number || 0) + 1}: ${group.failure.error || group.failure.request_status}`,
        )
      : null,
    h(
      "div",
      { class: "agent-columns" },
      h(
        "div",
        {},
        h("h3", {}, "Core memory"),
        blocks.length
          ? blocks.map((block) =>
              h(
                "div",
                { class: "block", dataset: { label: block.label } },
                h(
                  "div",
                  { class: "block-head" },
                  h("span", { class: "block-label" }, block.label),
                  h(
                    "span",
                    { class: "muted small" },
                    `${formatInt(block.value.length)} / ${formatInt(block.limit)} chars`,
                  ),
                ),
                h("pre", { class: "block-value" }, block.value || h("span", { class: "muted" }, "(empty)")),
              ),
            )
          : h("p", { class: "muted" }, "No memory blocks."),
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
