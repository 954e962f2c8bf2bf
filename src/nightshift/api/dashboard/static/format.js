// Building DOM nodes and formatting numbers, money, times and messages for people.

/**
 * Create an element: h("td", {class: "num", title: "..."}, child, ...). Children are nodes or
 * text (set as text, never parsed as HTML); null, undefined and false are skipped. Attributes
 * starting with "on" are event listeners; `dataset` is an object of data-* attributes.
 */
export function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2).toLowerCase(), value);
    else if (name === "dataset") Object.assign(node.dataset, value);
    else if (name === "style") node.style.cssText = value;
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(node, child);
    else node.append(child instanceof Node ? child : String(child));
  }
}

const ICONS = {
  // A crescent moon (the empty state) and a padlock (the sign-in form), 24x24, stroked.
  moon: ["M20 14.5A8.5 8.5 0 0 1 9.5 4a8.5 8.5 0 1 0 10.5 10.5z"],
  lock: ["M6 11h12v9H6z", "M8.5 11V8a3.5 3.5 0 0 1 7 0v3"],
};

/** An inline SVG icon (no font glyphs: they are missing on some systems). */
export function icon(name) {
  const svgNs = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(svgNs, "svg");
  for (const [key, value] of Object.entries({ viewBox: "0 0 24 24", width: 26, height: 26, "aria-hidden": "true" })) {
    svg.setAttribute(key, String(value));
  }
  for (const d of ICONS[name]) {
    const path = document.createElementNS(svgNs, "path");
    path.setAttribute("d", d);
    svg.append(path);
  }
  return svg;
}

const integer = new Intl.NumberFormat("en-US");

export function formatInt(value) {
  return integer.format(Math.round(value || 0));
}

/** 950, 12.3k, 4.5M: short enough for a table cell. */
export function formatCompact(value) {
  const n = value || 0;
  if (n < 1000) return String(Math.round(n));
  if (n < 1e6) return `${(n / 1e3).toFixed(n < 1e4 ? 1 : 0)}k`;
  return `${(n / 1e6).toFixed(n < 1e7 ? 2 : 1)}M`;
}

/**
 * Dollars as the CLI and the demo show them (`views.money`): four decimals under a dollar, to
 * tell small runs apart ($0.0749), cents above ($1,234.56).
 */
export function formatUsd(value) {
  const n = value || 0;
  const amount = Math.abs(n);
  const text =
    amount < 1
      ? `$${amount.toFixed(4)}`
      : `$${amount.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 })}`;
  // A loss (the prompt cache can lose money) as "-$0.0012", as the CLI's views.money writes it.
  return n < 0 && Math.round(amount * 1e4) > 0 ? `-${text}` : text;
}

/**
 * A saving that reads right either way, as the CLI's `views.saving` writes it: "batch saved
 * $0.0125", or for a loss "prompt cache cost $0.0004 more than it saved" (never "saved -$0.0004").
 */
export function savingText(value, by) {
  const n = value || 0;
  if (Math.round(n * 1e4) < 0) return `${by} cost ${formatUsd(-n)} more than it saved`;
  return `${by} saved ${formatUsd(n)}`;
}

export function parseTime(value) {
  if (!value) return null;
  const time = new Date(value);
  return Number.isNaN(time.getTime()) ? null : time;
}

/** 0.4 s, 12.4 s, 3 min 05 s, 2 h 07 min: as the CLI shows durations (`views.duration`). */
export function formatDuration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "";
  const seconds = Math.max(0, ms) / 1000;
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes} min ${String(Math.floor(seconds % 60)).padStart(2, "0")} s`;
  const hours = Math.floor(minutes / 60);
  return `${hours} h ${String(minutes % 60).padStart(2, "0")} min`;
}

/** "just now", "5 s ago", "3 min ago", "2 h ago", then the date. */
export function formatAgo(time, now = Date.now()) {
  if (!time) return "";
  const seconds = Math.round((now - time.getTime()) / 1000);
  if (seconds < 3) return "just now";
  if (seconds < 60) return `${seconds} s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return time.toLocaleDateString(undefined, { year: "numeric", month: "short", day: "numeric" });
}

/** 14:03:07 today, or "Mar 3, 14:03:07" on another day. */
export function formatClock(time) {
  if (!time) return "";
  const clock = time.toLocaleTimeString(undefined, { hour12: false });
  const today = new Date();
  if (time.toDateString() === today.toDateString()) return clock;
  return `${time.toLocaleDateString(undefined, { month: "short", day: "numeric" })}, ${clock}`;
}

export function fullTime(time) {
  return time ? time.toLocaleString(undefined, { hour12: false }) + ` (${time.toISOString()})` : "";
}

function parseJson(text) {
  if (typeof text !== "string" || !/^\s*[[{]/.test(text)) return null;
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

function textOf(message) {
  return (message.content || [])
    .filter((part) => part.type === "text")
    .map((part) => part.text)
    .join("\n");
}

function reasoningOf(message) {
  return (message.content || [])
    .filter((part) => part.type === "reasoning")
    .map((part) => part.reasoning)
    .join("\n");
}

const HIDDEN_ARGUMENTS = new Set(["inner_thoughts", "request_heartbeat"]);

/**
 * What a run message says, for a person: {kind, label, text, thoughts}. `kind` is one of
 * user, heartbeat, says, calls, result, system. Letta wraps some texts in JSON (heartbeats,
 * user messages, tool results); those are unwrapped.
 */
export function describeMessage(message) {
  const text = textOf(message);
  const thoughts = reasoningOf(message);
  if (message.role === "assistant") {
    const call = (message.tool_calls || [])[0];
    if (call) {
      const name = call.function?.name || "tool";
      const args = parseJson(call.function?.arguments) || {};
      const innerThoughts = thoughts || (typeof args.inner_thoughts === "string" ? args.inner_thoughts : "");
      if (name === "send_message" && typeof args.message === "string") {
        return { kind: "says", label: "says", text: args.message, thoughts: innerThoughts };
      }
      const shown = Object.entries(args)
        .filter(([key]) => !HIDDEN_ARGUMENTS.has(key))
        .map(([key, value]) => `${key}=${JSON.stringify(value)}`)
        .join(", ");
      return { kind: "calls", label: "calls", text: `${name}(${shown})`, thoughts: innerThoughts };
    }
    return { kind: "says", label: "says", text, thoughts };
  }
  if (message.role === "tool") {
    const body = parseJson(text);
    let shown = text;
    if (body && typeof body === "object" && "status" in body) {
      const detail = body.message === undefined || body.message === "None" ? "" : `: ${body.message}`;
      shown = `${body.status}${detail}`;
    }
    return { kind: "result", label: message.name ? `${message.name} →` : "result", text: shown, thoughts: "" };
  }
  if (message.role === "user") {
    const body = parseJson(text);
    if (body && body.type === "heartbeat") {
      return { kind: "heartbeat", label: "heartbeat", text: body.reason || "", thoughts: "" };
    }
    if (body && typeof body.message === "string") {
      return { kind: "user", label: "user", text: body.message, thoughts: "" };
    }
    return { kind: "user", label: "user", text, thoughts: "" };
  }
  return { kind: "system", label: message.role, text, thoughts };
}
