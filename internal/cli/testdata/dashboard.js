// Drives the dashboard of a running `hourglass serve` in headless Chromium
// (Debian's package, through playwright-core) and prints what it saw as one
// JSON object on stdout. dashboard_test.go runs it and judges the result.
//
// Environment:
//   DASHBOARD_URL   the dashboard, e.g. http://127.0.0.1:8080/dashboard
//   ADMIN_TOKEN     the admin token to type in
//   SCREENSHOT      where to write the PNG
//   USER_DATA_DIR   a fresh, empty browser profile directory
//   CHROMIUM        the browser (default /usr/bin/chromium)
//   MIN_REFRESHES   refreshes to wait for before reading (default 2)
//   SHOTS           a directory for the screenshots of the panels
//                   (dashboard-<panel>.png), or unset for none
//   ACT             unset: read the board (steps 1-3); else a JSON object
//                   {"requeue": id, "purge": id, "resolve": id, "payout_id":
//                   "po_…"}: do each action in the page instead (step 4)
//
// Every wait polls the page with a bound; none sleeps a fixed time.
'use strict';

const { chromium } = require('playwright-core');

const env = (name, fallback) => {
  const v = process.env[name] || fallback;
  if (!v) throw new Error(name + ' is not set');
  return v;
};

async function main() {
  const url = env('DASHBOARD_URL');
  const token = env('ADMIN_TOKEN');
  const minRefreshes = Number(env('MIN_REFRESHES', '2'));
  const context = await chromium.launchPersistentContext(env('USER_DATA_DIR'), {
    executablePath: env('CHROMIUM', '/usr/bin/chromium'),
    headless: true,
    args: [
      '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
    ],
    viewport: { width: 1280, height: 800 },
  });
  const report = { console_errors: [], failed_requests: [], requests: [] };
  const watch = (page) => {
    page.on('console', (m) => { if (m.type() === 'error') report.console_errors.push(m.text()); });
    page.on('pageerror', (e) => report.console_errors.push('uncaught: ' + e.message));
    page.on('requestfailed', (r) => report.failed_requests.push(r.url() + ' ' + (r.failure() || {}).errorText));
    page.on('request', (r) => report.requests.push(r.method() + ' ' + new URL(r.url()).pathname));
  };
  try {
    report.browser = context.browser() ? context.browser().version() : '';
    if (process.env.ACT) {
      await act(context, watch, report, url, token, JSON.parse(process.env.ACT));
    } else {
      // 1. Without a token the page asks for one, and fetches no data.
      const page = await context.newPage();
      watch(page);
      await page.goto(url, { waitUntil: 'load' });
      await page.waitForSelector('#login:not([hidden])', { timeout: 10000 });
      report.login_shown = await page.isVisible('#token');
      report.requests_before_token = report.requests.filter((r) => r.includes('/v1/') || r.includes('/api/'));

      // 2. Typed in, the token opens the board, which keeps refreshing itself.
      await page.fill('#token', token);
      await page.click('#login button[type=submit]');
      await page.waitForFunction((n) => Number(document.body.dataset.refreshes || 0) >= n, minRefreshes, { timeout: 20000 });
      report.title = await page.title();
      report.metrics = await page.$$eval('[data-metric]', (nodes) => Object.fromEntries(nodes.map((n) => [
        n.dataset.metric, { text: n.textContent.trim(), value: n.dataset.value },
      ])));
      report.chart_lines = await page.$$eval('svg polyline, svg circle', (nodes) => nodes.length);
      // Every line or dot drawn has a legend entry of its colour.
      report.legend_mismatches = await page.$$eval('figure.chart', (charts) => charts.flatMap((c) => {
        const legend = new Set([...c.querySelectorAll('.legend .swatch')].map((s) => s.className.match(/s\d/)[0]));
        return [...c.querySelectorAll('svg polyline, svg circle')].map((l) => l.getAttribute('class').match(/s\d/)[0])
          .filter((k) => !legend.has(k)).map((k) => c.querySelector('figcaption').textContent + ': ' + k);
      }));
      report.history_points = await page.$$eval('#chart-size polyline', (ls) => Math.max(0, ...ls.map((l) => l.getAttribute('points').split(' ').length)));
      report.status = await page.textContent('#status');
      await page.screenshot({ path: env('SCREENSHOT'), fullPage: true });
      await shot(page, null, 'overview');

      // 3. A link carrying ?token= opens the board at once and drops the
      // token from the address bar.
      const second = await context.newPage();
      watch(second);
      await second.goto(url + '?token=' + encodeURIComponent(token), { waitUntil: 'load' });
      await second.waitForFunction(() => document.body.dataset.ready === 'true', null, { timeout: 20000 });
      report.url_after_token_link = second.url();
      report.login_hidden_with_link = await second.isHidden('#login');
    }
  } finally {
    // Shown when the run fails: what the page said.
    process.stderr.write('console errors: ' + JSON.stringify(report.console_errors) + '\n');
    await context.close();
  }
  process.stdout.write(JSON.stringify(report) + '\n');
}

// shot saves the panel sel (or the viewport) as SHOTS/dashboard-<name>.png.
async function shot(page, sel, name) {
  const dir = process.env.SHOTS;
  if (!dir) return;
  const path = dir + '/dashboard-' + name + '.png';
  if (sel) await page.locator(sel).screenshot({ path });
  else await page.screenshot({ path });
}

// until polls check (an async function) every 100 ms until it returns a
// truthy value, for at most ms; it throws what with the last answer.
async function until(what, ms, check) {
  const end = Date.now() + ms;
  let last;
  for (;;) {
    last = await check();
    if (last) return last;
    if (Date.now() > end) throw new Error('timed out after ' + ms + ' ms waiting for ' + what);
    await new Promise((r) => setTimeout(r, 100));
  }
}

// outcome waits for the action message sel to report, and returns it.
async function outcome(page, sel) {
  await page.waitForFunction((s) => {
    const n = document.querySelector(s);
    return n && n.dataset.outcome;
  }, sel, { timeout: 20000 });
  return page.$eval(sel, (n) => ({ outcome: n.dataset.outcome, text: n.textContent }));
}

async function clearOutcome(page, sel) {
  await page.$eval(sel, (n) => { delete n.dataset.outcome; n.textContent = ''; });
}

// act does every operator action in the page, as a person would.
async function act(context, watch, report, url, token, todo) {
  const page = await context.newPage();
  watch(page);
  await page.goto(url + '?token=' + encodeURIComponent(token), { waitUntil: 'load' });
  await page.waitForFunction(() => document.body.dataset.ready === 'true', null, { timeout: 20000 });
  const refreshes = () => page.evaluate(() => Number(document.body.dataset.refreshes || 0));
  const nextRefresh = async () => {
    const n = await refreshes();
    await page.waitForFunction((m) => Number(document.body.dataset.refreshes || 0) > m, n, { timeout: 20000 });
  };
  const row = (id) => '#dead tr[data-job="' + id + '"]';

  // Dead jobs: inspect one, then requeue it.
  await page.waitForSelector(row(todo.requeue), { timeout: 20000 });
  await page.waitForSelector(row(todo.purge), { timeout: 20000 });
  await page.click(row(todo.requeue) + ' button:text-is("Inspect")');
  await page.waitForSelector('#dead-detail:not([hidden]) [data-kind="withdrawal"]', { timeout: 20000 });
  report.inspected = await page.textContent('#dead-detail');
  await shot(page, '#panel-dead', 'dead');
  await clearOutcome(page, '#dead-msg');
  await page.click(row(todo.requeue) + ' button:text-is("Requeue")');
  report.requeue = await outcome(page, '#dead-msg');
  await page.waitForSelector(row(todo.requeue), { state: 'detached', timeout: 20000 });

  // Purge: cancelled first (nothing happens), then confirmed.
  await clearOutcome(page, '#dead-msg');
  await page.click(row(todo.purge) + ' button:text-is("Purge…")');
  await page.waitForSelector('#confirm[open]', { timeout: 10000 });
  report.confirm_text = await page.textContent('#confirm-text');
  await shot(page, null, 'purge-confirm');
  await page.click('#confirm-cancel');
  report.purge_cancelled = await outcome(page, '#dead-msg');
  await nextRefresh();
  report.still_dead_after_cancel = await page.isVisible(row(todo.purge));
  await clearOutcome(page, '#dead-msg');
  await page.click(row(todo.purge) + ' button:text-is("Purge…")');
  await page.waitForSelector('#confirm[open]', { timeout: 10000 });
  await page.click('#confirm-ok');
  report.purge = await outcome(page, '#dead-msg');
  await page.waitForSelector(row(todo.purge), { state: 'detached', timeout: 20000 });

  // Look the requeued withdrawal up until it is paid with no job left.
  report.lookup = await until('the requeued withdrawal to be paid and out of the queues', 30000, async () => {
    await clearOutcome(page, '#lookup-msg');
    await page.fill('#lookup-id', todo.requeue);
    await page.click('#lookup-form button[type=submit]');
    await outcome(page, '#lookup-msg');
    const got = await page.evaluate(() => {
      const box = document.querySelector('#lookup-result');
      const status = box.querySelector('[data-fact="status"]');
      return { status: status && status.textContent, jobs: box.querySelectorAll('tr[data-state]').length, text: box.textContent };
    });
    return got.status === 'paid' && got.jobs === 0 ? got : null;
  });
  await shot(page, '#panel-lookup', 'lookup');

  // Resolve the unresolved payout as paid. The payout step may move the
  // record between two reads (a lookup of the provider): the refusal says
  // so, the list is read again, and the verdict is given on what it shows.
  const card = '#payouts [data-withdrawal="' + todo.resolve + '"]';
  await page.waitForSelector(card, { timeout: 30000 });
  await shot(page, '#panel-payouts', 'payouts');
  report.refusals = [];
  report.resolve = await until('the resolution to be taken', 60000, async () => {
    await page.waitForSelector(card + ' form.paid input', { timeout: 30000 });
    await clearOutcome(page, '#payouts-msg');
    await page.fill(card + ' form.paid input', todo.payout_id);
    await page.click(card + ' form.paid button[type=submit]');
    const o = await outcome(page, '#payouts-msg');
    if (o.outcome === 'ok') return o;
    report.refusals.push(o);
    await nextRefresh();
    return null;
  });
  await page.waitForSelector(card, { state: 'detached', timeout: 20000 });

  // The figures panel.
  await page.click('a[href="#panel-figures"]');
  await nextRefresh();
  report.routes = await page.$$eval('#routes tbody tr td:first-child', (tds) => tds.map((t) => t.textContent));
  await shot(page, '#panel-figures', 'figures');
}

main().catch((err) => {
  process.stderr.write('dashboard.js: ' + (err && err.stack ? err.stack : err) + '\n');
  process.exit(1);
});
