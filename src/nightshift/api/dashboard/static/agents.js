// The organization's agents outside any run, newest first: name, model, tags and tools, and on
// click their system prompt, memory blocks and tools.

import { formatAgo, formatInt, fullTime, h, icon, parseTime } from "./format.js";
import { agentLabel, memoryBlocks } from "./parts.js";

const PROMPT_SHOWN = 600; // characters of the system prompt shown before "…"

export function renderAgents(state, actions) {
  const list = state.agents;
  const parts = [header(list)];
  if (list === null) {
    parts.push(h("div", { class: "panel loading" }, "Loading agents…"));
  } else if (!list.length) {
    parts.push(emptyState());
  } else {
    parts.push(
      h(
        "div",
        { class: "panel agents agent-list" },
        list.map((agent) => row(state, agent, actions)),
      ),
    );
    if (list.length >= state.agentLimit) {
      const more = h("button", { class: "button", onclick: actions.showMoreAgentsListed }, "Show older agents");
      parts.push(h("div", { class: "more" }, more));
    }
  }
  return parts;
}

function header(list) {
  const count = list ? `${formatInt(list.length)} ${list.length === 1 ? "agent" : "agents"}` : "\u00a0";
  return h(
    "div",
    { class: "page-head" },
    h("div", {}, h("h1", {}, "Agents"), h("p", { class: "muted subtitle" }, count)),
  );
}

function customTools(agent) {
  return (agent.tools || []).filter((tool) => tool.tool_type === "custom");
}

function row(state, agent, actions) {
  const open = state.openAgent === agent.id;
  const created = parseTime(agent.created_at);
  const custom = customTools(agent);
  const head = h(
    "button",
    {
      class: "agent-head",
      "aria-expanded": open ? "true" : "false",
      onclick: () => actions.toggleListedAgent(agent.id),
    },
    h("span", { class: "chevron", "aria-hidden": "true" }, open ? "▾" : "▸"),
    h(
      "span",
      { class: "agent-main" },
      h(
        "span",
        { class: "agent-line" },
        agentLabel(agent.name, agent.id),
        h("span", { class: "muted small agent-model" }, agent.model),
        (agent.tags || []).map((tag) => h("span", { class: "tag" }, tag)),
        h("span", { class: "muted small", title: fullTime(created) }, `created ${formatAgo(created)}`),
      ),
      h(
        "span",
        { class: "preview muted" },
        `${formatInt((agent.blocks || []).length)} memory blocks · ${formatInt((agent.tools || []).length)} tools`,
        custom.length ? ` (custom: ${custom.map((tool) => tool.name).join(", ")})` : "",
        ` · ${formatInt((agent.message_ids || []).length)} messages in context`,
      ),
    ),
  );
  return h(
    "div",
    { class: `agent${open ? " agent-open" : ""}`, dataset: { agentId: agent.id } },
    head,
    open ? panel(agent) : null,
  );
}

function panel(agent) {
  const prompt = agent.system || "";
  return h(
    "div",
    { class: "agent-panel" },
    h(
      "div",
      { class: "agent-title" },
      h("strong", {}, agent.name),
      h("span", { class: "muted" }, ` · ${agent.model}`),
      agent.description ? h("span", { class: "muted" }, ` · ${agent.description}`) : null,
    ),
    h(
      "div",
      { class: "agent-columns" },
      h("div", {}, h("h3", {}, "Core memory"), memoryBlocks(agent.blocks || agent.memory?.blocks || [])),
      h(
        "div",
        {},
        h("h3", {}, "Tools"),
        (agent.tools || []).length
          ? h(
              "ul",
              { class: "tools" },
              agent.tools.map((tool) =>
                h(
                  "li",
                  { dataset: { tool: tool.name } },
                  h("span", { class: "mono" }, tool.name),
                  tool.tool_type === "custom" ? h("span", { class: "tag" }, "custom") : null,
                ),
              ),
            )
          : h("p", { class: "muted" }, "No tools."),
        h("h3", {}, "System prompt"),
        h(
          "pre",
          { class: "block-value system-prompt", title: `${formatInt(prompt.length)} characters` },
          prompt.length > PROMPT_SHOWN ? `${prompt.slice(0, PROMPT_SHOWN)}…` : prompt,
        ),
      ),
    ),
  );
}

function emptyState() {
  return h(
    "section",
    { class: "panel empty" },
    h("div", { class: "empty-icon" }, icon("moon")),
    h("h2", {}, "No agents yet"),
    h(
      "p",
      {},
      "Create agents with ",
      h("code", {}, "POST /v1/agents/"),
      " or ",
      h("code", {}, "nightshift agents create --from-file agents.yaml"),
      "; they show up here.",
    ),
  );
}
