// Drives Debian's Chromium through flotilla's status page for the test
// `infra_status_page_in_chromium` (crates/flotilla/tests/run_monitor.rs).
//
// Usage: node status_page.mjs URL SCREENSHOT_DIR
// It speaks a line protocol with the test: it prints `READY instances=N` once the page
// shows the fleet; then reads `JOB <id>` from stdin, waits until the page shows that job
// running (printing `RUNNING <id> <isolation> <where>` and taking a screenshot), then until
// it has left the running jobs for the last hour's ended ones (printing `FINISHED <id>
// result=<result> link=<its GitLab page> level=<isolation> ran_on=<instance #slot>
// took=<duration> decisions=<rows> collapsed=<the largest run of one decision shown as one
// row> errors=<page errors>` and taking a second screenshot). The page is
// loaded once: everything after the first load must come from its own live refresh.
import { chromium } from "playwright-core";
import readline from "node:readline";

const [url, shots] = process.argv.slice(2);
const TIMEOUT = 60_000;

function say(line) {
  process.stdout.write(line + "\n");
}

const lines = readline.createInterface({ input: process.stdin });
const incoming = lines[Symbol.asyncIterator]();

// The flags Debian's Chromium needs in a closed network (no background connections).
const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  headless: true,
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => {
    if (m.type() === "error") errors.push(m.text());
  });
  await page.goto(url, { waitUntil: "load", timeout: TIMEOUT });
  // A marker that only survives if the page is never reloaded.
  await page.evaluate(() => {
    window.__loadedOnce = true;
  });
  const count = page.getByTestId("instance-count").locator("b");
  await page.waitForFunction(
    () => {
      const b = document.querySelector('[data-testid="instance-count"] b');
      return b && Number(b.textContent) >= 1;
    },
    null,
    { timeout: TIMEOUT },
  );
  say(`READY instances=${(await count.textContent()).trim()}`);

  const next = await incoming.next();
  const m = /^JOB (\d+)$/.exec((next.value || "").trim());
  if (!m) throw new Error(`expected JOB <id>, got ${JSON.stringify(next.value)}`);
  const id = m[1];
  const row = page.locator(`tr[data-job="${id}"]`);
  await page.waitForFunction(
    (id) => {
      const r = document.querySelector(`tr[data-job="${id}"]`);
      return r && r.children[2].textContent === "running";
    },
    id,
    { timeout: TIMEOUT },
  );
  const cells = await row.locator("td").allTextContents();
  say(`RUNNING ${id} ${cells[3]} ${cells[4].replaceAll(" ", "_")} ${cells[1]}`);
  await page.screenshot({ path: `${shots}/status-page-job-running.png`, fullPage: true });

  await row.waitFor({ state: "detached", timeout: TIMEOUT });
  const endedRow = page.locator(`tr[data-ended-job="${id}"]`);
  await endedRow.waitFor({ state: "attached", timeout: TIMEOUT });
  const result = await endedRow.getAttribute("data-result");
  const link = (await endedRow.locator("a").first().getAttribute("href")) || "none";
  const reloaded = !(await page.evaluate(() => window.__loadedOnce === true));
  if (reloaded) throw new Error("the page was reloaded; the refresh must be live");
  const ended = await endedRow.locator("td").allTextContents();
  // The idle fleet's scaler holds, the same way, every second: within a few seconds that is
  // one row with its count.
  await page
    .waitForFunction(
      () => [...document.querySelectorAll('[data-testid="decision"] td:first-child')].some((td) =>
        /×\d+/.test(td.textContent),
      ),
      null,
      { timeout: 15_000 },
    )
    .catch(() => {});
  const decisions = await page.getByTestId("decision").count();
  // A run of the same decision is one row, "(×N since ...)": the largest N shown.
  const times = await page.getByTestId("decision").locator("td:first-child").allTextContents();
  const collapsed = Math.max(1, ...times.map((t) => Number((/×(\d+)/.exec(t) || [0, 1])[1])));
  const word = (t) => t.trim().replaceAll(" ", "_") || "none";
  say(
    `FINISHED ${id} result=${result} link=${link} level=${word(ended[3])} ran_on=${word(ended[4])} ` +
      `took=${word(ended[5])} decisions=${decisions} collapsed=${collapsed} errors=${errors.length}`,
  );
  await page.screenshot({ path: `${shots}/status-page-after.png`, fullPage: true });
  for (const e of errors) say(`PAGE-ERROR ${e}`);
} catch (e) {
  say(`FAILED ${e && e.message ? e.message.split("\n")[0] : e}`);
  process.exitCode = 1;
} finally {
  await browser.close();
  lines.close();
}
