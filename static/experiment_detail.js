// Experiment page: draw the Plotly figures built server-side; follow run states live. When a run finishes,
// reload so the server renders the new results (a reload is always correct).
(function () {
  for (const [chartId, dataId] of [["throughput-chart", "throughput-figure"], ["speedup-chart", "speedup-figure"]]) {
    const holder = document.getElementById(chartId);
    const data = document.getElementById(dataId);
    if (holder && data && window.Plotly) {
      const figure = JSON.parse(data.textContent);
      Plotly.newPlot(holder, figure.data, figure.layout, { responsive: true, displaylogo: false });
    }
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
