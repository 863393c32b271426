// toc dashboard. Plain JavaScript, no dependencies: it calls toc's HTTP API
// with the bearer token kept in localStorage and draws what it gets. Every
// value from the server goes into the page as text (textContent), never as
// HTML.
'use strict';
(() => {
  const STATES = ['scheduled', 'delivering', 'delivered', 'dead', 'expired', 'cancelled'];
  const FINAL = new Set(['delivered', 'dead', 'expired', 'cancelled']);
  const RETRYABLE = new Set(['dead', 'expired']);
  const POLL_MS = 2000;
  const TOKEN_KEY = 'toc.token';
  // The API lives where /ui/ does: /ui/ → /, /toc/ui/ → /toc/.
  const base = location.pathname.replace(/ui\/[^]*$/, '');

  const $ = (id) => document.getElementById(id);
  let token = localStorage.getItem(TOKEN_KEY) || '';
  let lastStats = null;
  // The server's test clock (toc serve --test-clock), in ms; null on the
  // wall clock. Relative times are counted from it.
  let testClock = null;
  const nowMs = () => (testClock === null ? Date.now() : testClock);

  // ---- helpers --------------------------------------------------------

  // el builds an element: el('td', {class: 'num', title: 'x'}, 'text', child).
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'dataset') Object.assign(e.dataset, v);
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? '' : v);
    }
    for (const c of children) {
      if (c === undefined || c === null || c === false) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  const SVG = 'http://www.w3.org/2000/svg';
  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  const pad = (n, w = 2) => String(n).padStart(w, '0');
  function fmtTime(v) {
    if (!v) return '';
    const d = new Date(v);
    if (isNaN(d)) return String(v);
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
  }
  function fmtClock(sec) {
    const d = new Date(sec * 1000);
    return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }
  function fmtSpan(ms) {
    const s = Math.abs(ms) / 1000;
    if (s < 1) return `${Math.round(Math.abs(ms))}ms`;
    if (s < 90) return `${Math.round(s)}s`;
    if (s < 90 * 60) return `${Math.round(s / 60)}m`;
    if (s < 48 * 3600) return `${Math.round(s / 3600)}h`;
    return `${Math.round(s / 86400)}d`;
  }
  function rel(v) {
    if (!v) return '';
    const ms = new Date(v).getTime() - nowMs();
    return ms >= 0 ? `in ${fmtSpan(ms)}` : `${fmtSpan(ms)} ago`;
  }
  function fmtMs(x) {
    if (x === undefined || x === null) return '';
    if (x < 1) return `${x.toFixed(2)} ms`;
    if (x < 10) return `${x.toFixed(1)} ms`;
    if (x < 1000) return `${Math.round(x)} ms`;
    return `${(x / 1000).toFixed(2)} s`;
  }
  const fmtN = (n) => Number(n || 0).toLocaleString();
  const stateBadge = (s, id) => el('span', {class: `state ${s}`, id}, s);

  // ---- API --------------------------------------------------------------

  class APIError extends Error {}

  async function api(method, path, body) {
    const headers = {Accept: 'application/json'};
    if (token) headers.Authorization = `Bearer ${token}`;
    const init = {method, headers, cache: 'no-store'};
    // A write says it is JSON even without a body: toc without tokens
    // refuses other writes, so that other web pages cannot make them.
    if (method !== 'GET') headers['Content-Type'] = 'application/json';
    if (body !== undefined) init.body = JSON.stringify(body);
    const r = await fetch(base + path.replace(/^\//, ''), init);
    const text = await r.text();
    let data = null;
    if (text) {
      try { data = JSON.parse(text); } catch { data = null; }
    }
    if (!r.ok) {
      const e = new APIError((data && data.error && data.error.message) || `${r.status} ${r.statusText}`);
      e.status = r.status;
      e.code = data && data.error && data.error.code;
      e.task = data && data.task;
      if (r.status === 401) needToken();
      throw e;
    }
    return data;
  }
  const seg = encodeURIComponent;

  // ---- banner and token -------------------------------------------------

  let bannerTimer = 0;
  function banner(msg, kind) {
    const b = $('banner');
    b.textContent = msg;
    b.className = `banner ${kind || ''}`;
    b.hidden = false;
    clearTimeout(bannerTimer);
    if (kind !== 'sticky') bannerTimer = setTimeout(() => { b.hidden = true; }, 8000);
  }
  function needToken() {
    $('token-form').classList.add('need');
    banner(token ? 'The server refused this token: paste a valid one above.'
      : 'This server needs a token: paste it above (it stays in this browser only).', 'sticky');
  }
  function tokenChanged() {
    $('token-form').classList.remove('need');
    $('banner').hidden = true;
    pollStats();
    route();
  }
  $('token').value = token;
  $('token-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    token = $('token').value.trim();
    if (token) localStorage.setItem(TOKEN_KEY, token);
    else localStorage.removeItem(TOKEN_KEY);
    tokenChanged();
  });
  $('token-clear').addEventListener('click', () => {
    token = '';
    $('token').value = '';
    localStorage.removeItem(TOKEN_KEY);
    tokenChanged();
  });

  // ---- stats polling ------------------------------------------------------

  let statsTimer = 0;
  let statsSeq = 0;
  async function pollStats() {
    clearTimeout(statsTimer);
    const seq = ++statsSeq;
    try {
      const s = await api('GET', '/v1/stats');
      if (seq !== statsSeq) return;
      lastStats = s;
      $('live').className = 'live ok';
      $('live-text').textContent = `live · ${fmtClock(nowMs() / 1000)}`;
      renderStats(s);
      await pollClock();
    } catch (e) {
      if (seq !== statsSeq) return;
      $('live').className = 'live err';
      $('live-text').textContent = e.status === 401 ? 'needs a token' : `stats: ${e.message}`;
    }
    statsTimer = setTimeout(pollStats, POLL_MS);
  }

  // pollClock shows a banner with the time of a server on a test clock.
  // Tokens that are not admin tokens cannot read the clock: no banner.
  async function pollClock() {
    let c = null;
    try { c = await api('GET', '/v1/admin/clock'); } catch { c = null; }
    const b = $('test-clock');
    if (!c || !c.test_clock) {
      testClock = null;
      b.hidden = true;
      return;
    }
    testClock = new Date(c.now).getTime();
    b.textContent = `test clock: ${fmtTime(c.now)}`;
    b.title = `This server runs on a test clock, which moves only when POST /v1/admin/clock (toc clock advance) moves it: ${c.now}`;
    b.dataset.now = c.now;
    b.hidden = false;
  }

  function cards(container, counts) {
    container.replaceChildren(...STATES.map((s) => el('div', {class: `card ${s}`, dataset: {state: s}},
      el('div', {class: 'n'}, fmtN(counts[s])), el('div', {class: 'l'}, s))));
  }

  function renderStats(s) {
    const apps = Object.keys(s.apps || {}).sort();
    const totals = Object.fromEntries(STATES.map((st) => [st, 0]));
    for (const a of apps) for (const st of STATES) totals[st] += s.apps[a][st] || 0;
    cards($('totals'), totals);
    $('mem').textContent = `in memory: ${fmtN(s.wheel)} in the wheel · ${fmtN(s.ready)} ready`;
    $('footer-who').textContent = s.admin ? (token ? 'admin token: every app' : 'no token needed: every app')
      : `app token: ${apps.join(', ') || 'no apps with tasks'}`;

    const body = $('apps-table').tBodies[0];
    body.replaceChildren(...apps.map((a) => el('tr', {dataset: {app: a}, onclick: () => { location.hash = `#/apps/${seg(a)}`; }},
      el('td', {}, el('a', {href: `#/apps/${seg(a)}`}, a)),
      ...STATES.map((st) => {
        const n = s.apps[a][st] || 0;
        return el('td', {class: n ? 'num' : 'num zero', dataset: {state: st}}, fmtN(n));
      }))));
    $('apps-empty').hidden = apps.length > 0;
    drawChart(s.recent || []);
    if (current.view === 'app') cards($('app-totals'), (s.apps || {})[current.app] || {});
  }

  // ---- lateness chart ---------------------------------------------------

  let chartData = [];
  const chartRange = () => Number($('chart-range').value);
  $('chart-range').addEventListener('change', () => drawChart(chartData));
  window.addEventListener('resize', () => drawChart(chartData));

  function drawChart(recent) {
    chartData = recent;
    const box = $('chart');
    const W = Math.max(box.clientWidth, 320), H = 240;
    const m = {l: 58, r: 44, t: 10, b: 24};
    const pw = W - m.l - m.r, ph = H - m.t - m.b;
    const now = Math.floor(Date.now() / 1000);
    const range = chartRange();
    const t0 = now - range;
    const pts = recent.filter((p) => p.t >= t0 && p.t < now);
    const x = (t) => m.l + ((t - t0) / range) * pw;

    const floor = 0.1; // ms: the lowest line; less is drawn on it
    let hi = 10;
    for (const p of pts) hi = Math.max(hi, p.max_ms);
    const top = Math.pow(10, Math.ceil(Math.log10(hi)));
    const y = (v) => m.t + ph - ((Math.log10(Math.max(v, floor)) - Math.log10(floor)) / (Math.log10(top) - Math.log10(floor))) * ph;
    const maxCount = Math.max(1, ...pts.map((p) => p.count));
    const yc = (c) => m.t + ph - (c / maxCount) * ph * 0.35;

    const root = svg('svg', {viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': 'delivery lateness per second'});
    for (let v = floor; v <= top * 1.0001; v *= 10) {
      root.append(svg('line', {class: 'grid-line', x1: m.l, x2: W - m.r, y1: y(v), y2: y(v)}));
      root.append(svg('text', {class: 'axis', x: m.l - 6, y: y(v) + 4, 'text-anchor': 'end'}, fmtMs(v).replace('.00 ', ' ').replace('.0 ', ' ')));
    }
    const step = range <= 60 ? 10 : range <= 300 ? 60 : 180;
    for (let t = Math.ceil(t0 / step) * step; t <= now; t += step) {
      root.append(svg('line', {class: 'grid-line', x1: x(t), x2: x(t), y1: m.t, y2: m.t + ph}));
      root.append(svg('text', {class: 'axis', x: x(t), y: H - 6, 'text-anchor': 'middle'}, range <= 60 ? fmtClock(t) : fmtClock(t).slice(0, 5)));
    }
    root.append(svg('text', {class: 'axis', x: W - m.r + 6, y: yc(maxCount) + 4}, `${fmtN(maxCount)}/s`));

    const bw = Math.max(1, pw / range - 0.5);
    for (const p of pts) root.append(svg('rect', {class: 'bar', x: x(p.t), y: yc(p.count), width: bw, height: m.t + ph - yc(p.count)}));

    for (const [key, cls] of [['max_ms', 'max'], ['p99_ms', 'p99'], ['p50_ms', 'p50']]) {
      let d = '';
      let prev = null;
      for (const p of pts) {
        const cmd = prev !== null && p.t - prev <= 5 ? 'L' : 'M';
        d += `${cmd}${x(p.t + 0.5).toFixed(1)},${y(p[key]).toFixed(1)}`;
        if (cmd === 'M') d += 'h0.01'; // an isolated second still shows (round caps)
        prev = p.t;
      }
      if (d) root.append(svg('path', {class: cls, d, 'stroke-linecap': 'round', 'stroke-linejoin': 'round'}));
    }
    if (pts.length === 0) {
      root.append(svg('text', {class: 'none', x: m.l + pw / 2, y: m.t + ph / 2, 'text-anchor': 'middle'},
        `No delivery attempts in the last ${range === 60 ? 'minute' : `${range / 60} minutes`}.`));
    }
    const cursor = svg('line', {class: 'cursor', x1: 0, x2: 0, y1: m.t, y2: m.t + ph, visibility: 'hidden'});
    root.append(cursor);
    root.addEventListener('mousemove', (ev) => {
      const r = root.getBoundingClientRect();
      const t = t0 + ((ev.clientX - r.left) * (W / r.width) - m.l) / pw * range;
      let best = null;
      for (const p of pts) if (Math.abs(p.t + 0.5 - t) <= 3 && (!best || Math.abs(p.t + 0.5 - t) < Math.abs(best.t + 0.5 - t))) best = p;
      if (!best) { cursor.setAttribute('visibility', 'hidden'); $('chart-readout').textContent = '\u00a0'; return; }
      cursor.setAttribute('x1', x(best.t + 0.5)); cursor.setAttribute('x2', x(best.t + 0.5));
      cursor.setAttribute('visibility', 'visible');
      $('chart-readout').textContent = `${fmtClock(best.t)} — ${fmtN(best.count)} attempts · p50 ${fmtMs(best.p50_ms)} · p99 ${fmtMs(best.p99_ms)} · max ${fmtMs(best.max_ms)}`;
    });
    root.addEventListener('mouseleave', () => { cursor.setAttribute('visibility', 'hidden'); $('chart-readout').textContent = '\u00a0'; });
    box.replaceChildren(root);
  }

  // ---- actions ------------------------------------------------------------

  // confirmClick runs action on a second click within 4 s: the first one
  // asks "Sure?", or what ask() returns.
  function confirmClick(button, action, ask) {
    let armed = 0;
    const label = button.textContent;
    button.addEventListener('click', async () => {
      if (!armed) {
        button.textContent = ask ? ask() : 'Sure?';
        armed = setTimeout(() => { armed = 0; button.textContent = label; }, 4000);
        return;
      }
      clearTimeout(armed);
      armed = 0;
      button.textContent = label;
      await action();
    });
  }

  async function retryTask(id) {
    const t = await api('POST', `/v1/tasks/${seg(id)}/retry`);
    banner(`Task ${id} fires again now.`, 'info');
    return t;
  }
  async function cancelTask(id) {
    await api('DELETE', `/v1/tasks/${seg(id)}`);
    banner(`Task ${id} cancelled.`, 'info');
    return api('GET', `/v1/tasks/${seg(id)}`);
  }
  // retryAll retries every task of app in state (dead or expired), one
  // request after another while the server says there is more, and
  // returns how many it retried.
  async function retryAll(app, state) {
    let total = 0;
    for (let i = 0; i < 100; i++) {
      const r = await api('POST', `/v1/apps/${seg(app)}/tasks:retry`, {state});
      total += r.count;
      if (!r.more || !r.count) break;
    }
    return total;
  }
  function failed(e) {
    banner(e.status === 409 && e.task ? `${e.message} (the task is ${e.task.state})` : e.message);
  }

  // ---- views ----------------------------------------------------------------

  const current = {view: '', app: '', taskGen: 0, listGen: 0, schedGen: 0};

  function show(view) {
    current.view = view;
    for (const v of ['overview', 'app', 'task']) $(`view-${v}`).hidden = v !== view;
    for (const a of document.querySelectorAll('[data-nav]')) {
      a.classList.toggle('on', a.dataset.nav === view || (view === 'app' && a.dataset.nav === 'overview'));
    }
  }

  function route() {
    const h = location.hash.replace(/^#\/?/, '');
    const parts = h.split('/').map((p) => { try { return decodeURIComponent(p); } catch { return p; } });
    current.taskGen++; // stops the polling of a task view left behind
    if (parts[0] === 'apps' && parts[1]) return showApp(parts[1]);
    if (parts[0] === 'tasks' && parts[1]) return showTask({id: parts[1]});
    if (parts[0] === 'keys' && parts[1] && parts.length >= 3) return showTask({app: parts[1], key: parts.slice(2).join('/')});
    if (parts[0] === 'task') return showTask(null);
    show('overview');
    drawChart(chartData);
  }
  window.addEventListener('hashchange', route);

  // One app: counts, settings and a page of its tasks in a state.
  function showApp(app) {
    show('app');
    if (current.app !== app) $('list-state').value = 'dead';
    current.app = app;
    $('app-name').textContent = app;
    cards($('app-totals'), ((lastStats && lastStats.apps) || {})[app] || {});
    loadSettings(app);
    loadList(false);
    loadSchedules(false);
  }

  async function loadSettings(app) {
    const dl = $('app-settings');
    dl.replaceChildren();
    try {
      const s = await api('GET', `/v1/apps/${seg(app)}`);
      const rows = [
        ['default target', s.target ? targetText(s.target) : 'none (each task names one)'],
        ['max attempts', s.retry.max_attempts],
        ['backoff', `${s.retry.min_backoff} … ${s.retry.max_backoff}`],
        ['max payload', `${fmtN(s.max_payload)} bytes`],
        ['deliveries/s', s.rate.deliveries_per_second || 'unlimited'],
        ['burst', s.rate.burst || '—'],
        ['max in flight', s.rate.max_in_flight || 'server default'],
        ['creates/s', s.rate.creates_per_second || 'unlimited'],
      ];
      dl.replaceChildren(...rows.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, String(v))]));
    } catch (e) {
      dl.replaceChildren(el('dd', {class: 'empty'}, e.message));
    }
  }

  let listCursor = '';
  async function loadList(more) {
    const gen = more ? current.listGen : ++current.listGen;
    const app = current.app, state = $('list-state').value;
    const body = $('list-table').tBodies[0];
    if (!more) { body.replaceChildren(); listCursor = ''; $('list-retry-all').hidden = true; }
    let q = `state=${seg(state)}&limit=50`;
    if (more && listCursor) q += `&cursor=${seg(listCursor)}`;
    try {
      const page = await api('GET', `/v1/apps/${seg(app)}/tasks?${q}`);
      if (gen !== current.listGen) return;
      for (const t of page.tasks) body.append(taskRow(t));
      listCursor = page.next_cursor || '';
      $('list-more').hidden = !listCursor;
      $('list-retry-all').hidden = !RETRYABLE.has(state) || body.rows.length === 0;
      $('list-empty').hidden = body.rows.length > 0;
      $('list-empty').textContent = `No ${state} tasks.`;
    } catch (e) {
      if (gen !== current.listGen) return;
      $('list-empty').hidden = false;
      $('list-empty').textContent = e.message;
    }
  }
  // Retry all: the dead letters (or expired tasks) of the app, after a
  // second click that says how many.
  confirmClick($('list-retry-all'), async () => {
    const b = $('list-retry-all');
    const app = current.app, state = $('list-state').value;
    b.disabled = true;
    try {
      const n = await retryAll(app, state);
      banner(`Retried ${fmtN(n)} ${state} task${n === 1 ? '' : 's'} of app ${app}: they fire again now.`, 'info');
    } catch (e) { failed(e); }
    b.disabled = false;
    loadList(false);
  }, () => {
    const state = $('list-state').value;
    const n = (((lastStats && lastStats.apps) || {})[current.app] || {})[state];
    return n ? `Retry ${fmtN(n)} ${state} task${n === 1 ? '' : 's'}?` : `Retry every ${state} task?`;
  });
  $('list-state').addEventListener('change', () => loadList(false));
  $('list-refresh').addEventListener('click', () => loadList(false));
  $('list-more').addEventListener('click', () => loadList(true));

  // ---- schedules ------------------------------------------------------------

  // The app's schedules, a page at a time, each with Pause or Resume.
  let schedCursor = '';
  async function loadSchedules(more) {
    const gen = more ? current.schedGen : ++current.schedGen;
    const app = current.app;
    const body = $('schedules-table').tBodies[0];
    if (!more) { body.replaceChildren(); schedCursor = ''; }
    let q = 'limit=50';
    if (more && schedCursor) q += `&cursor=${seg(schedCursor)}`;
    try {
      const page = await api('GET', `/v1/apps/${seg(app)}/schedules?${q}`);
      if (gen !== current.schedGen) return;
      for (const s of page.schedules) body.append(scheduleRow(app, s));
      schedCursor = page.next_cursor || '';
      $('schedules-more').hidden = !schedCursor;
      $('schedules-empty').hidden = body.rows.length > 0;
      $('schedules-empty').textContent = 'No schedules.';
    } catch (e) {
      if (gen !== current.schedGen) return;
      $('schedules-more').hidden = true;
      $('schedules-empty').hidden = false;
      $('schedules-empty').textContent = e.status === 501 ? 'This server keeps no schedules.' : e.message;
    }
  }
  $('schedules-refresh').addEventListener('click', () => loadSchedules(false));
  $('schedules-more').addEventListener('click', () => loadSchedules(true));

  const ruleText = (s) => s.cron ? s.cron : `every ${s.every}`;
  // occurrenceKey is the key of a schedule's occurrence due at due:
  // daily-report@2026-11-24T08:00:00.000Z.
  const occurrenceKey = (s, due) => `${s.key}@${new Date(due).toISOString()}`;

  function scheduleRow(app, s) {
    const tr = el('tr', {dataset: {id: s.id, key: s.key}});
    // A due time links to its occurrence, a task of the app.
    const when = (v) => v
      ? [el('a', {href: `#/keys/${seg(app)}/${seg(occurrenceKey(s, v))}`, title: v}, fmtTime(v)), el('span', {class: 'rel'}, rel(v))]
      : ['—'];
    const fill = (s) => {
      tr.dataset.state = s.state;
      const actions = el('td', {class: 'actions'});
      const act = (label, cls, op, done) => el('button', {class: `small ${cls}`, type: 'button', onclick: async (ev) => {
        ev.target.disabled = true;
        try {
          fill(await api('POST', `/v1/schedules/${seg(s.id)}/${op}`));
          banner(`Schedule ${s.key} ${done}.`, 'info');
        } catch (e) { failed(e); ev.target.disabled = false; }
      }}, label);
      if (s.state === 'active') actions.append(act('Pause', 'quiet pause', 'pause', 'paused: its pending occurrence is cancelled'));
      if (s.state === 'paused') actions.append(act('Resume', 'resume', 'resume', 'resumed from now'));
      tr.replaceChildren(
        el('td', {class: 'key', title: s.key}, s.key),
        el('td', {class: 'mono rule', title: `schedule ${s.id}`}, ruleText(s)),
        el('td', {class: 'nowrap zone'}, s.timezone),
        el('td', {class: 'state-cell nowrap'}, stateBadge(s.state)),
        el('td', {class: 'nowrap next'}, ...when(s.next_at)),
        el('td', {class: 'nowrap last'}, ...when(s.last_at)),
        actions);
    };
    fill(s);
    return tr;
  }

  function targetText(tg) {
    if (!tg) return '';
    if (tg.http) return `http ${tg.http.url}`;
    if (tg.pull) return 'pull (consumers claim)';
    if (tg.amqp) return `amqp ${tg.amqp.exchange || '(default exchange)'} ${tg.amqp.routing_key || ''}`.trim();
    if (tg.nats) return `nats ${tg.nats.subject}`;
    return JSON.stringify(tg);
  }

  // taskRow is a row of the app's list; after Retry or Cancel it follows
  // the task until it is final.
  function taskRow(t) {
    const tr = el('tr', {dataset: {id: t.id}});
    const fill = (t) => {
      const actions = el('td', {class: 'actions'});
      if (t.state === 'dead' || t.state === 'expired') {
        actions.append(el('button', {class: 'small retry', type: 'button', onclick: async (ev) => {
          ev.target.disabled = true;
          try { follow(await retryTask(t.id)); } catch (e) { failed(e); ev.target.disabled = false; }
        }}, 'Retry'));
      }
      if (t.state === 'scheduled') {
        const b = el('button', {class: 'small danger cancel', type: 'button'}, 'Cancel');
        confirmClick(b, async () => {
          try { fill(await cancelTask(t.id)); } catch (e) { failed(e); }
        });
        actions.append(b);
      }
      tr.replaceChildren(
        el('td', {class: 'mono'}, el('a', {href: `#/tasks/${seg(t.id)}`, title: t.id}, t.id)),
        el('td', {class: 'key', title: t.key || undefined}, t.key || ''),
        el('td', {class: 'state-cell nowrap'}, stateBadge(t.state)),
        el('td', {class: 'nowrap', title: t.due_at}, fmtTime(t.due_at)),
        el('td', {class: 'num'}, `${t.attempts} / ${t.retry.max_attempts}`),
        el('td', {class: 'err'}, t.last_error || ''),
        actions);
    };
    const follow = (t) => {
      fill(t);
      if (FINAL.has(t.state) || !tr.isConnected) return;
      setTimeout(async () => {
        try { follow(await api('GET', `/v1/tasks/${seg(t.id)}`)); } catch (e) { failed(e); }
      }, 1000);
    };
    fill(t);
    return tr;
  }

  // One task, by id or by app and key, with its history. A task that is
  // not final is read again every 2 s while it is shown.
  async function showTask(which) {
    show('task');
    const gen = current.taskGen;
    $('task').hidden = true;
    if (!which) return;
    if (which.id) { $('lookup-id').value = which.id; $('lookup-app').value = ''; $('lookup-key').value = ''; }
    if (which.app) { $('lookup-id').value = ''; $('lookup-app').value = which.app; $('lookup-key').value = which.key; }
    const path = which.id ? `/v1/tasks/${seg(which.id)}` : `/v1/apps/${seg(which.app)}/keys/${seg(which.key)}`;
    const load = async () => {
      try {
        const t = await api('GET', path);
        if (gen !== current.taskGen) return;
        renderTask(t);
        if (!FINAL.has(t.state)) setTimeout(load, POLL_MS);
      } catch (e) {
        if (gen !== current.taskGen) return;
        $('task').hidden = true;
        banner(e.status === 404 ? `No such task${which.id ? ` ${which.id}` : ` with key ${which.key} in app ${which.app}`}.` : e.message);
      }
    };
    current.reloadTask = load;
    await load();
  }

  $('lookup').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const id = $('lookup-id').value.trim(), app = $('lookup-app').value.trim(), key = $('lookup-key').value;
    let h = '';
    if (id) h = `#/tasks/${seg(id)}`;
    else if (app && key) h = `#/keys/${seg(app)}/${seg(key)}`;
    else { banner('Give a task id, or an app and a key.'); return; }
    if (location.hash === h) route(); else location.hash = h;
  });
  $('task-refresh').addEventListener('click', () => current.reloadTask && current.reloadTask());
  $('task-retry').addEventListener('click', async () => {
    try {
      renderTask(await retryTask(current.task.id));
      current.taskGen++;
      const gen = current.taskGen;
      const id = current.task.id;
      const poll = async () => {
        if (gen !== current.taskGen) return;
        try {
          const t = await api('GET', `/v1/tasks/${seg(id)}`);
          if (gen !== current.taskGen) return;
          renderTask(t);
          if (!FINAL.has(t.state)) setTimeout(poll, 1000);
        } catch (e) { failed(e); }
      };
      setTimeout(poll, 500);
    } catch (e) { failed(e); }
  });
  confirmClick($('task-cancel'), async () => {
    try { renderTask(await cancelTask(current.task.id)); } catch (e) { failed(e); }
  });

  function renderTask(t) {
    current.task = t;
    $('task').hidden = false;
    $('task-id').textContent = t.id;
    const st = $('task-state');
    st.textContent = t.state;
    st.className = `state ${t.state}`;
    $('task-retry').hidden = !(t.state === 'dead' || t.state === 'expired');
    $('task-cancel').hidden = t.state !== 'scheduled';
    const time = (v) => v ? [fmtTime(v), el('span', {class: 'rel'}, rel(v))] : ['—'];
    const rows = [
      ['app', [el('a', {href: `#/apps/${seg(t.app)}`}, t.app)]],
      ['key', [t.key || '—']],
      ['due at', time(t.due_at)],
      ['next attempt', FINAL.has(t.state) ? ['—'] : time(t.next_attempt_at)],
      ['deadline', time(t.deadline)],
      ['attempts', [`${t.attempts} of ${t.retry.max_attempts}`]],
      ['backoff', [`${t.retry.min_backoff} … ${t.retry.max_backoff}`]],
      ['last error', [t.last_error || '—']],
      ['target', [targetText(t.target)]],
      ['lease', t.lease ? [t.lease, el('span', {class: 'rel'}, `until ${fmtTime(t.lease_expires_at)}`)] : ['—']],
      ['created', time(t.created_at)],
      ['updated', time(t.updated_at)],
      ['finished', time(t.finished_at)],
    ];
    $('task-fields').replaceChildren(...rows.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {dataset: {field: k}}, ...v)]));
    let payload = '(empty)';
    if (t.payload !== undefined) payload = JSON.stringify(t.payload, null, 2);
    else if (t.payload_base64) payload = `base64: ${t.payload_base64}`;
    $('task-payload').textContent = payload;
    const hist = t.history || [];
    $('history').tBodies[0].replaceChildren(...hist.map((h) => el('tr', {dataset: {what: h.what}},
      el('td', {title: h.at}, fmtTime(h.at)),
      el('td', {}, h.what),
      el('td', {class: 'num'}, h.attempt || ''),
      el('td', {class: 'err'}, h.error || ''))));
    $('history-empty').hidden = hist.length > 0;
  }

  // ---- start -------------------------------------------------------------

  route();
  pollStats();
})();
