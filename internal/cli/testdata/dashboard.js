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
    viewport: { width: 1280, height: 900 },
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
    report.status = await page.textContent('#status');
    await page.screenshot({ path: env('SCREENSHOT'), fullPage: true });

    // 3. A link carrying ?token= opens the board at once and drops the
    // token from the address bar.
    const second = await context.newPage();
    watch(second);
    await second.goto(url + '?token=' + encodeURIComponent(token), { waitUntil: 'load' });
    await second.waitForFunction(() => document.body.dataset.ready === 'true', null, { timeout: 20000 });
    report.url_after_token_link = second.url();
    report.login_hidden_with_link = await second.isHidden('#login');
  } finally {
    await context.close();
  }
  process.stdout.write(JSON.stringify(report) + '\n');
}

main().catch((err) => {
  process.stderr.write('dashboard.js: ' + (err && err.stack ? err.stack : err) + '\n');
  process.exit(1);
});
