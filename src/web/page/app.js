// The page of `leaserun web`: a snapshot of tasks and runners, then their
// changes, pushed by the server as server-sent events (never polled).
// Every text from the server goes into the page as text, never as HTML.
'use strict';

const PAGE_SIZE = 50;
const STATES = ['pending', 'running', 'succeeded', 'failed', 'cancelled'];

const view = {
  tasks: new Map(),   // id -> task, as the server sends it
  sorted: null,       // tasks newest first; null when it must be rebuilt
  runners: [],
  locks: null,        // {held: [...], waiting: [...]}; null until known
  config: {},
  filter: 'all',
  query: '',
  page: 0,
  selected: null,     // the id shown in the detail panel
  detail: null,       // its detail as last fetched
  etcd: null,         // {reachable, as_of, error} as the server last said
  streamOpen: false,
};

const $ = (id) => document.getElementById(id);

// An element with a class and children (strings become text nodes).
function el(tag, cls, ...children) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  for (const c of children) {
    if (c !== null && c !== undefined) e.append(c);
  }
  return e;
}

// ---- times ----------------------------------------------------------------

function since(rfc3339) {
  if (!rfc3339) return '';
  const ms = Date.now() - Date.parse(rfc3339);
  if (Number.isNaN(ms)) return '';
  return duration(Math.max(0, ms));
}

function duration(ms) {
  const s = Math.floor(ms / 1000);
  if (s < 60) return s + 's';
  const m = Math.floor(s / 60);
  if (m < 60) return m + 'm' + String(s % 60).padStart(2, '0') + 's';
  const h = Math.floor(m / 60);
  if (h < 48) return h + 'h' + String(m % 60).padStart(2, '0') + 'm';
  return Math.floor(h / 24) + 'd';
}

// ---- the model ------------------------------------------------------------

function applySnapshot(s) {
  view.config = s.config || {};
  view.tasks = new Map();
  for (const t of s.tasks) view.tasks.set(t.id, t);
  view.sorted = null;
  view.runners = s.runners || [];
  view.locks = s.locks === undefined ? null : s.locks;
  view.etcd = s.etcd || null;
  $('prefix').textContent = view.config.prefix || '';
  showConn();
  scheduleRender(true);
}

function applyUpdate(u) {
  for (const t of u.tasks || []) {
    const old = view.tasks.get(t.id);
    // In place: the sorted list holds the same objects (the order, by
    // creation, does not change).
    if (old) Object.assign(old, t);
    else {
      view.tasks.set(t.id, t);
      view.sorted = null;
    }
  }
  for (const id of u.removed || []) {
    if (view.tasks.delete(id)) view.sorted = null;
  }
  if (u.runners) view.runners = u.runners;
  if (u.locks) view.locks = u.locks;
  const touched = (u.tasks || []).some((t) => t.id === view.selected) ||
    (u.removed || []).includes(view.selected);
  scheduleRender(touched);
}

// Newest first: by the revision that created the task (tasks created by
// one txn share it: then by id, also descending).
function sortedTasks() {
  if (!view.sorted) {
    view.sorted = Array.from(view.tasks.values());
    view.sorted.sort((a, b) => b.rev - a.rev || (a.id < b.id ? 1 : -1));
  }
  return view.sorted;
}

function shown() {
  const q = view.query.toLowerCase();
  return sortedTasks().filter((t) =>
    (view.filter === 'all' || t.state === view.filter) &&
    (!q || t.id.toLowerCase().includes(q) ||
      (t.runner || '').toLowerCase().includes(q)));
}

// ---- rendering ------------------------------------------------------------

let renderPending = false;
let detailStale = false;

// At the next frame; a hidden page gets no frames, so a timer stands in
// (browsers slow it down there, which is all a hidden page needs).
function scheduleRender(detailToo) {
  if (detailToo) detailStale = true;
  if (renderPending) return;
  renderPending = true;
  const run = () => {
    if (!renderPending) return;
    renderPending = false;
    render();
  };
  requestAnimationFrame(run);
  setTimeout(run, 100);
}

function render() {
  renderFilters();
  renderTasks();
  renderRunners();
  renderLocks();
  if (detailStale) {
    detailStale = false;
    renderDetail();
    fetchDetailSoon();
  }
}

function renderFilters() {
  const counts = { all: view.tasks.size };
  for (const s of STATES) counts[s] = 0;
  for (const t of view.tasks.values()) counts[t.state]++;
  const box = $('filters');
  box.replaceChildren();
  for (const s of ['all', ...STATES]) {
    const b = el('button', null, s[0].toUpperCase() + s.slice(1),
      el('span', 'n', String(counts[s])));
    b.type = 'button';
    b.dataset.state = s;
    b.setAttribute('aria-pressed', String(view.filter === s));
    box.append(b);
  }
}

function stepText(t) {
  if (!t.steps) return '';
  const k = Math.min(t.next_step + 1, t.steps);
  return k + '/' + t.steps + (t.step_name ? ' ' + t.step_name : '');
}

function progressBar(t) {
  const frac = t.steps ? Math.min(1, t.next_step / t.steps) : 0;
  const inner = el('div');
  inner.style.width = Math.round(frac * 100) + '%';
  const bar = el('div', 'bar ' + t.state, inner);
  bar.title = t.next_step + ' of ' + t.steps + ' steps committed';
  return bar;
}

function taskRow(t) {
  const tr = el('tr');
  tr.dataset.id = t.id;
  if (t.id === view.selected) tr.classList.add('selected');
  const age = el('td', 'c-age', since(t.updated_at));
  age.dataset.since = t.updated_at || '';
  const err = el('td', 'c-error', t.error || '');
  if (t.error) err.title = t.error;
  const state = el('span', 'badge ' + t.state, t.state);
  if (t.cancel_requested && t.state === 'running') state.title = 'cancel requested';
  tr.append(
    el('td', 'c-id', t.id),
    el('td', 'c-state', state),
    el('td', 'c-step', stepText(t)),
    el('td', 'c-progress', progressBar(t)),
    el('td', 'c-attempt', t.attempt ? t.attempt + '/' + t.max_attempts : ''),
    el('td', 'c-runner', t.runner || ''),
    age,
    err);
  tr.children[0].title = t.id;
  return tr;
}

function renderTasks() {
  const list = shown();
  const pages = Math.max(1, Math.ceil(list.length / PAGE_SIZE));
  if (view.page >= pages) view.page = pages - 1;
  const from = view.page * PAGE_SIZE;
  const rows = list.slice(from, from + PAGE_SIZE).map(taskRow);
  $('tasks').tBodies[0].replaceChildren(...rows);
  $('tasks-empty').hidden = list.length > 0;
  $('page-info').textContent = list.length === 0 ? '' :
    (from + 1) + '–' + (from + rows.length) + ' of ' + list.length;
  $('prev').disabled = view.page === 0;
  $('next').disabled = view.page >= pages - 1;
}

function renderRunners() {
  const running = new Map();
  for (const t of view.tasks.values()) {
    if (t.state === 'running' && t.runner) running.set(t.runner, (running.get(t.runner) || 0) + 1);
  }
  const rows = view.runners.map((r) => {
    const tr = el('tr');
    tr.dataset.name = r.name;
    const ttl = el('td', null, r.ttl_left >= 0 ? r.ttl_left + 's / ' + r.ttl + 's' : '? / ' + r.ttl + 's');
    if (r.ttl_left >= 0 && r.ttl_left * 3 < r.ttl) ttl.classList.add('ttl-low');
    const started = el('td', null, since(r.started_at));
    started.dataset.since = r.started_at || '';
    const name = el('td', 'mono', r.name);
    name.title = r.name + (r.version ? ' (leaserun ' + r.version + ')' : '');
    const host = el('td', null, r.host || '');
    host.title = (r.host || '') + ' pid ' + r.pid;
    tr.append(name, host,
      el('td', null, (running.get(r.name) || 0) + '/' + r.concurrency), ttl, started);
    return tr;
  });
  $('runners').tBodies[0].replaceChildren(...rows);
  $('runners-empty').hidden = rows.length > 0;
}

// Locks and limits: what is held ({lock, mode} or {pool, slot, limit}, with its
// holder), then the requests still waiting, oldest first, with what each
// waits for. Holders are "task:<id>" or "run:<id>".
function holderText(h) {
  const i = (h || '').indexOf(':');
  return i < 0 ? (h || '') : h.slice(0, i) + ' ' + h.slice(i + 1);
}

function requestText(w) {
  const parts = [];
  for (const [path, mode] of Object.entries(w.locks || {})) parts.push(mode + ' ' + path);
  for (const [key, n] of Object.entries(w.limits || {})) parts.push(key + ' (limit ' + n + ')');
  return parts.join(', ');
}

function renderLocks() {
  const held = (view.locks && view.locks.held) || [];
  const waiting = (view.locks && view.locks.waiting) || [];
  const none = held.length === 0 && waiting.length === 0;
  $('locks-none').hidden = !none;
  $('locks').hidden = none;
  if (none) return;
  const rows = held.map((l) => el('tr', null,
    el('td', 'mono', l.lock !== undefined ? l.lock
      : l.pool + '[' + l.slot + ']' + (l.limit !== undefined ? ' of ' + l.limit : '')),
    el('td', null, l.lock !== undefined ? l.mode : 'slot'),
    el('td', 'mono', holderText(l.holder) + (l.runner || l.host ? ' on ' + (l.runner || l.host) : '')),
    el('td', null, '')));
  for (const w of waiting) {
    rows.push(el('tr', 'waiting',
      el('td', 'mono', requestText(w)), el('td', null, 'waits'),
      el('td', 'mono', holderText(w.holder)),
      el('td', null, w.waiting_for || 'free now: being taken')));
  }
  $('locks').tBodies[0].replaceChildren(...rows);
}

// ---- the detail panel ---------------------------------------------------------

function fact(dl, name, value) {
  if (value === null || value === undefined || value === '') return;
  dl.append(el('dt', null, name), el('dd', null, String(value)));
}

function renderDetail() {
  const panel = $('detail');
  const t = view.selected ? view.tasks.get(view.selected) : null;
  panel.hidden = !view.selected;
  if (!view.selected) return;
  $('detail-title').textContent = view.selected;
  const d = view.detail && view.detail.task.id === view.selected ? view.detail : null;
  const badge = $('detail-state');
  badge.textContent = t ? t.state : 'gone';
  badge.className = 'badge ' + (t ? t.state : '');
  const dl = $('detail-facts');
  dl.replaceChildren();
  if (t) {
    fact(dl, 'Step', stepText(t));
    fact(dl, 'Attempt', t.attempt ? t.attempt + ' of ' + t.max_attempts : '');
    fact(dl, t.state === 'running' ? 'Held by' : 'Last runner', t.runner);
    fact(dl, 'Fence', d ? d.fence : null);
    fact(dl, 'Updated', t.updated_at ? t.updated_at + ' (' + since(t.updated_at) + ' ago)' : '');
    fact(dl, 'Cancel', t.cancel_requested ? 'requested' : '');
  } else {
    fact(dl, 'Task', 'purged or never existed');
  }
  const canCancel = view.config.allow_cancel && t && (t.state === 'pending' || t.state === 'running');
  $('detail-actions').hidden = !canCancel;
  const error = (d && d.error) || (t && t.error);
  $('detail-error').hidden = !error;
  $('detail-error').textContent = error || '';
  renderSteps(t, d);
  renderSpecExtras(d);
}

function renderSteps(t, d) {
  const names = d ? d.spec ? d.spec.steps : d.step_names.map((n) => ({ name: n })) : [];
  const items = names.map((s, i) => {
    let cls = 'todo';
    let mark = '○';
    if (t && (i < t.next_step || t.state === 'succeeded')) { cls = 'done'; mark = '✓'; }
    else if (t && i === t.next_step && t.state === 'running') { cls = 'current'; mark = '▶'; }
    else if (t && i === t.next_step && (t.state === 'failed' || t.state === 'cancelled')) { cls = 'failed'; mark = '✗'; }
    const li = el('li', cls, el('span', 'mark', mark), s.name);
    if (cls === 'current' && t.attempt) li.append(' (attempt ' + t.attempt + ')');
    if (s.timeout_s) li.append(' · timeout ' + s.timeout_s + 's');
    if (s.run) li.append(el('code', null, s.run));
    return li;
  });
  $('detail-steps').replaceChildren(...items);
}

function renderSpecExtras(d) {
  const env = d && d.spec ? d.spec.env_names : [];
  $('detail-env').textContent = env.length
    ? env.join(', ') + ' (values are not shown)' : 'No variables of its own.';
  const st = d && d.state;
  $('detail-state-json').textContent = !st ? '' :
    st.text + (st.truncated ? '\n… (' + st.bytes + ' bytes in all)' : '');
  const hist = d ? d.history.slice().reverse().map((h) =>
    el('li', null, el('time', null, h.at), h.what)) : [];
  $('detail-history').replaceChildren(...hist);
}

let detailTimer = null;
let detailSeq = 0;

// The detail is read from etcd by the server: when the panel opens, and
// again after a pushed change of that task (not on a timer).
function fetchDetailSoon() {
  if (!view.selected || detailTimer) return;
  detailTimer = setTimeout(fetchDetail, 150);
}

// A task's API address, with the id in the query: in a path, the browser
// would take the ids "." and ".." (even escaped) as steps of the path.
function taskApi(id, what) {
  return 'api/task' + (what ? '/' + what : '') + '?id=' + encodeURIComponent(id);
}

async function fetchDetail() {
  detailTimer = null;
  const id = view.selected;
  if (!id) return;
  const seq = ++detailSeq;
  try {
    const r = await fetch(taskApi(id));
    if (!r.ok) return;
    const d = await r.json();
    if (seq !== detailSeq || id !== view.selected) return;
    view.detail = d;
    renderDetail();
  } catch (e) {
    // The stream's reconnect brings the page back; nothing to do here.
  }
}

function select(id) {
  view.selected = id;
  view.detail = null;
  if (id) history.replaceState(null, '', '#task=' + encodeURIComponent(id));
  else history.replaceState(null, '', location.pathname);
  $('detail-cancel-result').textContent = '';
  scheduleRender(true);
}

async function cancelSelected() {
  const id = view.selected;
  const out = $('detail-cancel-result');
  out.textContent = 'cancelling…';
  try {
    const r = await fetch(taskApi(id, 'cancel'),
      { method: 'POST', headers: { 'X-Leaserun': 'cancel' } });
    const body = await r.json();
    out.textContent = body.message || r.statusText;
  } catch (e) {
    out.textContent = 'failed: ' + e.message;
  }
}

// ---- the stream -------------------------------------------------------------

function setConn(state, text, title) {
  const c = $('conn');
  c.dataset.state = state;
  c.textContent = text;
  c.title = title || '';
}

// Live only when both the stream and the server's watch of etcd are:
// while etcd does not answer, what the page shows is as of when it last
// did.
function showConn() {
  const e = view.etcd;
  if (!view.streamOpen) {
    setConn('reconnecting', 'reconnecting…');
  } else if (e && e.reachable === false) {
    const at = new Date(Date.parse(e.as_of));
    setConn('stale', 'etcd unreachable, data as of ' +
      (Number.isNaN(at.getTime()) ? e.as_of : at.toLocaleTimeString()), e.error);
  } else {
    setConn('live', 'live');
  }
}

function connect() {
  const es = new EventSource('events');
  es.addEventListener('open', () => { view.streamOpen = true; showConn(); });
  es.addEventListener('error', () => {
    view.streamOpen = false;
    showConn();
    // A refusal (the server full, or restarting) closes an EventSource
    // for good: a new one, a little later.
    if (es.readyState === EventSource.CLOSED) setTimeout(connect, 3000);
  });
  es.addEventListener('snapshot', (e) => applySnapshot(JSON.parse(e.data)));
  es.addEventListener('update', (e) => applyUpdate(JSON.parse(e.data)));
  es.addEventListener('etcd', (e) => { view.etcd = JSON.parse(e.data); showConn(); });
}

// ---- wiring -------------------------------------------------------------------

function wire() {
  $('filters').addEventListener('click', (e) => {
    const b = e.target.closest('button');
    if (!b) return;
    view.filter = b.dataset.state;
    view.page = 0;
    scheduleRender(false);
  });
  $('search').addEventListener('input', (e) => {
    view.query = e.target.value.trim();
    view.page = 0;
    scheduleRender(false);
  });
  $('prev').addEventListener('click', () => { view.page--; scheduleRender(false); });
  $('next').addEventListener('click', () => { view.page++; scheduleRender(false); });
  $('tasks').tBodies[0].addEventListener('click', (e) => {
    const tr = e.target.closest('tr');
    if (tr) select(tr.dataset.id);
  });
  $('detail-close').addEventListener('click', () => select(null));
  $('detail-cancel').addEventListener('click', cancelSelected);
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape') select(null);
  });
  // Ages move on by themselves: a display tick, no request.
  setInterval(() => {
    for (const td of document.querySelectorAll('[data-since]')) {
      td.textContent = since(td.dataset.since);
    }
  }, 1000);
  const m = /^#task=(.+)$/.exec(location.hash);
  if (m) {
    // A link with a broken escape ("#task=%") selects nothing, and the
    // page still connects.
    try {
      select(decodeURIComponent(m[1]));
    } catch (e) {
      // not a task id
    }
  }
}

wire();
connect();
