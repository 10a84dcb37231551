// The durable web console's pages (core.js has the helpers they use, see its header for the
// safety rules every page keeps; actions.js the controls they show when signed in).
'use strict';

// ---- overview -----------------------------------------------------------------------------

// `estimated`: statuses whose count is the planner's estimate (a large table), shown with "≈".
function statusCards(counts, estimated) {
  const approx = estimated || [];
  const names = STATUSES.concat(Object.keys(counts).filter((k) => !STATUSES.includes(k)).sort());
  return el('div', { class: 'cards' }, names.map((s) =>
    el('a', { class: 'card status-card ' + statusClass(s) + (num(counts[s]) ? '' : ' zero'), 'data-status': s,
      href: hashOf('workflows', { status: s }) },
      el('span', { class: 'count' }, (approx.includes(s) ? '\u2248' : '') + String(num(counts[s]))),
      el('span', { class: 'label' }, s))));
}

function statCard(key, label, value, hash, sub, alert) {
  const children = [el('span', { class: 'count' }, text(value)), el('span', { class: 'label' }, label),
    sub ? el('span', { class: 'sub' }, sub) : null];
  const cls = 'card stat-card' + (alert ? ' alert' : '');
  return hash ? el('a', { class: cls, 'data-stat': key, href: hash }, children)
    : el('div', { class: cls, 'data-stat': key }, children);
}

function activityCards(s) {
  // Each card links to the list of what it counts.
  const failed = (within) => hashOf('workflows', { status: 'failed,dead_letter', changed_since: within });
  const retrying = hashOf('workflows', { status: 'pending,running,sleeping', retrying: '1' });
  return el('div', { class: 'cards' },
    statCard('failed_last_hour', 'failed, last hour', s.failed_last_hour, failed('1h'), null, num(s.failed_last_hour) > 0),
    statCard('failed_last_day', 'failed, last day', s.failed_last_day, failed('1d'), null, num(s.failed_last_day) > 0),
    statCard('finished_last_hour', 'finished, last hour', s.finished_last_hour),
    statCard('queued', 'queued', s.queued, '#/queues',
      s.oldest_queued_s === null || s.oldest_queued_s === undefined ? 'none waiting' : 'oldest ' + fmtAge(s.oldest_queued_s)),
    statCard('executors_alive', 'executors alive', s.executors_alive, '#/executors', null, s.executors_alive === 0),
    statCard('steps_retrying', 'steps retrying', s.steps_retrying, retrying, null, num(s.steps_retrying) > 0),
    statCard('messages_unconsumed', 'unconsumed messages', s.messages_unconsumed),
    statCard('journal_rows_estimate', 'journal rows (est.)', s.journal_rows_estimate, null,
      s.schema_version === null || s.schema_version === undefined ? null : 'schema version ' + s.schema_version));
}

/** A bar chart of finished and failed per bucket (stacked), started as a line; <title> tooltips. */
function chart(id, title, points, hourly) {
  points = arr(points);
  const W = 600, H = 150, top = 16, bottom = 20, left = 4, right = 4;
  const ph = H - top - bottom, bw = (W - left - right) / Math.max(points.length, 1);
  const max = Math.max(1, ...points.map((p) => Math.max(num(p.finished) + num(p.failed), num(p.started))));
  const label = (at) => { const d = parseTime(num(at)); return d ? (hourly ? localStamp(d).slice(5, 16) : clock(d).slice(0, 5)) : '?'; };
  const s = svg('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': title });
  s.appendChild(svg('line', { class: 'grid', x1: left, x2: W - right, y1: top, y2: top }));
  s.appendChild(svg('text', { class: 'tick', x: left, y: top - 4 }, String(max)));
  const line = [];
  points.forEach((p, i) => {
    const x = left + i * bw, f = num(p.finished), x2 = num(p.failed);
    const hf = (f / max) * ph, hx = (x2 / max) * ph;
    const g = svg('g', { class: 'bucket' },
      svg('title', null, `${label(p.at)}: started ${num(p.started)}, finished ${f}, failed ${x2}`),
      svg('rect', { class: 'hit', x, y: top, width: bw, height: ph }));
    if (hf > 0) g.appendChild(svg('rect', { class: 'bar finished', x: x + 1, y: top + ph - hf, width: Math.max(bw - 2, 1), height: hf }));
    if (hx > 0) g.appendChild(svg('rect', { class: 'bar failed', x: x + 1, y: top + ph - hf - hx, width: Math.max(bw - 2, 1), height: hx }));
    s.appendChild(g);
    line.push(`${(x + bw / 2).toFixed(1)},${(top + ph - (num(p.started) / max) * ph).toFixed(1)}`);
  });
  if (line.length) s.appendChild(svg('polyline', { class: 'started', points: line.join(' ') }));
  s.appendChild(svg('line', { class: 'axis', x1: left, x2: W - right, y1: top + ph, y2: top + ph }));
  if (points.length) {
    s.appendChild(svg('text', { class: 'tick', x: left, y: H - 5 }, label(points[0].at)));
    s.appendChild(svg('text', { class: 'tick', x: W - right, y: H - 5, 'text-anchor': 'end' }, label(points[points.length - 1].at)));
  }
  const legend = el('span', { class: 'legend' }, el('span', { class: 'key key-finished' }, 'finished'),
    el('span', { class: 'key key-failed' }, 'failed'), el('span', { class: 'key key-started' }, 'started'));
  return el('figure', { id, class: 'chart-box' }, el('figcaption', null, el('strong', null, title), legend),
    points.length ? s : el('p', { class: 'empty' }, 'No data.'));
}

const overviewPage = {
  name: 'overview', nav: 'overview', title: 'Overview',
  load: () => api('/api/overview'),
  render(ctx, d) {
    const s = d.stats || {};
    const series = d.series || {};
    ctx.root.replaceChildren(
      memo(ctx, 'ov-status', s.workflows, () => section('ov-status', 'Workflows by status', statusCards(s.workflows || {}, s.workflows_estimated))),
      memo(ctx, 'ov-activity', s, () => section('ov-activity', 'Activity', activityCards(s))),
      el('div', { class: 'charts' },
        memo(ctx, 'chart-hour', series.hour, () => chart('chart-hour', 'Last hour (per minute)', series.hour, false)),
        memo(ctx, 'chart-day', series.day, () => chart('chart-day', 'Last day (per hour)', series.day, true))),
      el('div', { class: 'two-col' },
        section('ov-queues', 'Queues', queueTable(ctx, arr(d.queues), 'overview-queues', true)),
        section('ov-executors', 'Executors', executorTable(ctx, arr(d.executors), 'overview-executors', true))));
  },
};

// ---- workflow lists -----------------------------------------------------------------------

/** "failed, dead_letter ," -> "failed,dead_letter". */
const normStatus = (v) => String(v).split(',').map((s) => s.trim()).filter(Boolean).join(',');

function listQuery(params, extra) {
  const q = {};
  for (const k of FILTER_KEYS) if (params[k]) q[k] = k === 'status' ? normStatus(params[k]) : params[k];
  Object.assign(q, extra || {});
  if (params.cursor) q.cursor = params.cursor;
  q.limit = PAGE_SIZE;
  return q;
}

function wfRow(r) {
  const reason = r.reason === null || r.reason === undefined ? '' : String(r.reason);
  const optLink = (key, v) => (v === null || v === undefined || v === '' ? dash() : link(hashOf('workflows', { [key]: v }), String(v)));
  return el('tr', { class: 'wf-row', 'data-id': r.id },
    cell(link(hashOf('workflow', { id: r.id }), text(r.id)), 'id'),
    cell(text(r.name)),
    cell(statusBadge(r.status)),
    cell(optLink('queue', r.queue), 'ref'),
    cell(optLink('executor', r.executor), 'ref'),
    cell(timeEl(r.created_at)),
    cell(timeEl(r.updated_at)),
    numCell(r.steps),
    el('td', { class: 'reason' + (r.blocked ? ' blocked' : ''), title: reason || null }, reason ? truncate(reason, 160) : dash()));
}

/**
 * A page of workflows with its pager. `path` and `params` make the page's own hash (the
 * cursor is added); a stack of earlier cursors per list makes "previous" go back.
 */
function workflowList(ctx, d, path, params) {
  const rows = arr(d.rows);
  const base = Object.assign({}, params);
  delete base.cursor;
  const listKey = hashOf(path, base);
  const cur = params.cursor || '';
  let stack = state.cursors[listKey] || [];
  const seen = stack.indexOf(cur);
  if (seen >= 0) stack = stack.slice(0, seen);  // back to an earlier page (browser back)
  state.cursors[listKey] = stack;
  const go = (cursor) => navigate(hashOf(path, Object.assign({}, base, { cursor })));
  const button = (id, label, enabled, onClick) => {
    const b = el('button', { type: 'button', id, class: 'pager-button', disabled: !enabled }, label);
    b.addEventListener('click', onClick);
    return b;
  };
  const pager = el('div', { class: 'pager' },
    el('span', { class: 'count' }, `${rows.length} workflow${rows.length === 1 ? '' : 's'}` +
      (cur ? ` (page ${stack.length + 1})` : '')),
    button('first-page', '« First', !!cur, () => { state.cursors[listKey] = []; go(''); }),
    button('prev-page', '‹ Previous', !!cur, () => { const s = state.cursors[listKey] || []; go(s.length ? s.pop() : ''); }),
    button('next-page', 'Next ›', !!d.next, () => { (state.cursors[listKey] = stack).push(cur); go(d.next); }));
  const headers = ['Id', 'Name', 'Status', 'Queue', 'Executor', 'Created', 'Updated', 'Steps', 'Reason'];
  // The server stopped reading at the console's max_scan before the page was full: what it shows
  // is every match down to that time, and Next goes on searching older workflows from there.
  const searched = d.searched && d.searched.to ? el('p', { id: 'searched', class: 'hint' },
    `Searched the workflows created down to `, timeEl(d.searched.to),
    ` (${Number(d.searched.rows).toLocaleString()} of each status): every match since then is listed. ` +
    `Next › searches older ones.`) : null;
  return [pager, searched || '', table(ctx, 'workflows', headers, rows, wfRow, searched ? 'No matches down to that time.' : 'No workflows match this filter.')];
}

/** The filter form: values from the hash; Apply writes them back into it. */
function filterForm(params, onEdit) {
  const form = el('form', { id: 'filters', class: 'filters', autocomplete: 'off' });
  if (onEdit) form.addEventListener('input', onEdit);  // a filter being changed: the bulk count is void
  const input = (name, placeholder) => {
    const i = el('input', { type: 'text', name, id: 'f-' + name, placeholder, spellcheck: 'false' });
    i.value = params[name] || '';
    return i;
  };
  const field = (name, label, placeholder) =>
    el('label', { class: 'field field-' + name, for: 'f-' + name }, el('span', null, label), input(name, placeholder));
  const status = input('status', 'any; e.g. failed,dead_letter');
  const checks = STATUSES.map((s) => {
    const c = el('input', { type: 'checkbox', class: 'status-check', 'data-status': s });
    return c;
  });
  const syncChecks = () => {
    const set = normStatus(status.value).split(',');
    checks.forEach((c) => { c.checked = set.includes(c.dataset.status); });
  };
  checks.forEach((c) => c.addEventListener('change', () => {
    const typed = normStatus(status.value).split(',').filter((s) => s && !STATUSES.includes(s));
    status.value = STATUSES.filter((s) => checks.find((x) => x.dataset.status === s).checked).concat(typed).join(',');
  }));
  status.addEventListener('input', syncChecks);
  syncChecks();
  const retrying = el('input', { type: 'checkbox', name: 'retrying', id: 'f-retrying' });
  retrying.checked = params.retrying === '1' || params.retrying === 'true';
  const apply = el('button', { type: 'submit', id: 'apply', class: 'primary' }, 'Apply');
  const clear = el('button', { type: 'button', id: 'clear-filters' }, 'Clear');
  clear.addEventListener('click', () => navigate('#/workflows'));
  form.append(
    el('div', { class: 'status-filter' },
      el('label', { class: 'field field-status', for: 'f-status' }, el('span', null, 'Status'), status),
      el('div', { class: 'checks' }, checks.map((c, i) => el('label', { class: 'check' }, c, ' ', statusBadge(STATUSES[i]))))),
    el('div', { class: 'fields' },
      field('name', 'Name', 'exact'), field('queue', 'Queue', 'exact'), field('executor', 'Executor', 'exact'),
      field('id_prefix', 'Id prefix', 'e.g. nightly@'), field('since', 'Created since', '15m, 2h, 7d or ISO'),
      field('until', 'Created until', '15m, 2h, 7d or ISO'), field('changed_since', 'Changed within', '15m, 2h, 7d'),
      field('text', 'Search', 'in ids, inputs, errors'),
      el('label', { class: 'check field-retrying', for: 'f-retrying' }, retrying, ' retrying a step'),
      el('div', { class: 'actions' }, apply, clear)));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const p = {};
    for (const k of FILTER_KEYS) {
      const i = form.elements.namedItem(k);
      const v = i.type === 'checkbox' ? (i.checked ? '1' : '') : i.value.trim();
      if (v) p[k] = k === 'status' ? normStatus(v) : v;
    }
    navigate(hashOf('workflows', p));
  });
  return form;
}

const workflowsPage = {
  name: 'workflows', nav: 'workflows', title: 'Workflows',
  setup(ctx) {
    ctx.body = el('div', { class: 'results' });
    const bulk = canAct() ? bulkBar(ctx) : null;
    ctx.root.append(filterForm(ctx.params, bulk ? bulk.discard : null), bulk ? bulk.root : signInHint('cancel, resume or retry the workflows of a filter') || '',
      ctx.body);
  },
  load: (ctx) => api('/api/workflows', listQuery(ctx.params)),
  render(ctx, d) {
    const p = {};
    for (const k of FILTER_KEYS.concat(['cursor'])) if (ctx.params[k]) p[k] = ctx.params[k];
    ctx.body.replaceChildren(...workflowList(ctx, d, 'workflows', p));
  },
};

// ---- one workflow -------------------------------------------------------------------------

// Columns shown in the header or their own section; wf-fields shows the rest.
const SHOWN = ['id', 'name', 'status', 'status_reason', 'inputs', 'output', 'error', 'last_error', 'parent_id',
  'queue', 'executor_id', 'created_at', 'updated_at', 'completed_at'];

function workflowHeader(w) {
  const fact = (k, v) => el('div', { class: 'fact' }, el('dt', null, k), el('dd', null, v));
  const optLink = (key, v) => (v === null || v === undefined ? dash() : link(hashOf('workflows', { [key]: v }), String(v)));
  return el('div', { class: 'wf-head' },
    el('div', { class: 'wf-idline' }, el('code', { id: 'wf-id' }, text(w.id)), statusBadge(w.status, 'wf-status'),
      w.parent_id ? el('span', { class: 'parent' }, el('a', { id: 'wf-parent', href: hashOf('workflow', { id: w.parent_id }) }, 'parent'),
        ' ', el('code', null, String(w.parent_id))) : null),
    w.status_reason ? el('p', { id: 'wf-reason', class: 'reason' }, String(w.status_reason)) : null,
    el('dl', { class: 'facts' },
      fact('Name', text(w.name)), fact('Queue', optLink('queue', w.queue)), fact('Executor', optLink('executor', w.executor_id)),
      fact('Created', timeEl(w.created_at)), fact('Updated', timeEl(w.updated_at)), fact('Completed', timeEl(w.completed_at)),
      // The trace id of its W3C trace context (the whole traceparent is among the fields below).
      typeof w.traceparent === 'string' ? fact('Trace', el('code', { id: 'wf-trace', title: w.traceparent }, w.traceparent.slice(3, 35))) : null));
}

/** Why a workflow that has not ended is where it is (the view `waiting`), in words. */
function waitingLine(v) {
  if (!v || !v.reason) return '';
  return el('p', { id: 'wf-waiting', class: 'waiting-line' + (v.blocked ? ' blocked' : ''), 'data-kind': v.kind, 'data-blocked': v.blocked ? 'true' : 'false' },
    el('strong', null, v.blocked ? 'Cannot move on its own: ' : 'Waiting: '), text(v.reason),
    v.next_at ? el('span', { class: 'muted' }, ' (next: ', timeEl(v.next_at), ')') : null);
}

function outputSection(w) {
  const parts = [];
  const e = w.error;
  if (e !== null && e !== undefined) {
    const summary = typeof e === 'object'
      ? [e.type ? el('strong', null, String(e.type) + ': ') : null, text(e.message),
        e.step !== null && e.step !== undefined ? el('span', { class: 'muted' }, ` (step ${e.step})`) : null]
      : [String(e)];
    parts.push(el('p', { class: 'error-text' }, summary), jsonBlock(e, 'error-json'));
  }
  if (w.output !== null && w.output !== undefined) parts.push(jsonBlock(w.output));
  if (w.last_error) parts.push(el('p', { class: 'last-error' }, el('strong', null, 'Last error: '), String(w.last_error)));
  if (!parts.length) parts.push(el('p', { class: 'empty' }, 'No output yet.'));
  return section('wf-output', e ? 'Error' : 'Output', parts);
}

/** The steps as a table with a bar per step, placed between the workflow's creation and its end. */
function timelineSection(ctx, w, steps, attempts) {
  // A step's bar starts at its first attempt (its row's started_at is the attempt that succeeded).
  const first = new Map();
  for (const a of arr(attempts)) {
    const m = msOf(a.started_at);
    if (m !== null && (!first.has(a.seq) || m < first.get(a.seq))) first.set(a.seq, m);
  }
  const t0 = msOf(w.created_at);
  let t1 = t0 === null ? null : t0 + 1;
  for (const v of [w.completed_at, w.updated_at].concat(...steps.map((s) => [s.started_at, s.completed_at]))) {
    const m = msOf(v);
    if (m !== null && t1 !== null && m > t1) t1 = m;
  }
  if (!FINAL.includes(w.status) && t1 !== null) t1 = Math.max(t1, Date.now());
  const span = t1 !== null ? Math.max(t1 - t0, 1) : 1;
  const bar = (s) => {
    const own = msOf(s.started_at);
    const a = first.has(s.seq) && (own === null || first.get(s.seq) < own) ? first.get(s.seq) : own;
    if (t0 === null || a === null) return dash();
    const b = msOf(s.completed_at) ?? a;
    const x = Math.min(Math.max(((a - t0) / span) * 1000, 0), 997);
    const wd = Math.max(((b - a) / span) * 1000, 3);
    return svg('svg', { class: 'bar-track', viewBox: '0 0 1000 12', preserveAspectRatio: 'none' },
      svg('rect', { class: 'bar ' + statusClass(s.status), x, y: 1, width: Math.min(wd, 1000 - x), height: 10 },
        svg('title', null, `+${fmtDuration(a - t0)} for ${fmtDuration(b - a)}`)));
  };
  const row = (s) => {
    const err = s.last_error === null || s.last_error === undefined ? '' : String(s.last_error);
    const out = s.output === null || s.output === undefined ? dash()
      : el('details', { 'data-key': 'step-output:' + s.seq }, el('summary', null, 'output'), jsonBlock(s.output));
    return el('tr', { class: 'step-row' + (s.journaled === false ? ' unjournaled' : ''), 'data-seq': s.seq },
      numCell(s.seq), cell(text(s.name)), cell(text(s.kind)),
      cell([statusBadge(s.status), s.journaled === false ? el('span', { class: 'muted', title: 'attempted, no journal row yet' }, ' *') : null]),
      numCell(s.attempts), el('td', { class: 'num', title: s.started_at ? String(s.started_at) : null }, fmtDuration(s.duration_ms)),
      cell(bar(s), 'bar-cell'),
      el('td', { class: 'error-text', title: err || null }, err ? truncate(err, 300) : dash()),
      cell(timeEl(s.next_attempt_at)), cell(out), ctx.controls ? cell(forkButton(ctx, s.seq)) : null);
  };
  const headers = ['#', 'Step', 'Kind', 'Status', 'Attempts', 'Duration', 'Timeline', 'Last error', 'Next attempt', 'Output']
    .concat(ctx.controls ? ['Fork'] : []);
  return section('wf-timeline', `Steps (${steps.length})`, table(ctx, 'steps', headers, steps, row, 'No steps yet.', 'timeline'));
}

/** Every attempt of the steps that had more than one, step by step, oldest first. */
function attemptsSection(ctx, attempts) {
  const row = (a) => {
    const err = a.error === null || a.error === undefined ? '' : (a.error_type ? a.error_type + ': ' : '') + String(a.error);
    return el('tr', { class: 'attempt-row', 'data-seq': a.seq, 'data-attempt': a.attempt, 'data-outcome': a.outcome },
      numCell(a.seq), cell(text(a.name)), numCell(a.attempt), cell(statusBadge(a.outcome)),
      cell(timeEl(a.started_at)), cell(timeEl(a.ended_at)), el('td', { class: 'num' }, fmtDuration(a.duration_ms)),
      el('td', { class: 'error-text', title: err || null }, err ? truncate(err, 300) : dash()),
      cell(timeEl(a.next_attempt_at)));
  };
  const title = `Attempts (${attempts.length}${attempts.length >= 1000 ? ', the newest' : ''})`;
  return section('wf-attempts', title, table(ctx, 'attempts', ['#', 'Step', 'Attempt', 'Outcome', 'Started', 'Ended', 'Duration', 'Error', 'Next attempt'],
    attempts, row, 'No step was attempted more than once.'));
}

/** Children as a tree; a child's own children are fetched when it is expanded. */
function childTree(ctx, children, depth) {
  if (!children.length) return el('p', { class: 'empty' }, depth ? 'No children.' : 'No children.');
  return el('ul', { class: 'tree' }, children.map((c) => childItem(ctx, c, depth)));
}

function childItem(ctx, c, depth) {
  const sub = el('div', { class: 'subtree' });
  const btn = el('button', { type: 'button', class: 'expand', 'aria-expanded': 'false', title: 'Show its children' }, '+');
  const show = (kids) => {
    sub.replaceChildren(childTree(ctx, kids, depth + 1));
    btn.textContent = '−';
    btn.setAttribute('aria-expanded', 'true');
  };
  btn.addEventListener('click', () => {
    if (ctx.expanded.has(c.id)) {
      ctx.expanded.delete(c.id);
      sub.replaceChildren();
      btn.textContent = '+';
      btn.setAttribute('aria-expanded', 'false');
      return;
    }
    btn.textContent = '…';
    api('/api/workflow', { id: c.id }).then((d) => {
      const kids = arr(d.children);
      ctx.expanded.set(c.id, kids);
      show(kids);
    }, (e) => {
      btn.textContent = '+';
      sub.replaceChildren(el('p', { class: 'failed' }, messageOf(e)));
    });
  });
  if (ctx.expanded.has(c.id)) show(ctx.expanded.get(c.id));
  return el('li', { class: 'child', 'data-id': c.id },
    depth < 20 ? btn : null, link(hashOf('workflow', { id: c.id }), text(c.id)), ' ', el('span', { class: 'name' }, text(c.name)),
    ' ', statusBadge(c.status), ' ', timeEl(c.created_at), sub);
}

const workflowPage = {
  name: 'workflow', nav: 'workflows', title: 'Workflow',
  setup(ctx) {
    ctx.expanded = new Map();
    ctx.controls = canAct() ? workflowControls(ctx) : null;  // kept across refreshes
  },
  load(ctx) {
    if (!ctx.params.id) return Promise.reject(new ApiError('the address names no workflow (#/workflow?id=...)', 400));
    return api('/api/workflow', { id: ctx.params.id });
  },
  render(ctx, d) {
    const w = d.workflow || {};
    const steps = arr(d.steps);
    const rest = Object.keys(w).filter((k) => !SHOWN.includes(k));
    const kids = arr(d.children);
    ctx.root.replaceChildren(
      memo(ctx, 'wf-head', w, () => workflowHeader(w)),
      memo(ctx, 'wf-waiting', d.waiting, () => waitingLine(d.waiting)),
      ctx.controls ? ctx.controls.update(w) : signInHint('cancel, resume, retry, fork or message it') || '',
      memo(ctx, 'wf-inputs', w.inputs, () => section('wf-inputs', 'Inputs', jsonBlock(w.inputs))),
      memo(ctx, 'wf-output', [w.output, w.error, w.last_error], () => outputSection(w)),
      memo(ctx, 'wf-timeline', [w.created_at, w.updated_at, w.completed_at, w.status, steps, d.attempts], () => timelineSection(ctx, w, steps, d.attempts)),
      memo(ctx, 'wf-attempts', arr(d.attempts), () => attemptsSection(ctx, arr(d.attempts))),
      memo(ctx, 'wf-children', kids, () => section('wf-children', `Children (${kids.length})`, childTree(ctx, kids, 0))),
      section('wf-inbox', `Unconsumed messages (${arr(d.inbox).length})`,
        table(ctx, 'inbox', ['Id', 'Topic', 'Payload', 'Sent'], arr(d.inbox), (m) => el('tr', { class: 'message-row', 'data-id': m.id },
          numCell(m.id), cell(text(m.topic)), cell(jsonBlock(m.payload)), cell(timeEl(m.created_at))), 'No unconsumed messages.')),
      section('wf-events', `Events (${arr(d.events).length})`,
        table(ctx, 'events', ['Key', 'Value', 'Updated'], arr(d.events), (v) => el('tr', { class: 'event-row', 'data-key': v.key },
          cell(text(v.key)), cell(jsonBlock(v.value)), cell(timeEl(v.updated_at))), 'No events.')),
      memo(ctx, 'wf-streams', arr(d.streams), () => streamsSection(ctx, w, arr(d.streams))),
      section('wf-history', 'History',
        table(ctx, 'history', ['At', 'From', 'To', 'Reason', 'Executor', 'Epoch'], arr(d.history), (h) => el('tr', { class: 'history-row' },
          cell(timeEl(h.at)), cell(h.previous ? statusBadge(h.previous) : dash()), cell(statusBadge(h.status)), cell(text(h.reason)),
          cell(h.previous_executor && h.previous_executor !== h.executor_id ? `${h.previous_executor} → ${text(h.executor_id)}` : text(h.executor_id)),
          numCell(h.epoch)), 'No history.')),
      section('wf-fields', 'Other fields', kvTable('fields', rest.map((k) => [k, anyValue(k, w[k])]))));
  },
};

// ---- streams ------------------------------------------------------------------------------

/** A workflow's streams (ctx.write_stream), each linking to its live page. */
function streamsSection(ctx, w, streams) {
  return section('wf-streams', `Streams (${streams.length})`,
    table(ctx, 'streams', ['Key', 'Values', 'State', 'Last written'], streams, (v) => el('tr', { class: 'stream-row', 'data-key': v.key },
      cell(link(hashOf('stream', { id: w.id, key: v.key }), text(v.key))), numCell(v.values),
      cell(v.closed ? el('span', { class: 'badge closed' }, 'closed') : el('span', { class: 'badge active' }, 'open')),
      cell(timeEl(v.last_at))), 'No streams.'));
}

const STREAM_KEPT = 1000;  // the newest values a stream page shows
const STREAM_PAGE = 500;   // what /api/stream returns at most (console_detail::stream_page)
const FINISHED = ['succeeded', 'failed', 'cancelled'];

/** One stream, live: each refresh reads on from the last offset shown, every second while the
 *  stream may grow. */
const streamPage = {
  name: 'stream', nav: 'workflows', title: 'Stream',
  refreshMs: (ctx) => (ctx.ended ? null : 1000),
  setup(ctx) {
    ctx.values = [];
    ctx.next = 0;
    ctx.ended = false;
    ctx.started = false;  // the first read tells the stream's length
  },
  async load(ctx) {
    const { id, key } = ctx.params;
    if (!id || !key) throw new ApiError('the address names no stream (#/stream?id=...&key=...)', 400);
    let d = null;
    for (let round = 0; round < 20; ++round) {  // a page behind catches up in a few reads
      d = await api('/api/stream', { id, key, from: ctx.next });
      // A long stream: the page shows its newest values, so it starts that far from the end.
      if (!ctx.started && num(d.length) > STREAM_KEPT) {
        ctx.started = true;
        ctx.next = num(d.length) - STREAM_KEPT;
        continue;
      }
      ctx.started = true;
      const got = arr(d.values);
      ctx.values.push(...got);
      if (ctx.values.length > STREAM_KEPT) ctx.values.splice(0, ctx.values.length - STREAM_KEPT);
      ctx.next = Math.max(ctx.next, num(d.next));
      const closed = d.closed_at !== null && d.closed_at !== undefined && ctx.next >= num(d.closed_at);
      ctx.ended = closed || (FINISHED.includes(d.status) && got.length === 0);
      if (got.length < STREAM_PAGE) break;
    }
    return { values: ctx.values, next: ctx.next, status: d.status, closed_at: d.closed_at, ended: ctx.ended };
  },
  render(ctx, d) {
    const closed = d.closed_at !== null && d.closed_at !== undefined;
    const words = d.ended ? (closed ? `closed after ${num(d.closed_at)} values`
      : `ended with its workflow (${text(d.status)}) without a close`)
      : closed ? `closed after ${num(d.closed_at)} values; reading them`
        : 'open: new values appear as they are written';
    const shown = d.values.length && d.values[0].offset > 0 ? `, the newest ${d.values.length}` : '';
    ctx.root.replaceChildren(
      el('div', { class: 'wf-head' }, el('code', { id: 'stream-key' }, String(ctx.params.key)), ' of ',
        link(hashOf('workflow', { id: ctx.params.id }), el('code', { id: 'stream-workflow' }, String(ctx.params.id))),
        ' ', statusBadge(d.status)),
      el('p', { id: 'stream-state', class: d.ended ? 'ended' : 'live' }, words),
      section('stream-values', `Values (${d.next}${shown})`,
        table(ctx, 'values', ['Offset', 'Value'], d.values, (v) => el('tr', { class: 'value-row', 'data-offset': v.offset },
          numCell(v.offset), cell(jsonBlock(v.value))), 'No values yet.')));
  },
};

// ---- queues, executors --------------------------------------------------------------------

function queueTable(ctx, rows, id, short) {
  const acts = !short && canAct();
  const headers = ['Queue', 'Queued', 'Delayed', 'Running', 'Sleeping', 'State', 'Oldest queued']
    .concat(short ? [] : ['Concurrency', 'Per worker', 'Rate limit']).concat(acts ? [''] : []);
  const row = (q) => {
    const cells = [cell(link(hashOf('workflows', { queue: q.queue }), text(q.queue))), numCell(q.queued), numCell(q.delayed),
      numCell(q.running), numCell(q.sleeping),
      cell(q.paused ? el('span', { class: 'badge paused' }, 'paused') : el('span', { class: 'badge active' }, 'active')),
      el('td', { class: 'num' }, q.oldest_queued_s === null || q.oldest_queued_s === undefined ? '–' : fmtAge(q.oldest_queued_s))];
    if (!short) {
      cells.push(numCell(q.concurrency), numCell(q.worker_concurrency),
        el('td', { class: 'num' }, q.rate_limit === null || q.rate_limit === undefined ? '–'
          : `${q.rate_limit} per ${fmtDuration(q.rate_period_ms)}`));
    }
    if (acts) cells.push(cell(queueButtons(ctx, q), 'row-actions'));
    return el('tr', { class: 'queue-row', 'data-queue': q.queue }, cells);
  };
  return table(ctx, id, headers, rows, row, 'No queues.');
}

function executorTable(ctx, rows, id, short) {
  const headers = short ? ['Executor', 'State', 'Host', 'Heartbeat', 'Owned']
    : ['Executor', 'State', 'Host', 'Pid', 'App version', 'Versions', 'Started', 'Heartbeat', 'Owned'];
  const row = (e) => {
    const beat = e.heartbeat_age_s === null || e.heartbeat_age_s === undefined ? dash()
      : el('span', { title: e.heartbeat_at ? String(e.heartbeat_at) : null }, fmtAge(e.heartbeat_age_s) + ' ago');
    const cells = [cell(link(hashOf('workflows', { executor: e.id }), text(e.id)), 'id'),
      cell(el('span', { class: 'badge state-' + String(e.state).replace(/[^a-z_]/g, '') }, text(e.state))), cell(text(e.host))];
    if (!short) {
      const v = e.versions;
      cells.push(numCell(e.pid), cell(text(e.app_version)),
        cell(Array.isArray(v) ? v.map((x) => (typeof x === 'string' ? x : jsonText(x))).join(', ') || '–'
          : v === null || v === undefined ? dash() : jsonText(v)),
        cell(timeEl(e.started_at)));
    }
    cells.push(cell(beat), numCell(e.owned));
    return el('tr', { class: 'executor-row', 'data-id': e.id }, cells);
  };
  return table(ctx, id, headers, rows, row, 'No executors.');
}

const queuesPage = {
  name: 'queues', nav: 'queues', title: 'Queues',
  setup(ctx) {
    ctx.notice = noticeEl();
    ctx.body = el('div');
    ctx.root.append(signInHint('pause or resume a queue') || '', ctx.notice, ctx.body);
  },
  load: () => api('/api/queues'),
  render(ctx, d) { ctx.body.replaceChildren(queueTable(ctx, arr(d.rows), 'queues', false)); },
};

const executorsPage = {
  name: 'executors', nav: 'executors', title: 'Executors',
  load: () => api('/api/executors'),
  render(ctx, d) { ctx.root.replaceChildren(executorTable(ctx, arr(d.rows), 'executors', false)); },
};

// ---- schedules ----------------------------------------------------------------------------

const nowOf = (s) => (typeof s.now === 'number' ? s.now : Date.now() / 1000);

function scheduleRow(ctx, s) {
  const now = nowOf(s);
  return el('tr', { class: 'schedule-row', 'data-id': s.id },
    cell(link(hashOf('schedule', { id: s.id }), text(s.id)), 'id'), cell(el('code', { class: 'cron' }, text(s.cron))),
    cell(text(s.time_zone)), cell(text(s.workflow_name)), cell(text(s.queue)),
    cell(s.paused ? el('span', { class: 'badge paused' }, 'paused') : el('span', { class: 'badge active' }, 'active')),
    cell([fireEl(s.next_fire_at, now), s.overdue ? [' ', el('span', { class: 'badge overdue', 'data-overdue-s': s.overdue_s,
      title: 'the slot passed and was not fired: no live executor runs schedules, or they are behind' }, 'overdue by ' + s.overdue)] : null]),
    cell(fireEl(s.last_fired_at ?? s.last_slot_at, now)),
    cell(s.last_workflow_id ? [s.last_status ? statusBadge(s.last_status) : null, ' ',
      link(hashOf('workflow', { id: s.last_workflow_id }), String(s.last_workflow_id))] : dash(), 'last-run'),
    numCell(s.fired), numCell(s.missed), numCell(s.late), canAct() ? cell(scheduleButtons(ctx, s)) : null);
}

const schedulesPage = {
  name: 'schedules', nav: 'schedules', title: 'Schedules',
  setup(ctx) {
    ctx.notice = noticeEl();
    ctx.body = el('div');
    ctx.root.append(signInHint('pause, resume or trigger a schedule') || '', ctx.notice, ctx.body);
  },
  load: () => api('/api/schedules'),
  render(ctx, d) {
    const headers = ['Schedule', 'Cron', 'Time zone', 'Workflow', 'Queue', 'State', 'Next fire', 'Last fire',
      'Last run', 'Fired', 'Missed', 'Late'].concat(canAct() ? [''] : []);
    ctx.body.replaceChildren(table(ctx, 'schedules', headers, arr(d.rows), (s) => scheduleRow(ctx, s), 'No schedules.'));
  },
};

const EPOCH_KEYS = ['next_fire_at', 'last_slot_at', 'start_at', 'end_at'];

const schedulePage = {
  name: 'schedule', nav: 'schedules', title: 'Schedule',
  async load(ctx) {
    const id = ctx.params.id || '';
    if (!id) throw new ApiError('the address names no schedule (#/schedule?id=...)', 400);
    const [list, runs] = await Promise.all([api('/api/schedules'),
      api('/api/workflows', listQuery({ cursor: ctx.params.cursor }, { id_prefix: id + '@' }))]);
    const s = arr(list.rows).find((r) => r && r.id === id);
    if (!s) throw new ApiError(`no schedule has the id '${id}'`, 404);
    return { schedule: s, runs };
  },
  render(ctx, d) {
    const s = d.schedule, now = nowOf(s);
    const pairs = Object.keys(s).filter((k) => k !== 'now').map((k) => {
      let v;
      if (EPOCH_KEYS.includes(k)) v = fireEl(s[k], now);
      else if (k === 'last_workflow_id' && s[k]) v = link(hashOf('workflow', { id: s[k] }), String(s[k]));
      else if (k === 'last_status' && s[k]) v = statusBadge(s[k]);
      else if (k === 'cron' && s[k]) v = el('code', null, String(s[k]));
      else v = anyValue(k, s[k]);
      return [k, v];
    });
    ctx.root.replaceChildren(
      el('div', { class: 'wf-head' }, el('code', { id: 'schedule-id' }, String(s.id)),
        s.paused ? el('span', { class: 'badge paused' }, 'paused') : el('span', { class: 'badge active' }, 'active')),
      section('schedule-fields', 'Schedule', kvTable('schedule', pairs)),
      section('schedule-runs', 'Runs', workflowList(ctx, d.runs, 'schedule', { id: s.id, cursor: ctx.params.cursor })));
  },
};

const notFoundPage = {
  name: 'notfound', nav: null, title: 'Not found',
  load: () => Promise.resolve({}),
  render(ctx) {
    ctx.root.replaceChildren(el('p', { class: 'failed' }, 'There is no page at ', el('code', null, location.hash), '. ',
      link('#/', 'Go to the overview.')));
  },
};

const PAGES = {
  '/': overviewPage, '/workflows': workflowsPage, '/workflow': workflowPage, '/queues': queuesPage,
  '/executors': executorsPage, '/schedules': schedulesPage, '/schedule': schedulePage, '/stream': streamPage,
  '/login': loginPage, '/audit': auditPage,
};

// ---- start --------------------------------------------------------------------------------

async function start() {
  // Anything unexpected shows in the banner too (and stays in the browser's log, which the
  // browser tests read).
  window.addEventListener('error', (e) => { showError('unexpected error: ' + (e.message || 'unknown')); });
  window.addEventListener('unhandledrejection', (e) => { showError('unexpected error: ' + messageOf(e.reason)); });
  // Our own links: mark the page not ready at once (hashchange comes later), then go.
  document.addEventListener('click', (e) => {
    if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    const a = e.target instanceof Element ? e.target.closest('a[href^="#/"]') : null;
    if (!a) return;
    e.preventDefault();
    navigate(a.getAttribute('href'));
  });
  window.addEventListener('hashchange', () => { route(); });
  $('#refresh-toggle').addEventListener('click', () => setPaused(!state.paused));
  // The session first: the pages show their controls only to a signed-in browser.
  await loadSession();
  route();
}

start();
