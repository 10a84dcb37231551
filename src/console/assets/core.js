// The durable web console: a view of one schema, drawn from the JSON API (/api/...), with the
// operators' actions when the server allows them. core.js: state, safe DOM helpers,
// formatting, the API (GET and the one POST helper), tables and routing; actions.js: signing in,
// the action controls, the bulk bar and the audit page; pages.js: the pages and the start. All
// are classic scripts sharing the page's global scope, loaded in that order.
//
// Safety rules kept throughout: every value from the API enters the page as text (text nodes,
// textContent, non-URL attributes through el()); the only links are '#/...' hashes built here
// with encodeURIComponent; no inline script or style (the server's CSP forbids both).
'use strict';


// ---- constants and state ------------------------------------------------------------------

const STATUSES = ['pending', 'running', 'sleeping', 'succeeded', 'failed', 'parked', 'dead_letter', 'cancelled'];
const FILTER_KEYS = ['status', 'name', 'queue', 'executor', 'id_prefix', 'since', 'until', 'changed_since', 'retrying', 'text'];
const FINAL = ['succeeded', 'failed', 'dead_letter', 'cancelled'];
const REFRESH_MS = 5000;
// A request the console has not answered in this long is given up (the console bounds its
// own queries by its query_timeout, 5 s by default; this covers a console that hangs itself).
const FETCH_MS = 20000;
const PAGE_SIZE = 50;
const SVG_NS = 'http://www.w3.org/2000/svg';

const state = {
  ctx: null,      // the current view: {page, params, root, body, lastKey, rows, busy, stop}
  timer: 0,       // the pending auto-refresh
  paused: false,  // auto-refresh paused by the user
  cursors: {},    // per list (path and filter): the cursors of the pages before the current one
  // /api/session: {schema, version, read_only, actions, signed_in, who, csrf}. The CSRF value
  // lives here only (memory): never in localStorage, never in the address.
  session: {},
  stickyError: false,  // the banner holds an action's error: a refresh does not clear it
};

// ---- DOM helpers --------------------------------------------------------------------------

const $ = (selector) => document.querySelector(selector);

// Attributes el() sets; none of them takes a URL. href is accepted only as a '#/' hash.
const SAFE_ATTR = /^(id|class|title|type|name|placeholder|for|colspan|scope|role|autocomplete|spellcheck|disabled|hidden|open|lang|value|rows|inputmode|required|aria-[a-z]+|data-[a-z0-9-]+)$/;
const SAFE_SVG_ATTR = /^(x|y|x1|x2|y1|y2|width|height|rx|points|viewBox|preserveAspectRatio|class|text-anchor|role|aria-label|data-[a-z0-9-]+)$/;

// Characters that show nothing or reorder what follows (C0 and C1 controls but the tab and the
// newline, bidirectional controls, zero-width marks, separators): an id holding U+202E reads
// backwards, one holding U+200B or U+0001 looks like another. Text from the API never shows them raw: each is drawn as a marked ⟨U+202E⟩.
const HIDDEN_CHARS = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u115f\u1160\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2069\u3164\ufeff]/g;
const codeOf = (ch) => 'U+' + ch.codePointAt(0).toString(16).toUpperCase().padStart(4, '0');

/** `s` with each hidden character written out as ⟨U+XXXX⟩ (for attributes and plain text). */
function visible(s) {
  return String(s).replace(HIDDEN_CHARS, (ch) => '\u27e8' + codeOf(ch) + '\u27e9');
}

// Attributes whose text is shown to the reader (the others are values the page uses).
const SHOWN_ATTR = /^(title|placeholder|aria-label)$/;

function setAttrs(e, attrs, allowed) {
  if (!attrs) return;
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'href') {
      if (typeof v === 'string' && v.startsWith('#/')) e.setAttribute('href', v);
    } else if (allowed.test(k)) {
      e.setAttribute(k, v === true ? '' : SHOWN_ATTR.test(k) ? visible(v) : String(v));
    }
  }
}

/** Text as nodes: plain text, with each hidden character a marked <span class="hidden-char">. */
function appendText(e, s) {
  let at = 0;
  for (const m of s.matchAll(HIDDEN_CHARS)) {
    if (m.index > at) e.appendChild(document.createTextNode(s.slice(at, m.index)));
    const mark = document.createElement('span');
    mark.className = 'hidden-char';
    mark.title = 'an invisible or direction-changing character (' + codeOf(m[0]) + ') in the text';
    mark.textContent = '\u27e8' + codeOf(m[0]) + '\u27e9';
    e.appendChild(mark);
    at = m.index + m[0].length;
  }
  if (at < s.length || s.length === 0) e.appendChild(document.createTextNode(s.slice(at)));
}

function append(e, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false || c === true) continue;
    if (Array.isArray(c)) append(e, c);
    else if (c instanceof Node) e.appendChild(c);
    else appendText(e, String(c));
  }
}

/** An HTML element with safe attributes and children (nodes, or strings shown as text). */
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  setAttrs(e, attrs, SAFE_ATTR);
  append(e, children);
  return e;
}

/** An SVG element, the same way. */
function svg(tag, attrs, ...children) {
  const e = document.createElementNS(SVG_NS, tag);
  setAttrs(e, attrs, SAFE_SVG_ATTR);
  append(e, children);
  return e;
}

/** A hash link of the console's own: '#/<path>?k=v' with each value encoded. */
function hashOf(path, params) {
  const parts = [];
  for (const [k, v] of Object.entries(params || {})) {
    if (v === null || v === undefined || v === '') continue;
    parts.push(k + '=' + encodeURIComponent(String(v)).replace(/%2C/g, ','));
  }
  return '#/' + path + (parts.length ? '?' + parts.join('&') : '');
}

const link = (hash, ...children) => el('a', { href: hash }, ...children);
const dash = () => el('span', { class: 'muted' }, '–');
const text = (v) => (v === null || v === undefined || v === '' ? '–' : String(v));
const arr = (v) => (Array.isArray(v) ? v : []);
const num = (v) => (typeof v === 'number' && isFinite(v) ? v : Number(v) || 0);

function truncate(s, n) {
  return s.length > n ? s.slice(0, n - 1) + '…' : s;
}

/** A status's CSS class: only [a-z_] survive. */
function statusClass(s) {
  return 'status-' + String(s === null || s === undefined ? '' : s).toLowerCase().replace(/[^a-z_]/g, '');
}

function statusBadge(s, id) {
  return el('span', { class: 'status ' + statusClass(s), id }, text(s));
}

function section(id, title, ...content) {
  return el('section', { id, class: 'panel' }, el('h2', null, title), ...content);
}

// ---- formatting ---------------------------------------------------------------------------

const pad = (n) => String(n).padStart(2, '0');

function localStamp(d) {
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

const clock = (d) => `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;

/** An ISO string or epoch seconds as a Date, or null. */
function parseTime(v) {
  if (v === null || v === undefined || v === '') return null;
  const d = typeof v === 'number' ? new Date(v * 1000) : new Date(String(v));
  return isNaN(d.getTime()) ? null : d;
}

const msOf = (v) => { const d = parseTime(v); return d ? d.getTime() : null; };

/** A timestamp as local time, the exact value on hover; '–' for null. */
function timeEl(v) {
  if (v === null || v === undefined || v === '') return dash();
  const d = parseTime(v);
  const full = typeof v === 'number' && d ? d.toISOString() : String(v);
  return el('span', { class: 'time', title: full }, d ? localStamp(d) : String(v));
}

/** Seconds as "42 s", "5 min", "2 h 10 min", "3 d 4 h". */
function fmtAge(s) {
  if (s === null || s === undefined || !isFinite(Number(s))) return '–';
  s = Math.max(0, Number(s));
  if (s < 60) return `${Math.round(s)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) {
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
    return m ? `${h} h ${m} min` : `${h} h`;
  }
  const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600);
  return h ? `${d} d ${h} h` : `${d} d`;
}

function fmtDuration(ms) {
  if (ms === null || ms === undefined || !isFinite(Number(ms))) return '–';
  ms = Number(ms);
  if (ms < 1000) return `${ms < 10 ? ms.toFixed(1) : Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
  return fmtAge(ms / 1000);
}

/** "in 5 min" / "3 h ago" between two epoch-second instants. */
function relative(atS, nowS) {
  const d = atS - nowS;
  if (Math.abs(d) < 1) return 'now';
  return d > 0 ? 'in ' + fmtAge(d) : fmtAge(-d) + ' ago';
}

/** A fire time (epoch seconds or ISO) as local time plus "in 5 min"; '–' for null. */
function fireEl(v, nowS) {
  const d = parseTime(v);
  if (!d) return v === null || v === undefined ? dash() : el('span', null, String(v));
  return el('span', { class: 'time', title: d.toISOString() }, localStamp(d), ' ',
    el('span', { class: 'rel' }, '(' + relative(d.getTime() / 1000, nowS) + ')'));
}

// ---- JSON blocks with a copy button -------------------------------------------------------

function jsonText(v) {
  if (v === undefined) return 'null';
  try { return JSON.stringify(v, null, 2); } catch (e) { return String(v); }
}

function jsonBlock(value, extraClass) {
  const t = jsonText(value);
  const pre = el('pre', { class: 'json' }, t);
  const btn = el('button', { type: 'button', class: 'copy', title: 'Copy to the clipboard' }, 'Copy');
  btn.addEventListener('click', () => copyText(t, btn, pre));
  return el('div', { class: 'json-block' + (extraClass ? ' ' + extraClass : '') }, btn, pre);
}

/** Copies with the clipboard API when there is one; otherwise selects the text for Ctrl+C. */
function copyText(t, btn, pre) {
  const say = (msg) => {
    btn.textContent = msg;
    setTimeout(() => { btn.textContent = 'Copy'; }, 1500);
  };
  const select = () => {
    try {
      const range = document.createRange();
      range.selectNodeContents(pre);
      const sel = window.getSelection();
      sel.removeAllRanges();
      sel.addRange(range);
      say('Selected: Ctrl+C');
    } catch (e) {
      say('Copy failed');
    }
  };
  try {
    if (navigator.clipboard && typeof navigator.clipboard.writeText === 'function') {
      navigator.clipboard.writeText(t).then(() => say('Copied'), select);
    } else {
      select();
    }
  } catch (e) {
    select();
  }
}

// ---- API and the error banner -------------------------------------------------------------

class ApiError extends Error {
  constructor(message, status) { super(message); this.status = status; }
}

/** GET path?params as JSON; throws ApiError with the server's {"error"} message. */
async function api(path, params) {
  // encodeURIComponent, not URLSearchParams: the server reads '+' as itself (a schedule run's
  // id holds one), so a space must go as %20, not as a form's '+'.
  const q = [];
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== null && v !== undefined && v !== '') q.push(encodeURIComponent(k) + '=' + encodeURIComponent(String(v)));
  }
  const url = path + (q.length ? '?' + q.join('&') : '');
  let res;
  const give_up = new AbortController();
  const timer = setTimeout(() => give_up.abort(), FETCH_MS);
  try {
    res = await fetch(url, { headers: { Accept: 'application/json' }, credentials: 'same-origin', cache: 'no-store', signal: give_up.signal });
  } catch (e) {
    throw new ApiError(give_up.signal.aborted ? `the console did not answer within ${FETCH_MS / 1000} s`
      : 'the console is unreachable (' + (e && e.message ? e.message : e) + ')', 0);
  } finally {
    clearTimeout(timer);
  }
  let body = null;
  try { body = await res.json(); } catch (e) { body = null; }
  if (!res.ok) {
    const msg = body && typeof body.error === 'string' ? body.error : `${path}: HTTP ${res.status}`;
    throw new ApiError(msg, res.status);
  }
  if (body === null || typeof body !== 'object') throw new ApiError(`${path}: the answer is not JSON`, res.status);
  return body;
}

/**
 * POST path with a JSON body: the one way the pages change anything. Sends the CSRF header
 * when signed in (the session cookie goes with it); a non-2xx answer shows the server's
 * {"error"} in the banner (kept until the next page or action) and throws ApiError, whose
 * `body` is the answer (a bulk 409 carries the new count in it). Callers catch.
 */
async function post(path, body) {
  const headers = { 'Content-Type': 'application/json', Accept: 'application/json' };
  if (state.session.csrf) headers['X-Durable-CSRF'] = state.session.csrf;
  let res;
  try {
    res = await fetch(path, { method: 'POST', headers, body: JSON.stringify(body || {}),
      credentials: 'same-origin', cache: 'no-store' });
  } catch (e) {
    const err = new ApiError('the console is unreachable (' + messageOf(e) + ')', 0);
    showError(err.message, true);
    throw err;
  }
  let data = null;
  try { data = await res.json(); } catch (e) { data = null; }
  if (!res.ok) {
    const msg = data && typeof data.error === 'string' ? data.error : `${path}: HTTP ${res.status}`;
    // The session ended (idle, or the console restarted): show the page signed out, so that
    // Sign in is offered again instead of controls that can only fail.
    if (res.status === 401 && path !== '/api/login' && state.session.signed_in) {
      state.session.signed_in = false;
      state.session.csrf = null;
      state.session.who = null;
      if (typeof renderAuth === 'function') renderAuth();
    }
    showError(msg, true);
    const err = new ApiError(msg, res.status);
    err.body = data;
    throw err;
  }
  clearError(true);
  return data && typeof data === 'object' ? data : {};
}

const messageOf = (e) => (e && e.message ? e.message : String(e));

/** The banner; `sticky` (an action's error) stays until the next page or the next action. */
function showError(msg, sticky) {
  const b = $('#error');
  b.textContent = visible(msg);
  b.hidden = false;
  state.stickyError = !!sticky;
}

function clearError(sticky) {
  if (state.stickyError && !sticky) return;
  const b = $('#error');
  b.textContent = '';
  b.hidden = true;
  state.stickyError = false;
}

// ---- tables -------------------------------------------------------------------------------

/**
 * The node build() made at the last render for the same key and data, else a new one: a
 * refresh keeps what did not change (with its open <details>, expanded children, and the
 * elements a test or the user holds).
 */
function memo(ctx, key, data, build) {
  const k = key + '\n' + JSON.stringify(data === undefined ? null : data);
  let node = ctx.memo && ctx.memo.get(k);
  if (!node || ctx.nextMemo.has(k)) node = build();
  ctx.nextMemo.set(k, node);
  return node;
}

/** A table (id, header cells, one row per item, each row memoized). */
function table(ctx, id, headers, items, makeRow, emptyText, extraClass) {
  const tbody = el('tbody');
  if (!items.length) {
    tbody.appendChild(el('tr', { class: 'empty' }, el('td', { colspan: headers.length }, emptyText)));
  }
  for (const item of items) tbody.appendChild(memo(ctx, id, item, () => makeRow(item)));
  return el('div', { class: 'table-wrap' },
    el('table', { id, class: 'grid' + (extraClass ? ' ' + extraClass : '') },
      el('thead', null, el('tr', null, headers.map((h) => el('th', { scope: 'col' }, h)))), tbody));
}

/** A key/value table: [label, value node or text] pairs. */
function kvTable(id, pairs) {
  return el('table', { id, class: 'kv' },
    el('tbody', null, pairs.map(([k, v]) => el('tr', null, el('th', { scope: 'row' }, k), el('td', null, v)))));
}

/** A cell value for a generic column: times for *_at, JSON for objects, text otherwise. */
function anyValue(key, v) {
  if (v === null || v === undefined) return dash();
  if (typeof v === 'object') return jsonBlock(v);
  if (typeof v === 'boolean') return v ? 'yes' : 'no';
  if (/_at$/.test(key)) return timeEl(v);
  return String(v);
}

const cell = (content, cls) => el('td', cls ? { class: cls } : null, content);
const numCell = (v) => el('td', { class: 'num' }, text(v));

// ---- routing ------------------------------------------------------------------------------

function decode(s) {
  try { return decodeURIComponent(s); } catch (e) { return s; }
}

/** The hash as {path, params}; '+' stays a plus (ids may hold one). */
function parseHash() {
  let h = location.hash.replace(/^#/, '');
  if (!h.startsWith('/')) h = '/' + h;
  const q = h.indexOf('?');
  const path = (q < 0 ? h : h.slice(0, q)).replace(/\/+$/, '') || '/';
  const params = Object.create(null);
  if (q >= 0) {
    for (const part of h.slice(q + 1).split('&')) {
      if (!part) continue;
      const eq = part.indexOf('=');
      params[decode(eq < 0 ? part : part.slice(0, eq))] = eq < 0 ? '' : decode(part.slice(eq + 1));
    }
  }
  return { path, params };
}

/** Goes to a hash of ours; the page is not ready until it has drawn its data. */
function navigate(hash) {
  document.body.dataset.ready = '0';
  if (location.hash === hash) route();
  else location.hash = hash;
}

/** Draws the page the hash names: its skeleton at once, its data when it arrives. */
function route() {
  clearTimeout(state.timer);
  const { path, params } = parseHash();
  const page = PAGES[path] || notFoundPage;
  const ctx = { page, params, root: $('#page'), body: null, lastKey: null, memo: null, busy: false, stop: false };
  state.ctx = ctx;
  const body = document.body;
  body.dataset.ready = '0';
  body.dataset.page = page.name;
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('current', a.dataset.nav === page.nav);
  $('#title').textContent = page.title;
  document.title = page.title + ' · durable';
  clearError(true);
  renderAuth();  // actions.js: the header's sign-in link follows the page
  ctx.root.replaceChildren();
  try {
    if (page.setup) page.setup(ctx);
  } catch (e) {
    showError(messageOf(e));
  }
  window.scrollTo(0, 0);
  return load(ctx, true);
}

/** Loads the view's data and draws it if it changed; errors go to the banner. */
async function load(ctx, first) {
  ctx.busy = true;
  try {
    const data = await ctx.page.load(ctx);
    if (ctx !== state.ctx) return;
    const key = JSON.stringify(data);
    if (key !== ctx.lastKey) {
      const open = Array.from(ctx.root.querySelectorAll('details[data-key][open]'), (d) => d.dataset.key);
      ctx.nextMemo = new Map();
      ctx.page.render(ctx, data);
      ctx.memo = ctx.nextMemo;
      ctx.lastKey = key;
      for (const d of ctx.root.querySelectorAll('details[data-key]')) if (open.includes(d.dataset.key)) d.open = true;
    }
    clearError();
    ctx.asOf = new Date();
    delete document.body.dataset.stale;
    $('#updated').classList.remove('stale');
    $('#updated').textContent = 'updated ' + clock(ctx.asOf);
  } catch (e) {
    if (ctx !== state.ctx) return;
    // A refresh that failed leaves the page's data as it was: say as of when, in the banner
    // and the header, so that old numbers never pass for live ones.
    if (!first && ctx.asOf && !(e instanceof ApiError && e.status >= 400 && e.status < 500)) {
      document.body.dataset.stale = '1';
      $('#updated').classList.add('stale');
      $('#updated').textContent = 'data as of ' + clock(ctx.asOf);
      showError(`data as of ${clock(ctx.asOf)} — ${messageOf(e)}`);
    } else {
      showError(messageOf(e));
    }
    // A request the server refuses (a bad filter, an unknown id) would be refused again.
    if (e instanceof ApiError && e.status >= 400 && e.status < 500) ctx.stop = true;
    if (first || ctx.stop) (ctx.body || ctx.root).replaceChildren(el('p', { class: 'failed' }, messageOf(e)));
  } finally {
    ctx.busy = false;
    if (ctx === state.ctx) {
      document.body.dataset.ready = '1';
      scheduleRefresh();
    }
  }
}

function scheduleRefresh() {
  clearTimeout(state.timer);
  if (state.paused || !state.ctx || state.ctx.stop) return;
  // A page may refresh sooner while what it shows is live (a stream page: every second).
  const page = state.ctx.page;
  const ms = page.refreshMs ? page.refreshMs(state.ctx) : null;
  state.timer = setTimeout(refresh, ms || REFRESH_MS);
}

function refresh() {
  const ctx = state.ctx;
  if (!ctx || ctx.busy) return;
  if (document.hidden) { scheduleRefresh(); return; }
  load(ctx, false);
}

function setPaused(paused) {
  state.paused = paused;
  const b = $('#refresh-toggle');
  b.dataset.paused = paused ? '1' : '0';
  b.textContent = paused ? 'Resume auto-refresh' : 'Pause auto-refresh';
  b.setAttribute('aria-pressed', paused ? 'true' : 'false');
  if (paused) clearTimeout(state.timer);
  else if (state.ctx) { state.ctx.stop = false; refresh(); }
}
