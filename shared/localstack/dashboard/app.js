// The Hourglass dashboard: polls the admin API of the local stack and draws
// what it reads. No dependencies: the DOM, fetch and SVG.
'use strict';

(() => {
  const REFRESH_MS = 2000;
  const WINDOW_MS = 15 * 60 * 1000;
  const MAX_ITEMS = 50; // item states fetched per refresh
  const TOKEN_KEY = 'hourglass.adminToken';
  const SVG = 'http://www.w3.org/2000/svg';

  const state = { token: null, timer: null, samples: [], refreshes: 0 };
  const $ = (sel) => document.querySelector(sel);

  // ---- admin token: ?token= once (then dropped from the address bar), else asked for ----

  function takeToken() {
    const params = new URLSearchParams(location.search);
    const fromURL = params.get('token');
    if (fromURL) {
      params.delete('token');
      const rest = params.toString();
      history.replaceState(null, '', location.pathname + (rest ? '?' + rest : '') + location.hash);
      sessionStorage.setItem(TOKEN_KEY, fromURL);
      return fromURL;
    }
    return sessionStorage.getItem(TOKEN_KEY);
  }

  function showLogin(message) {
    $('#board').hidden = true;
    $('#login').hidden = false;
    const err = $('#login-error');
    err.hidden = !message;
    err.textContent = message || '';
    setStatus('', 'needs the admin token');
    $('#token').focus();
  }

  $('#login').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const tok = $('#token').value.trim();
    if (!tok) return;
    sessionStorage.setItem(TOKEN_KEY, tok);
    $('#token').value = '';
    start(tok);
  });

  function start(tok) {
    state.token = tok;
    $('#login').hidden = true;
    $('#board').hidden = false;
    clearTimeout(state.timer);
    refresh();
  }

  function stop() {
    clearTimeout(state.timer);
    state.timer = null;
  }

  // ---- data ----

  async function getJSON(path, admin) {
    const headers = { Accept: 'application/json' };
    if (admin) headers['X-Admin-Token'] = state.token;
    const resp = await fetch(path, { headers, cache: 'no-store' });
    const body = await resp.json().catch(() => null);
    if (!resp.ok) {
      const err = new Error((body && body.detail) || resp.statusText || 'HTTP ' + resp.status);
      err.status = resp.status;
      throw err;
    }
    return body;
  }

  async function itemStates(ids) {
    const states = await Promise.all(ids.slice(0, MAX_ITEMS).map((id) =>
      getJSON('/v1/seckill/items/' + encodeURIComponent(id), false).catch(() => null)));
    const out = {};
    ids.slice(0, MAX_ITEMS).forEach((id, i) => { out[id] = states[i]; });
    return out;
  }

  async function refresh() {
    try {
      const [stats, metrics] = await Promise.all([
        getJSON('/v1/admin/stats', true),
        getJSON('/dashboard/api/metrics', true),
      ]);
      const items = await itemStates(Object.keys(stats.items).sort());
      render(stats, metrics, items);
      state.refreshes++;
      document.body.dataset.refreshes = String(state.refreshes);
      document.body.dataset.ready = 'true';
      setStatus('ok', 'live · updated ' + new Date().toLocaleTimeString());
    } catch (err) {
      if (err.status === 401 || err.status === 403) {
        stop();
        sessionStorage.removeItem(TOKEN_KEY);
        showLogin('The admin token was refused: ' + err.message);
        return;
      }
      setStatus('error', 'cannot refresh: ' + err.message + ' (retrying)');
    }
    state.timer = setTimeout(refresh, REFRESH_MS);
  }

  function setStatus(kind, text) {
    const s = $('#status');
    s.className = 'status ' + kind;
    s.textContent = text;
  }

  // ---- formatting ----

  const count = (n) => Number(n).toLocaleString('en-US');

  function duration(ms) {
    if (ms < 1000) return ms + ' ms';
    if (ms < 60000) return (ms / 1000).toFixed(1) + ' s';
    const m = Math.floor(ms / 60000);
    if (m < 60) return m + ' min ' + Math.round((ms % 60000) / 1000) + ' s';
    return Math.floor(m / 60) + ' h ' + (m % 60) + ' min';
  }

  function rate(n) {
    if (n === 0) return '0';
    if (n < 10) return n.toFixed(2);
    return count(Math.round(n));
  }

  function setMetric(key, text, value) {
    for (const node of document.querySelectorAll('[data-metric="' + CSS.escape(key) + '"]')) {
      node.textContent = text;
      node.dataset.value = String(value);
      const tile = node.closest('.warn-when-set');
      if (tile) tile.classList.toggle('alert', Number(value) > 0);
    }
  }

  function cell(row, text, metric, value) {
    const td = document.createElement('td');
    td.textContent = text;
    if (metric) {
      td.dataset.metric = metric;
      td.dataset.value = String(value);
    }
    row.appendChild(td);
    return td;
  }

  // ---- rendering ----

  function render(stats, metrics, items) {
    const names = Object.keys(stats.queues).sort((a, b) =>
      (a === 'withdrawals' ? -1 : b === 'withdrawals' ? 1 : a.localeCompare(b)));
    const total = { due: 0, due_now: 0, oldest_due_lag_ms: 0, inflight: 0, dead: 0 };
    for (const name of names) {
      const q = stats.queues[name];
      total.due += q.due;
      total.due_now += q.due_now;
      total.inflight += q.inflight;
      total.dead += q.dead;
      total.oldest_due_lag_ms = Math.max(total.oldest_due_lag_ms, q.oldest_due_lag_ms);
    }
    for (const k of ['due', 'due_now', 'inflight', 'dead']) setMetric('total:' + k, count(total[k]), total[k]);
    setMetric('total:oldest_due_lag_ms', duration(total.oldest_due_lag_ms), total.oldest_due_lag_ms);
    for (const k of ['payouts_paid', 'payouts_failed', 'reconciled', 'promoted']) setMetric('counter:' + k, count(metrics.totals[k] || 0), metrics.totals[k] || 0);

    const complete = metrics.history.slice(0, -1); // the newest bucket is still filling
    const last = complete[complete.length - 1];
    const perSec = (b, k) => (b ? b[k] / metrics.bucket_seconds : 0);
    setMetric('rate:claimed', rate(perSec(last, 'claimed')), perSec(last, 'claimed'));
    $('#bucket').textContent = String(metrics.bucket_seconds);

    const body = $('#queues tbody');
    body.replaceChildren();
    for (const name of names) {
      const q = stats.queues[name];
      const tr = document.createElement('tr');
      cell(tr, name);
      cell(tr, count(q.due), 'queue:' + name + ':due', q.due);
      cell(tr, count(q.due_now), 'queue:' + name + ':due_now', q.due_now);
      cell(tr, duration(q.oldest_due_lag_ms), 'queue:' + name + ':oldest_due_lag_ms', q.oldest_due_lag_ms);
      cell(tr, count(q.inflight), 'queue:' + name + ':inflight', q.inflight);
      cell(tr, count(q.dead), 'queue:' + name + ':dead', q.dead).classList.toggle('alert', q.dead > 0);
      body.appendChild(tr);
    }

    const ids = Object.keys(stats.items).sort();
    $('#no-items').hidden = ids.length > 0;
    $('#items').hidden = ids.length === 0;
    const ibody = $('#items tbody');
    ibody.replaceChildren();
    // Live items with stock left first, then the rest.
    const rank = (id) => { const s = items[id]; return s && s.status === 'live' ? 0 : 1; };
    ids.sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
    for (const id of ids) {
      const it = stats.items[id];
      const st = items[id];
      const tr = document.createElement('tr');
      cell(tr, id);
      const badge = document.createElement('span');
      const status = st ? st.status : 'unknown';
      badge.className = 'badge ' + status;
      badge.textContent = status.replace('_', ' ');
      const td = cell(tr, '', 'item:' + id + ':status', status);
      td.appendChild(badge);
      cell(tr, count(it.stock_left), 'item:' + id + ':stock_left', it.stock_left);
      cell(tr, count(it.admitted), 'item:' + id + ':admitted', it.admitted);
      cell(tr, count(it.confirmed), 'item:' + id + ':confirmed', it.confirmed);
      cell(tr, count(it.awaiting_payment), 'item:' + id + ':awaiting_payment', it.awaiting_payment);
      cell(tr, count(it.paid), 'item:' + id + ':paid', it.paid);
      cell(tr, count(it.expired), 'item:' + id + ':expired', it.expired);
      cell(tr, st ? st.starts_at.slice(0, 16).replace('T', ' ') + ' → ' + st.ends_at.slice(0, 16).replace('T', ' ') + ' UTC' : '');
      ibody.appendChild(tr);
    }

    const now = Date.now();
    state.samples.push({ t: now, ...total });
    while (state.samples.length && state.samples[0].t < now - WINDOW_MS) state.samples.shift();
    const pts = (k) => state.samples.map((s) => ({ t: s.t, v: s[k] }));
    chart('size', [
      { name: 'scheduled', points: pts('due') },
      { name: 'due now', points: pts('due_now') },
      { name: 'in flight', points: pts('inflight') },
      { name: 'dead', points: pts('dead') },
    ], count);
    chart('lag', [{ name: 'oldest due lag', points: pts('oldest_due_lag_ms') }], duration);
    const half = metrics.bucket_seconds * 500;
    const ratePts = (k) => complete.map((b) => ({ t: b.t + half, v: b[k] / metrics.bucket_seconds }));
    chart('rate', [
      { name: 'jobs claimed', points: ratePts('claimed') },
      { name: 'orders confirmed', points: ratePts('orders_confirmed') },
      { name: 'orders paid', points: ratePts('orders_paid') },
      { name: 'orders expired', points: ratePts('orders_expired') },
      { name: 'payouts paid', points: ratePts('payouts_paid') },
      { name: 'payouts failed', points: ratePts('payouts_failed') },
    ], rate);
  }

  // ---- charts: SVG line charts over the last WINDOW_MS ----

  function svg(tag, attrs, parent) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    if (parent) parent.appendChild(node);
    return node;
  }

  function niceCeil(v) {
    if (v <= 0) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }

  // span is the time the chart covers: since its oldest point, at least a
  // minute and at most WINDOW_MS.
  function span(series, now) {
    let oldest = now;
    for (const s of series) if (s.points.length) oldest = Math.min(oldest, s.points[0].t);
    return Math.min(WINDOW_MS, Math.max(60000, now - oldest));
  }

  function ago(ms) {
    if (ms === 0) return 'now';
    return ms < 60000 ? '\u2212' + Math.round(ms / 1000) + ' s' : '\u2212' + Math.round(ms / 60000) + ' min';
  }

  function chart(id, series, fmt) {
    const root = $('#chart-' + id);
    root.replaceChildren();
    const W = 440, H = 190, L = 58, R = 8, T = 8, B = 22;
    const now = Date.now();
    const width = span(series, now), from = now - width;
    const x = (t) => L + ((t - from) / width) * (W - L - R);
    let top = 0;
    for (const s of series) for (const p of s.points) if (p.t >= from) top = Math.max(top, p.v);
    top = niceCeil(top);
    const y = (v) => T + (1 - v / top) * (H - T - B);
    for (let i = 0; i <= 4; i++) {
      const v = (top * i) / 4;
      svg('line', { x1: L, x2: W - R, y1: y(v), y2: y(v), class: 'grid' }, root);
      const label = svg('text', { x: L - 6, y: y(v) + 4, 'text-anchor': 'end', class: 'axis' }, root);
      label.textContent = fmt(Number.isInteger(v) ? v : Number(v.toFixed(2)));
    }
    for (let i = 0; i <= 3; i++) {
      const back = (width * (3 - i)) / 3;
      const anchor = i === 0 ? 'start' : i === 3 ? 'end' : 'middle';
      const label = svg('text', { x: x(now - back), y: H - 5, 'text-anchor': anchor, class: 'axis' }, root);
      label.textContent = ago(back);
    }
    let drawn = 0;
    series.forEach((s, i) => {
      const pts = s.points.filter((p) => p.t >= from && p.t <= now + 1000);
      if (pts.length === 0) return;
      drawn++;
      if (pts.length === 1) {
        svg('circle', { cx: x(pts[0].t), cy: y(pts[0].v), r: 3, class: 'dot s' + i }, root);
        return;
      }
      svg('polyline', { points: pts.map((p) => x(p.t).toFixed(1) + ',' + y(p.v).toFixed(1)).join(' '), class: 'line s' + i }, root);
    });
    if (drawn === 0) {
      const t = svg('text', { x: (L + W - R) / 2, y: H / 2, 'text-anchor': 'middle', class: 'empty' }, root);
      t.textContent = 'collecting…';
    }
    const legend = $('#legend-' + id);
    legend.replaceChildren();
    series.forEach((s, i) => {
      const item = document.createElement('span');
      const sw = document.createElement('span');
      sw.className = 'swatch s' + i;
      item.appendChild(sw);
      const last = s.points[s.points.length - 1];
      item.appendChild(document.createTextNode(s.name + (last ? ' ' + fmt(last.v) : '')));
      legend.appendChild(item);
    });
  }

  const tok = takeToken();
  if (tok) start(tok); else showLogin();
})();
