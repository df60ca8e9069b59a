// Experiment page: draw the Plotly figures built server-side; offer each table as CSV; follow run states live.
// When a run finishes, reload so the server renders the new results (a reload is always correct).
(function () {
  // Every chart holder names the json_script element that carries its figure.
  for (const holder of document.querySelectorAll("[data-figure]")) {
    const data = document.getElementById(holder.dataset.figure);
    if (data && window.Plotly) {
      const figure = JSON.parse(data.textContent);
      Plotly.newPlot(holder, figure.data, figure.layout, { responsive: true, displaylogo: false });
    }
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
      // Out of the queue: its standing is history (the others' are refreshed by the reload when a run ends).
      if (message.state !== "queued") row.querySelector(".queue-standing")?.remove();
      const progress = row.querySelector('[data-field="progress"]');
      if (message.state === "loading" && message.loading_progress !== null) {
        progress.textContent = `${message.loading_progress}%`;
      } else if (message.state === "benchmarking") {
        progress.textContent = `cell ${message.benchmark_cell}`;
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
