// The durable web console's actions (core.js has the helpers; see its header for the safety
// rules): signing in and out, the controls of the workflow, queue and schedule pages, the bulk
// bar of the workflow list, and the audit page. Every change goes through post() (core.js).
// None of it shows unless the server says actions are on (a token is configured and the
// console is not read-only) and this browser is signed in; the server refuses them anyway.
'use strict';

const WF_ACTIONS = [
  // action, label, the statuses it applies to, the question asked before it runs
  ['cancel', 'Cancel', ['pending', 'running', 'sleeping', 'parked', 'dead_letter'], 'Cancel this workflow? It stops at once.'],
  ['resume', 'Resume', ['cancelled', 'parked', 'dead_letter'], 'Resume this workflow from its journal?'],
  ['retry', 'Retry', ['dead_letter'], 'Retry the failed step with a fresh count of attempts?'],
];
const BULK_ACTIONS = ['cancel', 'resume', 'retry'];

/** Actions are on for this console (a token is configured, not read-only). */
const actionsOn = () => !!state.session.actions;
/** Replaces a node's children with nodes, texts and arrays of them; null and false are skipped. */
const fill = (node, ...children) => { node.replaceChildren(); append(node, children); };
/** This browser may act: actions are on and it is signed in. */
const canAct = () => actionsOn() && !!state.session.signed_in;

// ---- the session and the header ------------------------------------------------------------

async function loadSession() {
  try {
    state.session = await api('/api/session');
  } catch (e) {
    state.session = {};
    showError('session: ' + messageOf(e));
  }
  const s = state.session;
  fill($('#session'), el('span', { class: 'schema', title: 'schema' }, 'schema ', el('code', null, text(s.schema))),
    actionsOn() ? null : el('span', { id: 'read-only', class: 'badge readonly', title: readOnlyWhy() }, 'read-only'),
    s.version ? el('span', { class: 'version' }, 'v' + String(s.version)) : null);
  renderAuth();
}

/** The header's "Sign in" link (back to this page afterwards) or "signed in as ..., Sign out". */
function renderAuth() {
  const box = $('#auth');
  const s = state.session;
  if (!actionsOn()) { box.replaceChildren(); return; }
  if (s.signed_in) {
    const out = el('button', { type: 'button', id: 'sign-out' }, 'Sign out');
    out.addEventListener('click', signOut);
    box.replaceChildren(el('span', { id: 'who', class: 'who' }, 'signed in', s.who ? [' as ', el('strong', null, String(s.who))] : null), out);
  } else if (parseHash().path === '/login') {
    box.replaceChildren();
  } else {
    box.replaceChildren(el('a', { id: 'sign-in', class: 'sign-in', href: hashOf('login', { next: location.hash || '#/' }) }, 'Sign in'));
  }
}

async function signOut() {
  try {
    await post('/api/logout', {});
  } catch (e) {
    return;  // the banner says why
  }
  Object.assign(state.session, { signed_in: false, who: null, csrf: null });
  renderAuth();
  route();  // the page again, without its controls
}

/** Why the console takes no actions, in the server's words when it gives them. */
function readOnlyWhy() {
  const why = state.session.why_read_only;
  return typeof why === 'string' && why ? 'this console takes no actions: ' + why : 'this console takes no actions';
}

/** "Sign in to ..." for a page whose controls need it; nothing when actions are off or signed in. */
function signInHint(what) {
  if (!actionsOn() || canAct()) return null;
  return el('p', { id: 'sign-in-hint', class: 'hint' },
    el('a', { href: hashOf('login', { next: location.hash || '#/' }) }, 'Sign in'), ' to ' + what + '.');
}

/** Where to go after signing in: one of our own hashes, else the overview. */
function nextHash(v) {
  return typeof v === 'string' && v.startsWith('#/') && !v.startsWith('#/login') ? v : '#/';
}

const loginPage = {
  name: 'login', nav: null, title: 'Sign in',
  setup(ctx) {
    const s = state.session;
    const next = nextHash(ctx.params.next);
    if (!actionsOn()) {
      ctx.root.append(el('p', { id: 'login-off', class: 'panel' }, 'There is nothing to sign in to: ' + readOnlyWhy() + '.'));
      return;
    }
    if (s.signed_in) {
      ctx.root.append(el('p', { id: 'login-done', class: 'panel' }, 'Signed in', s.who ? [' as ', String(s.who)] : null, '. ',
        link(next, 'Back')));
      return;
    }
    const token = el('input', { type: 'password', id: 'login-token', name: 'token', autocomplete: 'current-password', required: true });
    const name = el('input', { type: 'text', id: 'login-name', name: 'name', autocomplete: 'username', placeholder: 'shown in the audit', spellcheck: 'false' });
    const submit = el('button', { type: 'submit', id: 'login-submit', class: 'primary' }, 'Sign in');
    const message = el('p', { id: 'login-message', class: 'failed', role: 'status' });
    const form = el('form', { id: 'login-form', class: 'panel login', autocomplete: 'on' },
      el('label', { class: 'field', for: 'login-token' }, el('span', null, 'Token'), token),
      el('label', { class: 'field', for: 'login-name' }, el('span', null, 'Your name'), name),
      el('div', { class: 'actions' }, submit), message,
      el('p', { class: 'muted' }, 'The token is the one the console was started with. Your name goes into the audit with each action.'));
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      submit.disabled = true;
      message.textContent = '';
      try {
        const r = await post('/api/login', { token: token.value, name: name.value.trim() });
        Object.assign(state.session, { signed_in: true, who: r.who ?? null, csrf: r.csrf ?? null });
        navigate(next);
      } catch (err) {
        message.textContent = visible(messageOf(err));
        token.select();
      } finally {
        submit.disabled = false;
      }
    });
    ctx.root.append(form);
    setTimeout(() => token.focus(), 0);
  },
  load: () => Promise.resolve({}),
  render() {},
};

// ---- running one action ---------------------------------------------------------------------

/** The line where an action's outcome is told ('working', its message, or its error). */
function noticeEl(id) {
  return el('div', { id: id || 'action-result', class: 'notice', role: 'status', hidden: true });
}

function say(notice, kind, ...content) {
  notice.hidden = false;
  notice.dataset.state = kind;
  notice.className = 'notice notice-' + kind;
  fill(notice, content);
}

/**
 * POSTs one action, tells its outcome in `notice` (`extra(r)` adds nodes, such as a link to a
 * new workflow) and reloads the page's data. Completes with the answer, or null if refused.
 */
async function act(ctx, body, notice, extra) {
  say(notice, 'busy', 'Working…');
  try {
    const r = await post('/api/action', body);
    say(notice, 'ok', text(r.message || 'done'), extra ? extra(r) : null,
      r.audit_id !== undefined && r.audit_id !== null ? el('span', { class: 'muted' }, ' (audit ', link('#/audit', '#' + String(r.audit_id)), ')') : null);
    if (ctx === state.ctx) load(ctx, false);
    return r;
  } catch (e) {
    say(notice, 'error', messageOf(e));
    return null;
  }
}

const newLink = (id, elementId) => (id === null || id === undefined || id === '' ? null
  : [' ', el('a', { id: elementId, href: hashOf('workflow', { id }) }, String(id))]);

function button(id, label, cls, onClick, attrs) {
  const b = el('button', Object.assign({ type: 'button', id, class: cls }, attrs || {}), label);
  b.addEventListener('click', onClick);
  return b;
}

// ---- one workflow ---------------------------------------------------------------------------

/**
 * The workflow page's controls, made once per view so that a refresh keeps what is being
 * typed or confirmed; update(w) shows the buttons the status allows.
 */
function workflowControls(ctx) {
  const id = ctx.params.id;
  const notice = noticeEl('act-result');
  const question = el('span', { id: 'act-question' });
  const yes = button('act-yes', 'Yes', 'primary danger', () => run());
  const no = button('act-no', 'No', '', () => { confirmBox.hidden = true; pending = null; });
  const confirmBox = el('div', { id: 'act-confirm', class: 'confirm', hidden: true }, question, ' ', yes, ' ', no);
  let pending = null;
  const run = async () => {
    if (!pending) return;
    const action = pending;
    pending = null;
    confirmBox.hidden = true;
    await act(ctx, { action, id }, notice);
  };
  const buttons = WF_ACTIONS.map(([action, label, , ask]) => button('act-' + action, label, 'act', () => {
    pending = action;
    question.textContent = visible(ask);
    yes.textContent = 'Yes, ' + action;
    confirmBox.hidden = false;
    yes.focus();
  }, { 'data-action': action }));

  // Fork: opened from a step row of the timeline.
  const forkStep = el('strong', { id: 'fork-step' });
  const forkId = el('input', { type: 'text', id: 'fork-new-id', placeholder: 'new id (optional)', spellcheck: 'false', autocomplete: 'off' });
  const forkRun = button('fork-run', 'Fork', 'primary', async () => {
    const from = Number(forkBox.dataset.seq);
    forkBox.hidden = true;
    const body = { action: 'fork', id, from_step: from };
    if (forkId.value.trim()) body.new_id = forkId.value.trim();
    await act(ctx, body, notice, (r) => newLink(r.new_id, 'fork-link'));
  });
  const forkBox = el('div', { id: 'fork-box', class: 'confirm', hidden: true },
    'Fork a new workflow from step ', forkStep, ' (the steps before it are copied, the rest runs again): ', forkId, ' ', forkRun, ' ',
    button('fork-cancel', 'Cancel', '', () => { forkBox.hidden = true; }));

  // Send a message.
  const topic = el('input', { type: 'text', id: 'send-topic', name: 'topic', placeholder: 'topic', spellcheck: 'false', required: true });
  const value = el('textarea', { id: 'send-value', name: 'value', rows: 3, spellcheck: 'false', placeholder: 'a JSON value: "yes", 42, {"ok": true}' });
  const key = el('input', { type: 'text', id: 'send-key', name: 'key', placeholder: 'idempotency key (optional)', spellcheck: 'false' });
  const sendNotice = noticeEl('send-result');
  const sendForm = el('form', { id: 'send-form', class: 'send-form', autocomplete: 'off' },
    el('label', { class: 'field', for: 'send-topic' }, el('span', null, 'Topic'), topic),
    el('label', { class: 'field field-value', for: 'send-value' }, el('span', null, 'Value (JSON)'), value),
    el('label', { class: 'field', for: 'send-key' }, el('span', null, 'Key'), key),
    el('div', { class: 'actions' }, el('button', { type: 'submit', id: 'send-run' }, 'Send message')));
  sendForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    let parsed;
    try {
      parsed = JSON.parse(value.value);
    } catch (err) {
      say(sendNotice, 'error', 'Not sent: the value is not JSON (' + messageOf(err) + '). Strings need quotes: "yes".');
      return;
    }
    if (!topic.value.trim()) { say(sendNotice, 'error', 'Not sent: a topic is needed.'); return; }
    const body = { action: 'send', id, topic: topic.value.trim(), value: parsed };
    if (key.value.trim()) body.key = key.value.trim();
    if (await act(ctx, body, sendNotice)) value.value = '';
  });
  const sendBox = el('details', { id: 'send-box', class: 'send-box' }, el('summary', null, 'Send a message'), sendForm, sendNotice);

  const root = el('section', { id: 'wf-actions', class: 'panel actions-panel' }, el('h2', null, 'Actions'),
    el('div', { class: 'act-buttons' }, buttons, el('span', { id: 'act-none', class: 'muted', hidden: true }, 'No action applies to this status.')),
    confirmBox, forkBox, notice, sendBox);
  return {
    root,
    update(w) {
      let shown = 0;
      WF_ACTIONS.forEach(([, , statuses], i) => {
        buttons[i].hidden = !statuses.includes(w.status);
        if (!buttons[i].hidden) shown += 1;
      });
      root.querySelector('#act-none').hidden = shown > 0;
      sendBox.hidden = FINAL.includes(w.status);
      return root;
    },
    openFork(seq) {
      forkBox.dataset.seq = String(seq);
      forkStep.textContent = String(seq);
      forkBox.hidden = false;
      forkId.focus();
    },
  };
}

/** A step row's "Fork from here". */
function forkButton(ctx, seq) {
  return button(null, 'Fork from here', 'fork-step', () => ctx.controls.openFork(seq), { 'data-seq': seq });
}

// ---- queues and schedules -------------------------------------------------------------------

function queueButtons(ctx, q) {
  const action = q.paused ? 'resume_queue' : 'pause_queue';
  return button(null, q.paused ? 'Resume' : 'Pause', 'queue-action', () => act(ctx, { action, queue: q.queue }, ctx.notice),
    { 'data-action': action, 'data-queue': q.queue });
}

function scheduleButtons(ctx, s) {
  const toggle = s.paused ? 'resume_schedule' : 'pause_schedule';
  return el('span', { class: 'row-actions' },
    button(null, s.paused ? 'Resume' : 'Pause', 'schedule-action', () => act(ctx, { action: toggle, schedule: s.id }, ctx.notice),
      { 'data-action': toggle, 'data-schedule': s.id }), ' ',
    button(null, 'Trigger', 'schedule-action', () => act(ctx, { action: 'trigger_schedule', schedule: s.id }, ctx.notice,
      (r) => newLink(r.workflow_id, 'trigger-link')), { 'data-action': 'trigger_schedule', 'data-schedule': s.id }));
}

// ---- bulk actions over the list's filter ---------------------------------------------------

/** The list's filter (the address's) as the bulk API takes it. */
function bulkFilter(params) {
  const f = {};
  for (const k of FILTER_KEYS) if (params[k]) f[k] = k === 'status' ? normStatus(params[k]) : String(params[k]);
  return f;
}

/** A filter in words: "status pending or sleeping, queue “emails”". */
function filterWords(f) {
  const q = (v) => '“' + v + '”';
  const parts = [];
  if (f.status) parts.push('status ' + f.status.split(',').join(' or '));
  if (f.name) parts.push('name ' + q(f.name));
  if (f.queue) parts.push('queue ' + q(f.queue));
  if (f.executor) parts.push('executor ' + q(f.executor));
  if (f.id_prefix) parts.push('id starting with ' + q(f.id_prefix));
  if (f.since) parts.push('created since ' + f.since);
  if (f.until) parts.push('created before ' + f.until);
  if (f.changed_since) parts.push('changed in the last ' + f.changed_since);
  if (f.retrying === '1' || f.retrying === 'true') parts.push('retrying a step');
  if (f.text) parts.push('holding ' + q(f.text));
  return parts.length ? parts.join(', ') : 'no filter: every workflow of the schema';
}

const plural = (n, word) => `${n} ${word}${n === 1 ? '' : 's'}`;

/**
 * The bulk bar: an action, "Count" (a dry run: how many match the filter, and some of them),
 * then Run, enabled once the count is typed, which sends the confirmed count and fingerprint;
 * a set that changed meanwhile is refused by the server (409) with its new count, to confirm
 * again. A new filter or action discards the count.
 */
function bulkBar(ctx) {
  const filter = bulkFilter(ctx.params);
  const action = el('select', { id: 'bulk-action', name: 'bulk-action' }, BULK_ACTIONS.map((a) => el('option', { value: a }, a)));
  const plan = el('div', { id: 'bulk-plan', class: 'bulk-plan', hidden: true });
  const result = noticeEl('bulk-result');
  let pending = null;  // {action, count, fingerprint, matched, skipped, reason, read}
  const planOf = (a, r) => ({ action: a, count: num(r.count), fingerprint: r.fingerprint,
    matched: num(r.matched), skipped: arr(r.skipped), reason: r.skip_reason || '', read: arr(r.statuses_read) });
  const discard = () => {
    pending = null;
    plan.hidden = true;
    plan.replaceChildren();
    delete plan.dataset.count;
  };
  const countButton = button('bulk-count', 'Count', '', async () => {
    discard();
    result.hidden = true;
    countButton.disabled = true;
    const a = action.value;
    try {
      const r = await post('/api/bulk', { action: a, filter });
      pending = planOf(a, r);
      showPlan(arr(r.sample), false);
    } catch (e) {
      plan.hidden = false;
      plan.replaceChildren(el('p', { class: 'failed' }, messageOf(e)));
    } finally {
      countButton.disabled = false;
    }
  });
  const showPlan = (sample, changed) => {
    const n = pending.count;
    plan.hidden = false;
    plan.dataset.count = String(n);
    plan.dataset.changed = changed ? '1' : '0';
    // What the action applies to, of the matches: the others (a retry of a succeeded workflow)
    // are counted by status and said with the reason, not run to be skipped.
    const m = pending.matched > n ? pending.matched : n;
    const summary = el('p', { id: 'bulk-summary', class: changed ? 'changed' : null },
      changed ? 'Refused: the set changed since the count. Now ' : '', el('strong', { id: 'bulk-n' }, String(n)),
      m === n ? ` workflow${n === 1 ? ' matches' : 's match'} ${filterWords(filter)}.`
        : ` of ${m} workflows matching ${filterWords(filter)} ${n === 1 ? 'is' : 'are'} to ${pending.action}.`);
    const skip = m > n ? el('p', { id: 'bulk-skip', 'data-skipped': String(m - n) },
      `${m - n} will be skipped: `,
      pending.skipped.map((x) => `${num(x.count)} ${text(x.status)}`).join(', '),
      pending.reason ? ` (${pending.reason}).` : '.')
      : pending.read.length ? el('p', { id: 'bulk-read', class: 'muted' },
        `Without a status in the filter, only the statuses a ${pending.action} applies to were read: ${pending.read.join(', ')}.`) : null;
    if (!n) {
      fill(plan, summary, skip, el('p', { class: 'muted' }, 'Nothing to ' + pending.action + '.'));
      return;
    }
    const typed = el('input', { type: 'text', id: 'bulk-confirm', inputmode: 'numeric', autocomplete: 'off', spellcheck: 'false',
      placeholder: String(n), 'aria-label': `type ${n} to confirm` });
    const runButton = button('bulk-run', `${pending.action} ${plural(n, 'workflow')}`, 'primary danger', () => run(runButton), { disabled: true });
    typed.addEventListener('input', () => { runButton.disabled = typed.value.trim() !== String(n); });
    const more = n > sample.length && sample.length ? el('li', { class: 'muted' }, `… and ${n - sample.length} more`) : null;
    fill(plan, summary, skip,
      sample.length ? el('ul', { id: 'bulk-sample', class: 'sample' },
        sample.map((id) => el('li', null, link(hashOf('workflow', { id }), String(id)))), more) : null,
      el('div', { class: 'confirm' }, el('label', { for: 'bulk-confirm' }, `Type ${n} to ${pending.action} them: `), typed, ' ', runButton, ' ',
        button('bulk-discard', 'Discard', '', discard)));
    typed.focus();
  };
  const run = async (runButton) => {
    if (!pending) return;
    runButton.disabled = true;
    const p = pending;
    say(result, 'busy', 'Working…');
    try {
      const r = await post('/api/bulk', { action: p.action, filter, confirm: { count: p.count, fingerprint: p.fingerprint } });
      discard();
      const skipped = arr(r.skipped);
      say(result, 'ok', el('span', { id: 'bulk-done', 'data-done': num(r.done), 'data-skipped': skipped.length },
        `${p.action}: ${num(r.done)} of ${plural(num(r.count), 'workflow')} done, ${skipped.length} skipped.`),
        r.audit_id !== undefined && r.audit_id !== null ? [' ', link('#/audit', 'Audit #' + String(r.audit_id))] : null,
        skipped.length ? el('ul', { id: 'bulk-skipped', class: 'sample' }, skipped.map((s) =>
          el('li', null, link(hashOf('workflow', { id: s.id }), text(s.id)), ': ', text(s.reason)))) : null);
      load(ctx, false);
    } catch (e) {
      if (e instanceof ApiError && e.status === 409 && e.body && typeof e.body.count === 'number') {
        result.hidden = true;
        pending = planOf(p.action, e.body);
        showPlan([], true);
      } else {
        say(result, 'error', messageOf(e));
        runButton.disabled = false;
      }
    }
  };
  action.addEventListener('change', discard);
  const root = el('section', { id: 'bulk', class: 'panel bulk' },
    el('div', { class: 'bulk-head' }, el('strong', null, 'Bulk action over this filter: '),
      el('label', { for: 'bulk-action' }, action), ' ', countButton,
      el('span', { class: 'muted' }, ` (${filterWords(filter)})`)),
    plan, result);
  return { root, discard };
}

// ---- the audit ------------------------------------------------------------------------------

function auditRow(r) {
  const target = r.target === undefined ? '' : JSON.stringify(r.target);
  const detail = r.detail === null || r.detail === undefined ? '' : String(r.detail);
  return el('tr', { class: 'audit-row', 'data-id': r.id, 'data-action': r.action },
    numCell(r.id), cell(timeEl(r.at)), cell(text(r.actor)), cell(el('code', null, text(r.action))),
    el('td', { class: 'target', title: target.length > 300 ? truncate(target, 4000) : null }, el('code', null, truncate(target, 300))),
    numCell(r.count), cell(el('span', { class: 'badge result-' + String(r.result).replace(/[^a-z]/g, '') }, text(r.result))),
    el('td', { class: 'reason', title: detail || null }, detail ? truncate(detail, 300) : dash()));
}

const auditPage = {
  name: 'audit', nav: 'audit', title: 'Audit',
  load: (ctx) => api('/api/audit', { limit: PAGE_SIZE, before: ctx.params.before }),
  render(ctx, d) {
    const rows = arr(d.rows);
    const pager = el('div', { class: 'pager' },
      el('span', { class: 'count' }, plural(rows.length, 'action') + (ctx.params.before ? ` before #${ctx.params.before}` : '')),
      button('audit-newest', '« Newest', 'pager-button', () => navigate('#/audit'), { disabled: !ctx.params.before }),
      button('audit-older', 'Older ›', 'pager-button', () => navigate(hashOf('audit', { before: d.next })), { disabled: !d.next }));
    ctx.root.replaceChildren(pager, table(ctx, 'audit', ['Id', 'When', 'Who', 'Action', 'Target', 'Count', 'Result', 'Detail'],
      rows, auditRow, 'No actions yet.'));
  },
};
