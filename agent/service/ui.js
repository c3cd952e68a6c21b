// Shared by the service's pages (page.html, run.html): sign-in, API calls, the approval card, small SVG plots.
// Everything a run or a trial wrote reaches the DOM as text (textContent, setAttribute), never as HTML.
"use strict";
const $ = (sel, root = document) => root.querySelector(sel);
const SVG_NS = "http://www.w3.org/2000/svg";
// The bearer token lives in sessionStorage and travels only as a header set by fetch: a cross-site page can neither
// read it nor make the browser attach it (no cookies), so the forms are CSRF-safe by construction.
const TOKEN_KEY = "rlloop.token";
let me = null;  // GET /auth/me: {user, role, auth_required}

class AuthError extends Error {}
class Unreachable extends Error {}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  return fill(node, attrs, children);
}

function svg(tag, attrs = {}, ...children) {
  return fill(document.createElementNS(SVG_NS, tag), attrs, children);
}

function fill(node, attrs, children) {
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.setAttribute("class", value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === "" || child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function say(text, kind = "ok") {
  const box = $("#message");
  box.className = kind;
  box.textContent = text;
}

function reachable(ok, why = "") {
  // Says so when the service does not answer (stopped, network gone), and clears it when it answers again.
  const banner = $("#offline");
  if (!banner) return;
  if (ok) { banner.hidden = true; return; }
  if (banner.hidden) banner.dataset.since = new Date().toLocaleTimeString();
  banner.textContent = `The service is unreachable (since ${banner.dataset.since}${why ? `: ${why}` : ""}); retrying…`;
  banner.hidden = false;
}

const cache = new Map();  // url -> {etag, data}: polled GETs send If-None-Match and reuse the body on 304

async function api(method, url, body, {etag = false} = {}) {
  const headers = {"Content-Type": "application/json"};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  const cached = etag ? cache.get(url) : undefined;
  if (cached) headers["If-None-Match"] = cached.etag;
  let response;
  try {
    response = await fetch(url, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: "omit",
      cache: "no-store",
    });
  } catch (err) {
    reachable(false, err.message);
    throw new Unreachable(`could not reach the service: ${err.message}`);
  }
  reachable(true);
  if (response.status === 304 && cached) return {data: cached.data, changed: false};
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const detail = Array.isArray(data.detail) ? data.detail.map(d => d.msg).join("; ") : data.detail;
    const message = detail || `${method} ${url}: HTTP ${response.status}`;
    throw response.status === 401 ? new AuthError(message) : new Error(message);
  }
  if (etag && response.headers.get("ETag")) cache.set(url, {etag: response.headers.get("ETag"), data});
  return etag ? {data, changed: true} : data;
}

function showSignIn(message) {
  me = null;
  loading("");
  cache.clear();
  $("#signin").hidden = false;
  $("#whoami").hidden = true;
  $("#reviewer-line").hidden = true;
  document.body.dataset.role = "";
  delete document.body.dataset.loaded;  // set again once the signed-in data is drawn
  if (message) say(message, "error");
}

function tokenFromLink() {
  // The printed sign-in link carries the token in the fragment (#token=...), which the browser never sends; ?token=
  // is taken too. It is kept in this tab and removed from the address bar and history at once.
  const fromHash = new URLSearchParams(location.hash.replace(/^#/, "")).get("token");
  const query = new URLSearchParams(location.search);
  const token = fromHash || query.get("token");
  if (!fromHash && !query.has("token")) return;
  if (token) sessionStorage.setItem(TOKEN_KEY, token.trim());
  query.delete("token");
  const rest = query.toString();
  history.replaceState(null, "", location.pathname + (rest ? `?${rest}` : ""));
}

async function showAuthMode() {
  try {
    const health = await api("GET", "/health");
    $("#open-banner").hidden = health.auth !== "open";
    if (health.admin_token_file) $("#token-file").textContent = health.admin_token_file;
  } catch (err) { /* signIn says when the service is unreachable */ }
}

async function signIn() {
  const hadToken = Boolean(sessionStorage.getItem(TOKEN_KEY));
  try {
    me = await api("GET", "/auth/me");
  } catch (err) {
    if (err instanceof AuthError) {
      sessionStorage.removeItem(TOKEN_KEY);
      showSignIn(hadToken ? err.message : "this service needs a token: sign in");
      return false;
    }
    say(err.message, "error");
    return false;
  }
  $("#signin").hidden = true;
  $("#reviewer-line").hidden = me.auth_required;
  $("#whoami").hidden = !me.auth_required;
  $("#user").textContent = me.user || "";
  $("#role").textContent = me.role;
  document.body.dataset.role = me.role;
  return true;
}

function wireSignIn(start, onSignOut) {
  $("#signin").addEventListener("submit", async (event) => {
    event.preventDefault();
    const token = $("#token").value.trim();
    if (!token) { say("paste a token first", "error"); return; }
    sessionStorage.setItem(TOKEN_KEY, token);
    $("#token").value = "";
    await start();
  });
  $("#signout").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    showSignIn("signed out");
    onSignOut();
  });
  $("#reviewer").value = localStorage.getItem("rlloop.reviewer") || "";
  $("#reviewer").addEventListener("change", () => localStorage.setItem("rlloop.reviewer", $("#reviewer").value.trim()));
  window.addEventListener("hashchange", () => {  // a sign-in link opened in a tab already on this page
    if (!new URLSearchParams(location.hash.replace(/^#/, "")).has("token")) return;
    tokenFromLink();
    start();
  });
  tokenFromLink();
  showAuthMode();
}

const canDecide = () => Boolean(me) && me.role !== "viewer";

function fmt(value, digits = 3) {
  // A score, a fraction or seconds at a fixed number of decimals (0.580, 97 s).
  return value === null || value === undefined || Number.isNaN(Number(value)) ? "–" : Number(value).toFixed(digits);
}

function num(value) {
  // Any other number as a person writes it: an integer whole (209, not 209.000), a small one by its significant
  // digits (a learning rate of 0.0007, not 0.000), the rest to three decimals at most (0.633).
  if (value === null || value === undefined || value === "" || Number.isNaN(Number(value))) return "–";
  const v = Number(value);
  if (Number.isInteger(v)) return String(v);
  if (Math.abs(v) < 1) return String(Number(v.toPrecision(3)));
  return String(Number(v.toFixed(3)));
}

function loading(text) {
  // Says that the page waits for the service (and, after a while, that it still does), instead of a blank page.
  const box = $("#loading");
  if (!box) return;
  clearTimeout(box.timer);
  box.hidden = !text;
  if (!text) return;
  box.textContent = text;
  box.timer = setTimeout(() => { box.textContent = `${text} (still waiting for the service: it is reading the run)`; }, 1500);
}

function scoreText(scored) {
  if (!scored || scored.score === null || scored.score === undefined) return "–";
  const ci = scored.ci_low !== null && scored.ci_low !== undefined ? ` [${fmt(scored.ci_low)}, ${fmt(scored.ci_high)}]` : "";
  return `${fmt(scored.score)}${ci}${scored.n ? ` n=${scored.n}` : ""}`;
}

function short(value) {
  // a fraction to 6 significant digits (a schedule's part is 0.333333, not 17 digits that widen a phone's page)
  if (typeof value === "number" && !Number.isInteger(value)) return String(Number(value.toPrecision(6)));
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return text === undefined ? "–" : text;
}

function diffBlock(text, cls = "diff") {
  // One span per line, classed by its first character: the text stays text.
  const pre = el("pre", {class: cls});
  for (const line of text.split("\n")) {
    const kind = line.startsWith("+++") || line.startsWith("---") ? "file" : line.startsWith("+") ? "add"
      : line.startsWith("-") ? "del" : line.startsWith("@@") ? "hunk" : "ctx";
    pre.append(el("span", {class: kind}, line), "\n");
  }
  return pre;
}

function changesTable(changes) {
  if (!changes || !changes.length) return el("p", {class: "muted"}, "no hyperparameters");
  return el("table", {class: "changes"},
    el("thead", {}, el("tr", {}, el("th", {}, "hyperparameter"), el("th", {}, "value"), el("th", {}, "replaced"))),
    el("tbody", {}, ...changes.map(c => el("tr", {class: c.changed ? "changed" : "", "data-name": c.name},
      el("td", {}, c.name), el("td", {}, short(c.value)),
      el("td", {class: "muted"}, c.replaced_from === "new" ? "new" : `${short(c.replaced)} (${c.replaced_from})`)))));
}

function budgetTable(lines) {
  return el("table", {class: "budget"}, el("tbody", {}, ...lines.map(line => {
    const capped = line.cap !== null && line.cap !== undefined;
    const share = capped && line.cap > 0 ? Math.min(1, line.spent / line.cap) : 0;
    const digits = line.unit === "USD" ? 2 : 0;
    return el("tr", {"data-budget": line.name},
      el("td", {}, line.name),
      el("td", {}, `${fmt(line.spent, digits)}${capped ? ` of ${fmt(line.cap, digits)}` : ""} ${line.unit}`,
        capped ? ` (${fmt(Math.max(0, line.cap - line.spent), digits)} left)` : ""),
      el("td", {}, capped ? el("meter", {min: 0, max: 1, value: share.toFixed(3), high: 0.8, "aria-label": `${line.name} spent`}) : el("span", {class: "muted"}, "no cap")));
  })));
}

function historyList(entries, {policy = null, ended = false} = {}) {
  if (!entries || !entries.length) {
    const why = policy === "never" ? "none: this run asks no one (approval policy never)"
      : ended ? "none: no proposal of this run waited for a person" : "no decisions yet on this run";
    return el("p", {class: "muted history"}, why);
  }
  return el("ul", {class: "history"}, ...entries.map(d => el("li", {},
    `${d.trial_id}: ${d.action} by ${d.by || "?"}${d.at ? ` at ${d.at}` : ""}`,
    d.reason ? ` — ${d.reason}` : "",
    d.set && Object.keys(d.set).length ? ` (set ${JSON.stringify(d.set)})` : "")));
}

function fieldInput(spec) {
  // One form field per hyperparameter, typed from the recipe's schema; validity is checked before sending.
  const id = `f-${Math.random().toString(36).slice(2)}`;
  let input;
  if (spec.type === "boolean") {
    input = el("select", {id, name: spec.name}, el("option", {value: "true"}, "true"), el("option", {value: "false"}, "false"));
    input.value = String(Boolean(spec.value));
  } else if (spec.type === "enum") {
    input = el("select", {id, name: spec.name}, ...spec.choices.map(c => el("option", {value: JSON.stringify(c)}, String(c))));
    input.value = JSON.stringify(spec.value);
  } else if (spec.type === "number" || spec.type === "integer") {
    input = el("input", {id, name: spec.name, type: "text", inputmode: "decimal", size: 12});
    input.value = spec.value === null || spec.value === undefined ? "" : String(spec.value);
  } else {
    input = el("input", {id, name: spec.name, type: "text", size: 24});
    input.value = spec.value === null || spec.value === undefined ? "" : (spec.type === "string" ? spec.value : JSON.stringify(spec.value));
  }
  input.dataset.initial = input.value;
  input.dataset.field = spec.name;
  const row = el("div", {class: "field", "data-name": spec.name},
    el("label", {for: id}, spec.name), input,
    el("span", {class: "muted"}, spec.proposed ? "" : `default ${short(spec.default)}`),
    el("span", {class: "field-error error", role: "alert"}));
  if (spec.description) row.title = spec.description;
  row.spec = spec;
  return row;
}

function fieldValue(row) {
  // [value, problem]: the field's value parsed by its schema type, or why it is not valid.
  const spec = row.spec, raw = $("[data-field]", row).value.trim();
  if (raw === "" && spec.nullable) return [null, null];
  if (spec.type === "boolean") return [raw === "true", null];
  if (spec.type === "enum") return [JSON.parse(raw), null];
  if (spec.type === "string") return [raw, null];
  if (spec.type === "json") {
    try { return [JSON.parse(raw), null]; } catch (err) { return [null, "not valid JSON"]; }
  }
  if (!/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(raw)) return [null, `${spec.type === "integer" ? "an integer" : "a number"} is needed`];
  const value = Number(raw);
  if (spec.type === "integer" && !Number.isInteger(value)) return [null, "an integer is needed"];
  if (spec.minimum !== null && spec.minimum !== undefined && value < spec.minimum) return [null, `at least ${spec.minimum}`];
  if (spec.maximum !== null && spec.maximum !== undefined && value > spec.maximum) return [null, `at most ${spec.maximum}`];
  if (spec.exclusive_minimum !== null && spec.exclusive_minimum !== undefined && value <= spec.exclusive_minimum) return [null, `above ${spec.exclusive_minimum}`];
  if (spec.exclusive_maximum !== null && spec.exclusive_maximum !== undefined && value >= spec.exclusive_maximum) return [null, `below ${spec.exclusive_maximum}`];
  return [value, null];
}

async function decide(item, body, after) {
  const by = $("#reviewer").value.trim();
  if (by && me && !me.auth_required) body.by = by;  // with users, the server records the token's user
  try {
    await api("POST", item.decide, body);
    say(`${item.run_id} ${item.trial_id}: ${body.action} recorded`);
    await after();
  } catch (err) {
    if (err instanceof AuthError) showSignIn(err.message);
    else say(`${item.run_id} ${item.trial_id}: ${err.message}`, "error");
  }
}

function approvalCard(item, after) {
  const ctx = item.context || {};
  const card = el("section", {class: "card approval", "data-run": item.run_id, "data-trial": item.trial_id,
    "aria-label": `proposal ${item.trial_id} of ${item.run_id}`});
  const parent = ctx.parent;
  const from = item.init_from ? `from ${item.init_from}` : "from the base model";
  card.append(
    el("h3", {}, el("a", {href: `/runs/${encodeURIComponent(item.run_id)}`}, item.run_id), ` · ${item.trial_id} `,
      el("span", {class: "tag"}, ctx.operator || "draft"), ` ${item.recipe} ${from}`,
      item.run_active ? "" : el("span", {class: "muted"}, " (run stopped: applies when it resumes)")),
    el("p", {class: "hypothesis"}, item.hypothesis),
    item.rationale ? el("p", {class: "muted"}, item.rationale) : "");
  const facts = el("dl", {class: "facts"});
  const fact = (name, cls, ...value) => facts.append(el("dt", {}, name), el("dd", {class: cls}, ...value));
  if (parent) {
    fact("parent", "parent-scores", `${parent.id === "base" ? "base model" : parent.id} (${parent.state}): valid split ${scoreText(parent.valid)} · public half ${parent.state === "kept back" ? "not sent (kept back)" : scoreText(parent.public)}`);
    if (parent.note) fact("", "muted", parent.note);
  }
  const usd = ctx.estimated_usd;
  fact("estimated cost", "cost",
    ctx.estimated_compute_s !== null && ctx.estimated_compute_s !== undefined ? `${fmt(ctx.estimated_compute_s, 0)} s of training compute` : "compute unknown",
    usd !== null && usd !== undefined ? `, $${fmt(usd, 2)} more (a trial calls no LLM; dollars are spent proposing)` : ", dollars unknown");
  fact("asked because", "asked", (ctx.asked_because || []).join("; ") || `policy ${ctx.policy || "?"}`);
  if (ctx.failures && ctx.failures.length) fact("failed so far", "failures", ctx.failures.map(f => `${f.id}: ${f.note || "failed"}`).join(" · "));
  card.append(facts);
  if (ctx.budget) card.append(el("details", {class: "budget-box"}, el("summary", {}, "budget: spent against caps"), budgetTable(ctx.budget)));
  card.append(el("h4", {}, "what it changes"), changesTable(ctx.changes));
  if (ctx.config_diff) card.append(el("details", {open: true}, el("summary", {}, `hyperparameters against ${parent ? parent.id : "base"}`), diffBlock(ctx.config_diff, "diff config-diff")));
  if (ctx.code) {
    const code = ctx.code;
    card.append(el("details", {class: "code", open: Boolean(code.diff)},
      el("summary", {}, code.kind === "train_py" ? `its own train.py against ${code.against}` : `recipe code ${code.source_name} against ${code.against}`),
      code.diff ? diffBlock(code.diff, "diff code-diff") : el("p", {class: "muted code-same"}, "the same code as its parent"),
      el("details", {}, el("summary", {}, `the whole ${code.source_name}`), el("pre", {class: "source"}, code.code))));
  } else if (item.train_py) {
    card.append(el("details", {}, el("summary", {}, "training code"), el("pre", {}, item.train_py)));
  }
  // The edit form: a field per hyperparameter from the recipe's schema; raw JSON stays for what the form lacks.
  const rows = (ctx.fields || []).map(fieldInput);
  const proposedRows = rows.filter(r => r.spec.proposed), otherRows = rows.filter(r => !r.spec.proposed);
  const hp = el("textarea", {class: "hp", spellcheck: "false", "aria-label": "hyperparameters as JSON"});
  hp.value = JSON.stringify(item.hyperparameters, null, 2);
  const initialJson = hp.value;
  const form = el("form", {class: "edit-form", onsubmit: (event) => event.preventDefault()},
    el("fieldset", {}, el("legend", {}, "edit before approving"), ...proposedRows,
      otherRows.length ? el("details", {}, el("summary", {}, `other ${item.recipe} hyperparameters (${otherRows.length})`), ...otherRows) : "",
      el("details", {}, el("summary", {}, "as JSON"), hp)));
  card.append(form);
  const reason = el("input", {class: "reason", placeholder: "reason (required to reject)", "aria-label": "reason"});
  const buttons = [
    el("button", {type: "button", class: "approve", onclick: () => decide(item, {action: "approve"}, after)}, "Approve"),
    el("button", {type: "button", class: "edit", onclick: () => {
      let values = {};
      let bad = false;
      for (const row of rows) {  // only what the reviewer changed is checked and sent
        const input = $("[data-field]", row);
        $(".field-error", row).textContent = "";
        if (input.value === input.dataset.initial) continue;
        const [value, problem] = fieldValue(row);
        $(".field-error", row).textContent = problem || "";
        input.setAttribute("aria-invalid", problem ? "true" : "false");
        if (problem) bad = true;
        else values[row.spec.name] = value;
      }
      if (bad) { say("fix the marked hyperparameters first", "error"); return; }
      if (hp.value !== initialJson) {
        let parsed;
        try { parsed = JSON.parse(hp.value); } catch (err) { say(`hyperparameters: not valid JSON (${err.message})`, "error"); return; }
        if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) { say("hyperparameters: write a JSON object", "error"); return; }
        values = {...values, ...parsed};
      }
      if (!Object.keys(values).length) { say("nothing changed: change a field, or approve as proposed", "error"); return; }
      decide(item, {action: "edit", set: values}, after);
    }}, "Edit & approve"),
    reason,
    el("button", {type: "button", class: "reject", onclick: () => {
      if (!reason.value.trim()) { say("write a reason to reject: it is fed back to the proposer", "error"); reason.focus(); return; }
      decide(item, {action: "reject", reason: reason.value.trim()}, after);
    }}, "Reject"),
    el("button", {type: "button", class: "terminate", onclick: () => decide(item, {action: "terminate", reason: reason.value.trim() || null}, after)}, "Terminate run"),
  ];
  const actions = el("p", {class: "actions"}, ...buttons);
  if (!canDecide()) {
    for (const b of buttons) b.disabled = true;
    actions.append(el("span", {class: "muted viewer-note"}, ` signed in as ${me ? me.role : "nobody"}: you can look; an approver decides`));
  }
  card.append(actions, el("details", {}, el("summary", {}, "decisions on this run"), historyList(ctx.history)));
  return card;
}

function linePlot(series, {width = 400, height = 110, label = ""} = {}) {
  // A small line plot of one training metric over steps (loss, reward).
  const xs = series.steps, ys = series.values;
  const pad = 4, xMin = Math.min(...xs), xMax = Math.max(...xs), yMin = Math.min(...ys), yMax = Math.max(...ys);
  const x = v => pad + (xMax === xMin ? 0.5 : (v - xMin) / (xMax - xMin)) * (width - 2 * pad);
  const y = v => height - pad - (yMax === yMin ? 0.5 : (v - yMin) / (yMax - yMin)) * (height - 2 * pad - 16);
  const points = xs.map((v, i) => `${x(v).toFixed(1)},${y(ys[i]).toFixed(1)}`).join(" ");
  return svg("svg", {class: "metric", viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": `${label || series.name} over steps`, "data-metric": series.name},
    svg("text", {x: pad, y: 13, class: "plot-label"}, `${series.name}: ${num(ys[0])} → ${num(ys[ys.length - 1])} (steps ${num(xMin)}–${num(xMax)})`),
    svg("polyline", {points, class: "metric-line"}));
}
