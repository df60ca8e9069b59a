// Plotly figures built server-side (charts.py), drawn in the page's colour scheme, and only once they scroll
// near the screen: a long comparison page paints its first screen without waiting for the charts below it.
// Include it as <script src=charts.js data-plotly="(plotly.min.js address)" defer>.
(function () {
  const dark = window.matchMedia("(prefers-color-scheme: dark)");

  // The dark template: transparent backgrounds (the card's colour shows), light text and grid lines.
  function themed(layout) {
    if (!dark.matches) return layout;
    const axis = (a) => Object.assign({}, a, { gridcolor: "#344054", zerolinecolor: "#475467", linecolor: "#475467" });
    const out = Object.assign({}, layout, {
      paper_bgcolor: "rgba(0,0,0,0)",
      plot_bgcolor: "rgba(0,0,0,0)",
      font: Object.assign({}, layout.font, { color: "#e4e7ec" }),
      legend: Object.assign({}, layout.legend, { bgcolor: "rgba(0,0,0,0)" }),
    });
    for (const key of Object.keys(layout)) {
      if (/^[xy]axis\d*$/.test(key)) out[key] = axis(layout[key]);
    }
    if (!layout.xaxis) out.xaxis = axis({});
    if (!layout.yaxis) out.yaxis = axis({});
    return out;
  }

  // plotly.js (4.8 MB of script) is fetched once a chart is about to be seen, and not before the page's load
  // event: the tables and verdicts paint and the page is ready first, then the charts fill in.
  const source = document.currentScript && document.currentScript.dataset.plotly;
  const loaded = new Promise((resolve) => {
    if (document.readyState === "complete") resolve();
    else window.addEventListener("load", () => resolve(), { once: true });
  });
  let plotly = null;
  function plotlyReady() {
    if (window.Plotly) return Promise.resolve();
    if (!plotly) {
      plotly = loaded.then(() => new Promise((resolve, reject) => {
        const script = document.createElement("script");
        script.src = source;
        script.onload = resolve;
        script.onerror = reject;
        document.head.append(script);
      }));
    }
    return plotly;
  }

  // On a narrow chart (a phone): a Plotly title does not wrap, so keep it short (the part before its parenthesis),
  // and a legend beside the plot would leave it a sliver, so the legend goes below it, in rows.
  function fitted(layout, holder) {
    if (holder.clientWidth >= 600) return layout;
    const out = Object.assign({}, layout, {
      legend: Object.assign({}, layout.legend, { orientation: "h", x: 0, xanchor: "left", y: -0.25, yanchor: "top" }),
    });
    const title = layout.title && layout.title.text;
    if (title) out.title = Object.assign({}, layout.title, { text: title.replace(/\s*\(.*$/, "") });
    return out;
  }

  // A figure is in the page (data-figure: the id of its JSON script) or fetched when shown (data-figure-url: a
  // long history's figure, which would otherwise hold up the page's first paint).
  function figureOf(holder) {
    if (holder.dataset.figureUrl) {
      return fetch(holder.dataset.figureUrl, { credentials: "same-origin" }).then((response) => {
        if (!response.ok) throw new Error(`${response.status} for ${holder.dataset.figureUrl}`);
        return response.json();
      });
    }
    const data = document.getElementById(holder.dataset.figure);
    return data ? Promise.resolve(JSON.parse(data.textContent)) : null;
  }

  function draw(holder) {
    if (holder.dataset.drawn) return;
    const pending = figureOf(holder);
    if (!pending) return;
    holder.dataset.drawn = "1";
    Promise.all([pending, plotlyReady()]).then(([figure]) => {
      holder.specdashFigure = figure;
      Plotly.newPlot(holder, figure.data, themed(fitted(figure.layout || {}, holder)), {
        responsive: true,
        displaylogo: false,
      }).then(() => {
        // A point whose customdata is one of our pages (a history point: its run) opens it when clicked.
        holder.on("plotly_click", (event) => {
          const target = event.points && event.points[0] && event.points[0].customdata;
          if (typeof target === "string" && target.startsWith("/") && !target.startsWith("//")) {
            window.location.assign(target);
          }
        });
      });
    });
  }

  function drawAll(root) {
    const holders = [...(root || document).querySelectorAll("[data-figure], [data-figure-url]")];
    if (!("IntersectionObserver" in window)) {
      holders.forEach(draw);
      return;
    }
    const observer = new IntersectionObserver(
      (entries) => {
        for (const entry of entries) {
          if (entry.isIntersecting) {
            observer.unobserve(entry.target);
            draw(entry.target);
          }
        }
      },
      { rootMargin: "200px 0px" },
    );
    holders.forEach((holder) => observer.observe(holder));
  }

  // The system switches theme while the page is open: redraw what is drawn in the new colours.
  dark.addEventListener("change", () => {
    if (!window.Plotly) return;
    for (const holder of document.querySelectorAll("[data-figure][data-drawn], [data-figure-url][data-drawn]")) {
      if (!holder.specdashFigure) continue;
      Plotly.react(holder, holder.specdashFigure.data, themed(fitted(holder.specdashFigure.layout || {}, holder)));
    }
  });

  window.specdashCharts = { drawAll, themed };
  drawAll();
})();
