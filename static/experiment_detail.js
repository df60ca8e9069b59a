// Experiment page: offer each table as CSV; follow run states live.
// When a run finishes, reload so the server renders the new results (a reload is always correct).
(function () {
  // The charts are drawn by charts.js (in the page's theme, as they scroll into view).

  // Tables whose rows come as JSON (data-rows) are filled when first needed: opened, or exported.
  // The columns, in order, are the header's (the server names them once).
  function fillRows(table) {
    if (!table.dataset.rows || table.dataset.filled) return;
    table.dataset.filled = "1";
    const source = document.getElementById(table.dataset.rows);
    const body = table.tBodies[0];
    const columns = Array.from(table.tHead.querySelectorAll("th[data-column]"), (th) => th.dataset.column);
    for (const row of source ? JSON.parse(source.textContent) : []) {
      const tr = body.insertRow();
      for (const column of columns) {
        // As Python's str() prints a number, so the text matches the JSON export and the earlier page.
        const value = row[column];
        tr.insertCell().textContent = value === null || value === undefined ? "—"
          : (typeof value === "number" && Number.isInteger(value) && !["config", "concurrency", "n"].includes(column))
            ? value.toFixed(1) : String(value);
      }
    }
  }
  for (const details of document.querySelectorAll("details")) {
    details.addEventListener("toggle", () => {
      if (details.open) details.querySelectorAll("table[data-rows]").forEach(fillRows);
    });
  }

  // Every table of the page can be taken away as CSV, as the page shows it (export.json has them all as data).
  for (const exported of document.querySelectorAll("table[data-export]")) {
    const link = document.createElement("a");
    link.href = "#";
    link.className = "export-link";
    link.textContent = "CSV";
    link.dataset.exports = exported.id;
    link.addEventListener("click", (event) => {
      event.preventDefault();
      fillRows(exported);
      // A leading = + or @ would make a spreadsheet run the cell (config names are user input).
      const quote = (text) => `"${text.trim().replace(/\s+/g, " ").replace(/^([=+@])/, "'$1").replace(/"/g, '""')}"`;
      const lines = [...exported.rows].map((row) => [...row.cells].map((cell) => quote(cell.textContent)).join(","));
      const blob = new Blob([lines.join("\r\n") + "\r\n"], { type: "text/csv" });
      const anchor = document.createElement("a");
      anchor.href = URL.createObjectURL(blob);
      anchor.download = `${document.title.split(" · ")[0]}-${exported.dataset.export}.csv`;
      anchor.click();
      URL.revokeObjectURL(anchor.href);
    });
    exported.before(link);
  }

  // Each pending run's estimate (start and end as times) and the last one's, worded again as time passes and as the
  // runs' states come in (each state event carries its run's new estimate).
  const estimatesData = document.getElementById("run-estimates");
  const estimates = estimatesData ? JSON.parse(estimatesData.textContent) : {};
  function showEstimates() {
    let last = null;
    for (const [id, estimate] of Object.entries(estimates)) {
      const row = document.querySelector(`#runs tr[data-run="${id}"]`);
      let cell = row && row.querySelector(".estimate");
      if (row && !cell) {
        cell = document.createElement("span");
        cell.className = "meta estimate";
        row.querySelector('[data-field="queue"]').append(" ", cell);
      }
      if (cell) cell.textContent = `· ${window.specdashEstimateText(estimate)}`;
      if (estimate.ends_at && (!last || new Date(estimate.ends_at.high) > new Date(last.ends_at.high))) last = estimate;
    }
    const line = document.getElementById("experiment-estimate");
    if (line && last) {
      const ends = Object.values(estimates).filter((e) => e.ends_at);
      const low = ends.reduce((a, e) => (new Date(e.ends_at.low) > new Date(a) ? e.ends_at.low : a), last.ends_at.low);
      const finish = { ...last, phase: "finish", starts_at: null, ends_at: { ...last.ends_at, low } };
      line.querySelector('[data-field="estimate"]').textContent = window.specdashEstimateText(finish);
    }
  }
  if (Object.keys(estimates).length) setInterval(showEstimates, 5000);

  const table = document.getElementById("runs");
  if (!table) return;
  const finished = new Set(["succeeded", "failed", "cancelled"]);
  let reloadTimer = null;
  window.specdashSocket(table.dataset.ws, {
    onMessage(message) {
      if (message.type !== "state") return;
      const row = table.querySelector(`tr[data-run="${message.run}"]`);
      if (!row) return;
      const state = row.querySelector('[data-field="state"]');
      const wasFinished = finished.has(state.textContent.trim());
      state.textContent = message.state;
      state.className = `state state-${message.state}`;
      // Out of the queue: its standing is history; in it, its place may have moved up.
      const standing = row.querySelector(".queue-standing");
      if (standing && (message.state !== "queued" || !message.queue)) standing.remove();
      else if (standing) {
        standing.querySelector('[data-field="position"]').textContent = message.queue.position;
        standing.querySelector('[data-field="waiting-for"]').textContent = message.queue.waiting_for;
      }
      if (message.estimate) estimates[message.run] = message.estimate;
      else {
        delete estimates[message.run];
        row.querySelector(".estimate")?.remove();
      }
      showEstimates();
      const progress = row.querySelector('[data-field="progress"]');
      if (message.state === "loading" && message.loading_progress !== null) {
        progress.textContent = `${message.loading_progress}%`;
      } else if (message.state === "benchmarking" && message.benchmark_progress) {
        progress.textContent = message.benchmark_progress.label;
      } else {
        progress.textContent = "";
      }
      if (message.failure) {
        row.querySelector('[data-field="failure"]').textContent = `${message.failure.kind}: ${message.failure.message}`;
      }
      if (finished.has(message.state) && !wasFinished) {
        clearTimeout(reloadTimer);
        reloadTimer = setTimeout(() => location.reload(), 800);
      }
    },
  });
})();
