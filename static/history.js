// History pages: draw the series figure built server-side.
(function () {
  const holder = document.getElementById("history-chart");
  const data = document.getElementById("history-figure");
  if (holder && data && window.Plotly) {
    const figure = JSON.parse(data.textContent);
    Plotly.newPlot(holder, figure.data, figure.layout, { responsive: true, displaylogo: false });
  }
})();
