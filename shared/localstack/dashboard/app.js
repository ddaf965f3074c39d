// The Hourglass dashboard: polls the admin API of the local stack and draws
// what it reads. No dependencies: the DOM, fetch and SVG.
'use strict';

(() => {
  const REFRESH_MS = 2000;
  const WINDOW_MS = 60 * 60 * 1000; // what the server keeps (Tally)
  const MAX_ITEMS = 50; // item states fetched per refresh
  const TOKEN_KEY = 'hourglass.adminToken';
  const SVG = 'http://www.w3.org/2000/svg';

  const state = { token: null, timer: null, refreshes: 0, deadSig: '', payoutsSig: '' };
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
    return request('GET', path, admin);
  }

  // request calls the API; a state change is a POST with a JSON body and
  // the token in a header (never a cookie): see dashboard_api.go.
  async function request(method, path, admin, payload) {
    const headers = { Accept: 'application/json' };
    if (admin) headers['X-Admin-Token'] = state.token;
    const init = { method, headers, cache: 'no-store' };
    if (payload !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(payload);
    }
    const resp = await fetch(path, init);
    const body = await resp.json().catch(() => null);
    if (!resp.ok) {
      const err = new Error((body && body.detail) || resp.statusText || 'HTTP ' + resp.status);
      err.status = resp.status;
      err.code = body && body.code;
      throw err;
    }
    return body;
  }

  // act runs an action and reports its outcome in msg; a refusal shows
  // the problem's code and detail.
  async function act(msg, fn) {
    const node = $(msg);
    node.className = 'msg';
    node.textContent = 'working…';
    try {
      const text = await fn();
      node.className = 'msg ok';
      node.textContent = text;
      node.dataset.outcome = 'ok';
    } catch (err) {
      if (err.status === 401 || err.status === 403) throw err;
      node.className = 'msg error';
      node.textContent = 'Refused' + (err.code ? ' (' + err.code + ')' : '') + ': ' + err.message;
      node.dataset.outcome = err.code || 'error';
    }
    state.deadSig = state.payoutsSig = '';
    refreshSoon();
  }

  function refreshSoon() {
    clearTimeout(state.timer);
    state.timer = setTimeout(refresh, 50);
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
      const [stats, metrics, dead, payouts] = await Promise.all([
        getJSON('/v1/admin/stats', true),
        getJSON('/dashboard/api/metrics', true),
        getJSON('/dashboard/api/dead', true),
        getJSON('/dashboard/api/payouts', true),
      ]);
      const items = await itemStates(Object.keys(stats.items).sort());
      render(stats, metrics, items);
      renderDead(dead);
      renderPayouts(payouts);
      renderFigures(metrics, stats);
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
    clearTimeout(state.timer);
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
    const ibody = $('#items tbody');
    const dbody = $('#items-ended tbody');
    ibody.replaceChildren();
    dbody.replaceChildren();
    // Items on sale (or soon) in the table; ended and sold-out ones folded.
    let done = 0;
    for (const id of ids) {
      const it = stats.items[id];
      const st = items[id];
      const status = st ? st.status : 'unknown';
      const finished = status === 'ended' || status === 'sold_out';
      const tr = document.createElement('tr');
      cell(tr, id);
      const badge = document.createElement('span');
      badge.className = 'badge ' + status;
      badge.textContent = status.replace('_', ' ');
      const td = cell(tr, '', 'item:' + id + ':status', status);
      td.appendChild(badge);
      const stock = it.admitted + it.stock_left;
      const sold = cell(tr, '', 'item:' + id + ':sold_share', stock ? it.admitted / stock : 0);
      const meter = document.createElement('meter');
      meter.min = 0; meter.max = Math.max(stock, 1); meter.value = it.admitted;
      sold.append(meter, ' ' + count(it.admitted) + ' / ' + count(stock));
      cell(tr, count(it.stock_left), 'item:' + id + ':stock_left', it.stock_left);
      cell(tr, count(it.admitted), 'item:' + id + ':admitted', it.admitted);
      cell(tr, count(it.confirmed), 'item:' + id + ':confirmed', it.confirmed);
      cell(tr, count(it.awaiting_payment), 'item:' + id + ':awaiting_payment', it.awaiting_payment);
      cell(tr, count(it.paid), 'item:' + id + ':paid', it.paid);
      cell(tr, count(it.expired), 'item:' + id + ':expired', it.expired);
      cell(tr, st ? st.starts_at.slice(0, 16).replace('T', ' ') + ' → ' + st.ends_at.slice(0, 16).replace('T', ' ') + ' UTC' : '');
      if (finished) { done++; dbody.appendChild(tr); } else ibody.appendChild(tr);
    }
    $('#items').hidden = ids.length - done === 0;
    $('#items-done').hidden = done === 0;
    $('#items-done-count').textContent = String(done);

    // The charts draw the server's history (the last hour, whenever the
    // page opened) and, for the gauges, the figures just read at now.
    const now = Date.now();
    const gauge = (k) => metrics.history.filter((b) => b[k] !== undefined).map((b) => ({ t: b.t + half, v: b[k] }))
      .concat([{ t: now, v: total[k] }]);
    const half = metrics.bucket_seconds * 500;
    chart('size', [
      { name: 'scheduled', points: gauge('due') },
      { name: 'due now', points: gauge('due_now') },
      { name: 'in flight', points: gauge('inflight') },
      { name: 'dead', points: gauge('dead') },
    ], count);
    chart('lag', [{ name: 'oldest due lag', points: gauge('oldest_due_lag_ms') }], duration);
    const ratePts = (k) => complete.map((b) => ({ t: b.t + half, v: (b[k] || 0) / metrics.bucket_seconds }));
    chart('rate', [
      { name: 'jobs claimed', points: ratePts('claimed') },
      { name: 'orders confirmed', points: ratePts('orders_confirmed') },
      { name: 'orders paid', points: ratePts('orders_paid') },
      { name: 'orders expired', points: ratePts('orders_expired') },
      { name: 'payouts paid', points: ratePts('payouts_paid') },
      { name: 'payouts failed', points: ratePts('payouts_failed') },
    ], rate);
    chart('http', [
      { name: '2xx', points: ratePts('http_2xx'), colour: 2 },
      { name: '3xx', points: ratePts('http_3xx'), colour: 0 },
      { name: '4xx', points: ratePts('http_4xx'), colour: 1 },
      { name: '5xx', points: ratePts('http_5xx'), colour: 3 },
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

  // colour is a series' colour class: its own, else its place.
  const colour = (s, i) => (s.colour !== undefined ? s.colour : i);

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
        svg('circle', { cx: x(pts[0].t), cy: y(pts[0].v), r: 3, class: 'dot s' + colour(s, i) }, root);
        return;
      }
      svg('polyline', { points: pts.map((p) => x(p.t).toFixed(1) + ',' + y(p.v).toFixed(1)).join(' '), class: 'line s' + colour(s, i) }, root);
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
      sw.className = 'swatch s' + colour(s, i);
      item.dataset.series = s.name;
      item.dataset.colour = String(colour(s, i));
      item.appendChild(sw);
      const last = s.points[s.points.length - 1];
      item.appendChild(document.createTextNode(s.name + (last ? ' ' + fmt(last.v) : '')));
      legend.appendChild(item);
    });
  }


  // ---- actions: dead jobs ----

  function button(text, cls, onClick) {
    const b = document.createElement('button');
    b.type = 'button';
    b.textContent = text;
    if (cls) b.className = cls;
    b.addEventListener('click', onClick);
    return b;
  }

  // confirmDialog asks a person before a destructive action.
  function confirmDialog(text, okText) {
    const dlg = $('#confirm');
    $('#confirm-text').textContent = text;
    $('#confirm-ok').textContent = okText;
    dlg.returnValue = '';
    return new Promise((resolve) => {
      dlg.addEventListener('close', () => resolve(dlg.returnValue === 'ok'), { once: true });
      dlg.showModal();
    });
  }

  function move(how, queue, ids, what) {
    const payload = { queue };
    if (ids) payload.ids = ids; else payload.all = true;
    return act('#dead-msg', async () => {
      if (how === 'purge') {
        const yes = await confirmDialog('Purge ' + what + ' of ' + queue + '? They will not run again; ' +
          'the withdrawals or orders they refer to are left as they are.', 'Purge');
        if (!yes) return 'nothing purged';
        payload.confirm = true;
      }
      const r = await request('POST', '/dashboard/api/dead/' + how, true, payload);
      return (how === 'requeue' ? 'requeued ' : 'purged ') + r.moved.length + ' dead job(s) of ' + r.queue +
        (how === 'requeue' && r.moved.length ? ': due now, the poller hands them on at its next round' : '');
    });
  }

  async function inspect(queue, id) {
    await act('#dead-msg', async () => {
      const r = await getJSON('/dashboard/api/dead/job?queue=' + encodeURIComponent(queue) + '&id=' + encodeURIComponent(id), true);
      const box = $('#dead-detail');
      box.replaceChildren();
      const h = document.createElement('h3');
      h.textContent = 'Dead job ' + r.job.id + ' of ' + r.job.queue + ' (shard ' + r.job.shard + '), died ' + r.job.died_at;
      box.appendChild(h);
      if (r.record) box.appendChild(recordView(r.record));
      else box.appendChild(text('p', 'No record with this id (its withdrawal or order is gone).', 'muted'));
      box.hidden = false;
      return 'showing ' + id;
    });
  }

  function renderDead(dead) {
    const total = Object.values(dead.counts).reduce((a, b) => a + b, 0);
    setMetric('nav:dead', total ? String(total) : '', total);
    const sig = JSON.stringify(dead);
    if (sig === state.deadSig) return; // keep what a person is doing
    state.deadSig = sig;
    $('#no-dead').hidden = total > 0;
    $('#dead').hidden = $('#dead-queues').hidden = total === 0;
    const qbody = $('#dead-queues tbody');
    qbody.replaceChildren();
    for (const [queue, n] of Object.entries(dead.counts)) {
      if (!n) continue;
      const tr = document.createElement('tr');
      cell(tr, queue);
      cell(tr, count(n), 'dead:' + queue, n);
      const td = cell(tr, '');
      td.className = 'actions';
      td.append(button('Requeue all', '', () => move('requeue', queue, null, 'every dead job')),
        button('Purge all…', 'danger', () => move('purge', queue, null, 'every dead job (' + n + ')')));
      qbody.appendChild(tr);
    }
    const body = $('#dead tbody');
    body.replaceChildren();
    for (const j of dead.jobs) {
      const tr = document.createElement('tr');
      tr.dataset.job = j.id;
      cell(tr, j.queue);
      cell(tr, String(j.shard));
      cell(tr, j.id).className = 'id';
      cell(tr, j.died_at);
      const td = cell(tr, '');
      td.className = 'actions';
      td.append(button('Inspect', '', () => inspect(j.queue, j.id)),
        button('Requeue', '', () => move('requeue', j.queue, [j.id], 'this job')),
        button('Purge…', 'danger', () => move('purge', j.queue, [j.id], 'dead job ' + j.id)));
      body.appendChild(tr);
    }
  }

  // ---- actions: unresolved payouts ----

  function renderPayouts(p) {
    const rows = p.withdrawals;
    setMetric('nav:payouts', rows.length ? String(rows.length) : '', rows.length);
    const sig = JSON.stringify(rows);
    if (sig === state.payoutsSig) return; // keep what a person types
    state.payoutsSig = sig;
    $('#no-payouts').hidden = rows.length > 0;
    const box = $('#payouts');
    box.replaceChildren();
    for (const w of rows) {
      const card = document.createElement('div');
      card.className = 'card';
      card.dataset.withdrawal = w.id;
      card.appendChild(text('h3', w.id + ' · revision ' + w.revision));
      const facts = [
        ['status', w.status], ['may have paid', w.may_have_paid ? 'yes' : 'no'], ['attempts', String(w.attempts)],
        ['first sent', (w.first_sent_at || '–') + (w.past_idempotency_window ? ' (past the provider\u2019s idempotency window: never sent again blind)' : '')],
        ['next', w.next_attempt_at], ['last error', w.last_error || '–'], ['request id', w.request_id || '–'],
      ];
      card.appendChild(facts_(facts));
      card.appendChild(historyView(w.record));
      const paid = form('Paid at the provider: payout id', 'payout_id', 'Mark paid', (v) => resolve(w, { payout_id: v }));
      const failed = form('Not paid at the provider: reason', 'reason', 'Mark failed', (v) => resolve(w, { reason: v }));
      paid.classList.add('paid');
      failed.classList.add('failed');
      if (!w.may_have_paid) paid.hidden = true; // no call may have paid it: failed only
      card.append(paid, failed);
      box.appendChild(card);
    }
  }

  function form(label, name, submit, onSubmit) {
    const f = document.createElement('form');
    f.className = 'inline';
    const id = 'f-' + Math.random().toString(36).slice(2);
    const l = document.createElement('label');
    l.htmlFor = id;
    l.textContent = label;
    const input = document.createElement('input');
    input.id = id;
    input.name = name;
    input.required = true;
    input.autocomplete = 'off';
    const b = document.createElement('button');
    b.type = 'submit';
    b.textContent = submit;
    f.append(l, input, b);
    f.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const v = input.value.trim();
      if (v) onSubmit(v);
    });
    return f;
  }

  function resolve(w, verdict) {
    return act('#payouts-msg', async () => {
      const r = await request('POST', '/dashboard/api/payouts/resolve', true, { id: w.id, revision: w.revision, ...verdict });
      const x = r.withdrawal;
      return x.id + ' is ' + x.status + ' (resolved by ' + x.resolved_by + ' at ' + x.resolved_at + '); ' + r.finance;
    });
  }

  // ---- look up ----

  $('#lookup-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const id = $('#lookup-id').value.trim();
    if (!id) return;
    act('#lookup-msg', async () => {
      const r = await getJSON('/dashboard/api/lookup?id=' + encodeURIComponent(id), true);
      const box = $('#lookup-result');
      box.replaceChildren(recordView(r));
      box.hidden = false;
      return 'found ' + r.kind + ' ' + id;
    }).catch(() => {});
  });

  function text(tag, t, cls) {
    const n = document.createElement(tag);
    n.textContent = t;
    if (cls) n.className = cls;
    return n;
  }

  function facts_(pairs) {
    const dl = document.createElement('dl');
    for (const [k, v] of pairs) {
      if (v === undefined || v === null || v === '') continue;
      dl.append(text('dt', k), text('dd', String(v)));
      dl.lastChild.dataset.fact = k;
    }
    return dl;
  }

  // history lists who did what to a withdrawal, oldest first.
  function historyView(w) {
    const ev = [];
    const add = (at, what) => { if (at) ev.push([at, what]); };
    add(w.created_at, 'created by ' + w.user_id + ' (request ' + (w.request_id || '–') + '), due ' + (w.rescheduled_from || w.due_at));
    add(w.rescheduled_at, 'rescheduled by ' + w.rescheduled_by + ' from ' + w.rescheduled_from + ' to ' + w.due_at +
      (w.reschedule_reason ? ': ' + w.reschedule_reason : ''));
    add(w.first_sent_at, 'first sent to the payout provider');
    for (const c of w.callbacks || []) ev.push(['', 'provider callback ' + c + ' applied']);
    add(w.processed_at, 'became ' + w.status + (w.payout_id ? ' (payout ' + w.payout_id + ')' : ''));
    add(w.resolved_at, 'resolved as ' + w.status + ' by ' + w.resolved_by);
    ev.sort((a, b) => (a[0] && b[0] ? a[0].localeCompare(b[0]) : 0));
    const wrap = document.createElement('div');
    wrap.className = 'history';
    wrap.appendChild(text('h4', 'History (' + w.attempts + ' payout attempt' + (w.attempts === 1 ? '' : 's') + ')'));
    const ol = document.createElement('ol');
    for (const [at, what] of ev) ol.appendChild(text('li', (at ? at + ' · ' : '') + what));
    wrap.appendChild(ol);
    return wrap;
  }

  // recordView shows a look-up's answer: the record, its history and its jobs.
  function recordView(r) {
    const box = document.createElement('div');
    box.dataset.kind = r.kind;
    if (r.kind === 'withdrawal') {
      const w = r.withdrawal;
      box.appendChild(text('h3', 'Withdrawal ' + w.id));
      box.appendChild(facts_([
        ['status', w.status], ['user', w.user_id], ['amount', w.amount + ' ' + w.currency], ['destination', w.destination],
        ['due at', w.due_at], ['attempts', w.attempts], ['revision', w.revision], ['may have paid', w.may_have_paid ? 'yes' : 'no'],
        ['payout id', w.payout_id], ['finance told', w.finance_told || 'not yet'], ['last error', w.full_last_error],
        ['request id', w.request_id],
      ]));
      box.appendChild(historyView(w));
    } else {
      const o = r.order;
      box.appendChild(text('h3', 'Order ' + o.id));
      box.appendChild(facts_([
        ['item', o.item_id], ['purchase', o.purchase_id], ['user', o.user_id], ['quantity', o.quantity], ['shard', o.shard],
        ['created at', o.created_at], ['amount', o.amount ? o.amount + ' ' + o.currency : ''], ['pay by', o.pay_by],
        ['ended', o.end ? o.end + ' at ' + o.ended_at : ''],
      ]));
    }
    box.appendChild(text('h4', 'In the queues'));
    if (!r.jobs.length) {
      box.appendChild(text('p', 'No job: nothing scheduled, in flight or dead (processed, or not yet made).', 'muted'));
    } else {
      const t = document.createElement('table');
      t.className = 'jobs';
      const head = document.createElement('tr');
      for (const h of ['queue', 'shard', 'job', 'state', 'at']) head.appendChild(text('th', h));
      t.appendChild(head);
      const label = { scheduled: 'scheduled, due', in_flight: 'in flight, lease until', dead: 'dead since' };
      for (const j of r.jobs) {
        const tr = document.createElement('tr');
        tr.dataset.state = j.state;
        for (const v of [j.queue, String(j.shard), j.id, j.state.replace('_', ' '), (label[j.state] || '') + ' ' + j.at]) tr.appendChild(text('td', v));
        t.appendChild(tr);
      }
      box.appendChild(t);
    }
    return box;
  }

  // ---- figures ----

  function renderFigures(m, stats) {
    const ms = (v) => (v >= 1000 ? duration(Math.round(v)) : (Math.round(v * 10) / 10) + ' ms');
    const body = $('#routes tbody');
    body.replaceChildren();
    for (const r of m.routes) {
      const tr = document.createElement('tr');
      cell(tr, r.route).className = 'id';
      cell(tr, count(r.requests), 'route:' + r.route + ':requests', r.requests);
      for (const c of ['2xx', '4xx', '5xx']) {
        const n = r.classes[c] || 0;
        const pct = r.requests ? Math.round((n / r.requests) * 1000) / 10 : 0;
        const td = cell(tr, count(n) + (n ? ' (' + pct + '%)' : ''), 'route:' + r.route + ':' + c, n);
        if (c === '5xx' && n) td.classList.add('alert');
      }
      cell(tr, ms(r.latency.p50_ms));
      cell(tr, ms(r.latency.p95_ms));
      cell(tr, ms(r.latency.max_ms));
      body.appendChild(tr);
    }
    if (!m.routes.length) {
      const tr = document.createElement('tr');
      cell(tr, 'no API request yet').colSpan = 8;
      body.appendChild(tr);
    }
    const rbody = $('#refusals tbody');
    rbody.replaceChildren();
    // The admission script's reasons, and the purchase route's rate limits
    // (refused before the script: GET /v1/admin/stats counts them).
    const reasons = Object.entries(m.refusals_by_reason);
    const limited = (stats.rate_limits || {}).purchase;
    if (limited) {
      if (limited.refused_user) reasons.push(['rate_limited_per_user', limited.refused_user]);
      if (limited.refused_source) reasons.push(['rate_limited_per_source', limited.refused_source]);
    }
    reasons.sort((a, b) => b[1] - a[1]);
    const all = reasons.reduce((a, [, n]) => a + n, 0);
    for (const [reason, n] of reasons) {
      const tr = document.createElement('tr');
      cell(tr, reason.replace(/_/g, ' '));
      cell(tr, count(n), 'refusal:' + reason, n);
      const td = cell(tr, '');
      const meter = document.createElement('meter');
      meter.min = 0; meter.max = all; meter.value = n;
      td.append(meter, ' ' + Math.round((n / all) * 100) + '%');
      rbody.appendChild(tr);
    }
    if (!reasons.length) {
      const tr = document.createElement('tr');
      cell(tr, 'no purchase refused yet').colSpan = 3;
      rbody.appendChild(tr);
    }
    const l = m.due_to_paid;
    setMetric('paid:count', count(l.count), l.count);
    setMetric('paid:mean', l.count ? ms(l.mean_ms) : '–', l.mean_ms);
    setMetric('paid:p50', l.count ? ms(l.p50_ms) : '–', l.p50_ms);
    setMetric('paid:p95', l.count ? ms(l.p95_ms) : '–', l.p95_ms);
    setMetric('paid:max', l.count ? ms(l.max_ms) : '–', l.max_ms);
  }

  const tok = takeToken();
  if (tok) start(tok); else showLogin();
})();
