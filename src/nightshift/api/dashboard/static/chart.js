// A run's cost and throughput per step, as two small bar charts drawn in inline SVG.

import { formatDuration, formatInt, formatUsd, h, parseTime } from "./format.js";
import { batchEnd, batchOpen, shownStep, usageParts } from "./parts.js";

const SVG_NS = "http://www.w3.org/2000/svg";
const WIDTH = 420;
const HEIGHT = 170;
const TOP = 20; // room for the value above the tallest bar
const BOTTOM = 22; // room for the step numbers
const LABELLED = 16; // above this many steps, values show on hover only and step numbers thin out

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value !== null && value !== undefined) node.setAttribute(name, String(value));
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

/**
 * The run's steps (provider batches of the same step number together): cost, tokens, requests
 * that ended, and the time from the first batch's creation to the last one's end (or now, while
 * it goes on; never past the run's end).
 */
export function stepsOf(run, now = Date.now()) {
  const steps = new Map();
  for (const batch of run.progress?.provider_batches || []) {
    const number = batch.step_number || 0;
    let step = steps.get(number);
    if (!step) {
      step = { number, cost: 0, tokens: 0, requests: 0, start: Infinity, end: 0, open: false };
      steps.set(number, step);
    }
    step.cost += batch.cost_usd || 0;
    step.tokens += usageParts(batch.usage).total;
    for (const [name, count] of Object.entries(batch.request_counts || {})) {
      if (name !== "processing") step.requests += count || 0;
    }
    const start = parseTime(batch.created_at)?.getTime() ?? now;
    step.start = Math.min(step.start, start);
    step.end = Math.max(step.end, batchEnd(run, batch, now));
    step.open = step.open || batchOpen(run, batch);
  }
  return [...steps.values()]
    .sort((a, b) => a.number - b.number)
    .map((step) => {
      const ms = Math.max(0, step.end - step.start);
      // Requests answered per minute of the step's wall time: how fast agents got through it.
      const perMinute = ms > 0 ? (step.requests * 60000) / ms : 0;
      return { ...step, ms, perMinute };
    });
}

function plural(count, word) {
  return `${formatInt(count)} ${word}${count === 1 ? "" : "s"}`;
}

function formatRate(value) {
  if (value >= 100) return formatInt(value);
  return value.toFixed(value >= 10 ? 1 : 2);
}

/** One bar chart: a bar per step, its value above it, the step number below. */
function barChart({ name, kind, unit = "", steps, value, label, detail }) {
  const values = steps.map(value);
  const top = Math.max(...values, 0);
  const slot = WIDTH / steps.length;
  const barWidth = Math.max(2, Math.min(40, slot * 0.62));
  const plot = HEIGHT - TOP - BOTTOM;
  const every = Math.ceil(steps.length / LABELLED);
  const summary = steps.map((step, i) => `step ${shownStep(step.number)} ${label(values[i])}${unit}`).join(", ");
  const bars = steps.map((step, i) => {
    const height = top > 0 ? Math.max(values[i] > 0 ? 1.5 : 0, (plot * values[i]) / top) : 0;
    const x = i * slot + (slot - barWidth) / 2;
    const y = TOP + plot - height;
    const shown = i % every === 0 || i === steps.length - 1;
    return svg(
      "g",
      { class: "chart-step" },
      svg(
        "rect",
        {
          class: `chart-bar chart-bar-${kind}${step.open ? " chart-bar-open" : ""}`,
          x: x.toFixed(1),
          y: y.toFixed(1),
          width: barWidth.toFixed(1),
          height: height.toFixed(1),
          rx: 2,
          "data-step": shownStep(step.number),
          "data-value": values[i],
        },
        svg("title", {}, `step ${shownStep(step.number)}: ${label(values[i])}${unit}${detail(step)}`),
      ),
      steps.length <= LABELLED
        ? svg(
            "text",
            { class: "chart-value", x: (x + barWidth / 2).toFixed(1), y: (y - 5).toFixed(1), "text-anchor": "middle" },
            label(values[i]),
          )
        : null,
      shown
        ? svg(
            "text",
            { class: "chart-axis", x: (x + barWidth / 2).toFixed(1), y: HEIGHT - 6, "text-anchor": "middle" },
            String(shownStep(step.number)),
          )
        : null,
    );
  });
  return h(
    "figure",
    { class: `chart chart-${kind}` },
    h("figcaption", {}, h("strong", {}, name), h("span", { class: "muted small" }, " by step")),
    svg(
      "svg",
      {
        viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
        role: "img",
        "aria-label": `${name} by step: ${summary}`,
      },
      svg("line", { class: "chart-baseline", x1: 0, x2: WIDTH, y1: TOP + plot, y2: TOP + plot }),
      bars,
    ),
  );
}

/** The run's cost and throughput per step, or nothing before its first provider batch. */
export function stepChart(run) {
  const steps = stepsOf(run);
  if (!steps.length) return null;
  const detail = (step) =>
    ` · ${formatInt(step.requests)} requests answered, ${formatInt(step.tokens)} tokens, ` +
    `${formatDuration(step.ms)}${step.open ? " so far" : ""}`;
  return h(
    "section",
    { class: "section" },
    h("h2", {}, "Cost and throughput", h("span", { class: "count" }, plural(steps.length, "step"))),
    h(
      "div",
      { class: "panel charts" },
      barChart({ name: "Cost", kind: "cost", steps, value: (s) => s.cost, label: formatUsd, detail }),
      barChart({
        name: "Throughput (requests per minute)",
        kind: "throughput",
        unit: " requests/min",
        steps,
        value: (s) => s.perMinute,
        label: formatRate,
        detail,
      }),
    ),
  );
}
