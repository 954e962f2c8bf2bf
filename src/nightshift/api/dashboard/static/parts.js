// Pieces both views use: status badges, the agents progress bar, token and cost summaries.

import { formatCompact, formatInt, formatUsd, h, parseTime } from "./format.js";

export const ACTIVE = new Set(["created", "running"]);

export function isActive(run) {
  return ACTIVE.has(run.status);
}

export function badge(status, extra = "") {
  return h("span", { class: `badge badge-${status} ${extra}`.trim(), dataset: { status } }, status);
}

export function agentCounts(run) {
  const agents = run.progress?.agents || {};
  const counts = {
    running: agents.running || 0,
    finished: agents.finished || 0,
    failed: agents.failed || 0,
    cancelled: agents.cancelled || 0,
  };
  counts.total = counts.running + counts.finished + counts.failed + counts.cancelled;
  // Done is finished: an agent that failed or was cancelled did not do its work.
  counts.done = counts.finished;
  counts.percent = counts.total ? Math.floor((100 * counts.done) / counts.total) : 0;
  return counts;
}

/**
 * The run's status as people read it. Letta's statuses stay as they are in the API, where a run
 * is "completed" when some agent finished; here a completed run with failed agents says how many
 * of how many failed.
 */
export function runStatusText(run) {
  const counts = agentCounts(run);
  if (run.status === "completed" && counts.failed) {
    return `completed, ${formatInt(counts.failed)} of ${formatInt(counts.total)} failed`;
  }
  return run.status;
}

/** The run's status badge: amber, not green, for a completed run with failed agents. */
export function runBadge(run, extra = "") {
  const partly = run.status === "completed" && agentCounts(run).failed > 0;
  return h(
    "span",
    {
      class: `badge badge-${partly ? "partly" : run.status} ${extra}`.trim(),
      dataset: { status: run.status },
      title: run.error || null, // why it failed before its first step
    },
    runStatusText(run),
  );
}

const FINAL_BATCH = new Set(["applied", "cancelled"]);

/** Whether a provider batch never reached its provider and never will (refused, or nothing to send). */
export function neverSubmitted(batch) {
  return !batch.provider_batch_id && !["created", "cancelling"].includes(batch.status);
}

/**
 * When a provider batch ended, in ms: when the provider ended it; else, once it is applied or
 * cancelled, when it was; else when its run ended; else it goes on (now). A duration never runs on
 * past the end of its run.
 */
export function batchEnd(run, batch, now = Date.now()) {
  const ended = parseTime(batch.ended_at) ?? (FINAL_BATCH.has(batch.status) ? parseTime(batch.updated_at) : null);
  if (ended) return ended.getTime();
  if (!isActive(run)) return parseTime(run.completed_at ?? run.updated_at)?.getTime() ?? now;
  return now;
}

/** Whether a provider batch is still going on: not ended, in a run that is still going on. */
export function batchOpen(run, batch) {
  return !batch.ended_at && !FINAL_BATCH.has(batch.status) && isActive(run);
}

/** Finished, failed and cancelled agents as segments of one bar; what is left is still running. */
export function progressBar(counts) {
  const share = (n) => (counts.total ? `${(100 * n) / counts.total}%` : "0%");
  return h(
    "div",
    {
      class: "bar",
      role: "progressbar",
      "aria-valuemin": 0,
      "aria-valuemax": 100,
      "aria-valuenow": counts.percent,
      "aria-label": `${counts.done} of ${counts.total} agents finished`,
    },
    h("span", { class: "bar-finished", style: `width: ${share(counts.finished)}` }),
    h("span", { class: "bar-failed", style: `width: ${share(counts.failed)}` }),
    h("span", { class: "bar-cancelled", style: `width: ${share(counts.cancelled)}` }),
  );
}

export function progressLabel(counts) {
  return h(
    "div",
    { class: "progress-label" },
    h("span", { class: "progress-count" }, `${formatInt(counts.done)} / ${formatInt(counts.total)}`),
    h("span", { class: "progress-percent" }, `${counts.percent}%`),
    counts.failed ? h("span", { class: "text-failed" }, `${formatInt(counts.failed)} failed`) : null,
    counts.cancelled ? h("span", { class: "muted" }, `${formatInt(counts.cancelled)} cancelled`) : null,
  );
}

export function usageOf(run) {
  return usageParts(run.progress?.usage);
}

export function usageTitle(usage) {
  return (
    `input ${formatInt(usage.input)} · output ${formatInt(usage.output)} · ` +
    `cache read ${formatInt(usage.cacheRead)} · cache write ${formatInt(usage.cacheWrite)}`
  );
}

export function tokensCell(run) {
  const usage = usageOf(run);
  return h(
    "div",
    { title: usageTitle(usage) },
    h("div", {}, `${formatCompact(usage.input + usage.cacheRead + usage.cacheWrite)} in`),
    h("div", { class: "muted small" }, `${formatCompact(usage.output)} out`),
  );
}

export function costCell(run) {
  const cost = run.progress?.cost_usd || 0;
  const without = run.progress?.cost_without_batch_usd || 0;
  return h(
    "div",
    { title: `${formatUsd(cost)} through the batch APIs; ${formatUsd(without)} for the same tokens without batch` },
    h("div", { class: "cost" }, formatUsd(cost)),
    h("div", { class: "muted small" }, `${formatUsd(without)} without batch`),
  );
}

/** A step as people count it: the API's `step` and `step_number` count from 0, every screen from 1. */
export function shownStep(stepNumber) {
  return (stepNumber || 0) + 1;
}

/** The step a run is in (or ended at), as people count it. */
export function stepOf(run) {
  return shownStep(run.progress?.step);
}

/** The run's name: `metadata.name` when it is a text, else null. */
export function runName(run) {
  const name = run.metadata?.name;
  return typeof name === "string" && name.trim() ? name : null;
}

/** The run's metadata but its name, as "key: value" texts. */
export function metadataTexts(run) {
  return Object.entries(run.metadata || {})
    .filter(([key]) => !(key === "name" && runName(run)))
    .map(([key, value]) => `${key}: ${typeof value === "string" ? value : JSON.stringify(value)}`);
}

/** An agent shown by its name, with its id beside it (smaller) to copy; marked if it was deleted. */
export function agentLabel(name, id, deleted = false) {
  return h(
    "span",
    { class: "agent-label" },
    name ? h("span", { class: "agent-name" }, name) : null,
    h("span", { class: `mono agent-id${name ? " muted small" : ""}` }, id),
    deleted ? h("span", { class: "agent-deleted", title: "This agent was deleted since" }, "deleted") : null,
  );
}

/** The parts of a usage ({input_tokens, ...}) and their sum. */
export function usageParts(usage = {}) {
  const input = usage.input_tokens || 0;
  const output = usage.output_tokens || 0;
  const cacheRead = usage.cache_read_tokens || 0;
  const cacheWrite = usage.cache_write_tokens || 0;
  return { input, output, cacheRead, cacheWrite, total: input + output + cacheRead + cacheWrite };
}

/** An agent's core memory blocks, each with its label, size and value. */
export function memoryBlocks(blocks) {
  if (!blocks.length) return h("p", { class: "muted" }, "No memory blocks.");
  return blocks.map((block) =>
    h(
      "div",
      { class: "block", dataset: { label: block.label } },
      h(
        "div",
        { class: "block-head" },
        h("span", { class: "block-label" }, block.label),
        h("span", { class: "muted small" }, `${formatInt(block.value.length)} / ${formatInt(block.limit)} chars`),
      ),
      h("pre", { class: "block-value" }, block.value || h("span", { class: "muted" }, "(empty)")),
    ),
  );
}
