// A study's page, live: when the study changes (a trial ended, a round was queued, it stopped), re-read its live
// sections from the server (the page is rendered whole server-side; the socket only says when to re-read).
(function () {
  const holder = document.getElementById("study-live");
  if (!holder) return;
  const id = JSON.parse(document.getElementById("study-id").textContent);
  let pending = null;
  function refresh() {
    if (pending) return;
    pending = fetch(`${location.pathname}?part=live`, { credentials: "same-origin" })
      .then((r) => (r.ok ? r.text() : Promise.reject(r.status)))
      .then((html) => {
        holder.innerHTML = html;
        if (window.specdashCharts) window.specdashCharts.drawAll(holder);
      })
      .catch(() => {})
      .finally(() => { pending = null; });
  }
  window.specdashSocket(`/ws/studies/${id}/`, { onMessage: (m) => { if (m.type === "changed") refresh(); } });
})();
