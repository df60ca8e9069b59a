// Run page: the live server log (resumes after the last line it has, so a reconnect neither loses nor repeats
// lines) and the run's state. Incoming lines are coalesced and drawn at most once per animation frame.
(function () {
  const logBox = document.getElementById("log");
  if (!logBox) return;
  const follow = document.getElementById("follow");
  const lineCount = document.getElementById("line-count");
  const failureLine = Number(logBox.dataset.failureLine || 0);
  const ERROR = /Traceback \(most recent call last\)|Error:|Exception|CUDA out of memory|Scheduler hit an exception/;
  let lastLine = 0;
  let pending = [];
  let scheduled = false;

  function draw() {
    scheduled = false;
    const fragment = document.createDocumentFragment();
    for (const [n, text] of pending) {
      const row = document.createElement("div");
      row.className = "line";
      if (ERROR.test(text)) row.classList.add("error-line");
      if (failureLine && n >= failureLine && n < failureLine + 60 && ERROR.test(text)) row.classList.add("failure-line");
      row.dataset.n = n;
      const number = document.createElement("span");
      number.className = "n";
      number.textContent = n;
      row.append(number, document.createTextNode(text));
      fragment.append(row);
    }
    pending = [];
    logBox.append(fragment);
    lineCount.textContent = lastLine;
    if (follow.checked) logBox.scrollTop = logBox.scrollHeight;
  }

  logBox.addEventListener("scroll", () => {
    const atBottom = logBox.scrollHeight - logBox.scrollTop - logBox.clientHeight < 30;
    follow.checked = atBottom;
  });

  window.specdashSocket(logBox.dataset.ws, {
    resumeQuery: () => `?after=${lastLine}`,
    onMessage(message) {
      if (message.type === "lines") {
        message.lines.forEach((text, i) => {
          const n = message.first + i;
          if (n > lastLine) { pending.push([n, text]); lastLine = n; }
        });
        if (!scheduled) { scheduled = true; requestAnimationFrame(draw); }
      } else if (message.type === "state") {
        const state = document.getElementById("run-state");
        state.textContent = message.state;
        state.className = `state state-${message.state}`;
        const bar = document.getElementById("loading-progress");
        if (message.state === "loading" && message.loading_progress !== null) {
          bar.hidden = false;
          bar.querySelector(".bar").style.width = `${message.loading_progress}%`;
          bar.querySelector("span").textContent = `${message.loading_progress}% of weight shards loaded`;
        } else {
          bar.hidden = true;
        }
        const timeline = document.getElementById("timeline");
        timeline.innerHTML = "";
        for (const phase of message.phases) {
          const item = document.createElement("li");
          const badge = document.createElement("span");
          badge.className = `state state-${phase.state}`;
          badge.textContent = phase.state;
          const duration = phase.duration_s === null ? "" : ` · ${phase.duration_s.toFixed(1)} s`;
          item.append(badge, document.createTextNode(` ${phase.at.slice(11, 19)}${duration}`));
          timeline.append(item);
        }
        if (message.failure) {
          const box = document.getElementById("failure");
          box.hidden = false;
          box.querySelector('[data-field="kind"]').textContent = message.failure.kind;
          box.querySelector('[data-field="message"]').textContent = message.failure.message;
          const excerpt = box.querySelector('[data-field="excerpt"]');
          excerpt.textContent = message.failure.excerpt;
          excerpt.hidden = !message.failure.excerpt;
        }
      }
    },
  });
})();
