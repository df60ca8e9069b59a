// A websocket that reconnects with back-off and lets the caller say where to resume (used by every live page).
window.specdashSocket = function (path, { onMessage, resumeQuery }) {
  // A message is JSON, or (the log's lines) a JSON header, a newline, then the lines joined by newlines: JSON never
  // holds a raw newline, so the header ends at the first (see experiments/live/log_messages.py).
  function parseMessage(data) {
    const newline = data.indexOf("\n");
    if (newline < 0) return JSON.parse(data);
    const message = JSON.parse(data.slice(0, newline));
    message.lines = data.slice(newline + 1).split("\n");
    return message;
  }
  let delay = 500;
  let socket = null;
  function connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const query = resumeQuery ? resumeQuery() : "";
    socket = new WebSocket(`${scheme}://${location.host}${path}${query}`);
    socket.onopen = () => { delay = 500; document.body.dataset.live = "on"; };
    socket.onmessage = (event) => onMessage(parseMessage(event.data));
    socket.onclose = (event) => {
      document.body.dataset.live = "off";
      if (event.code === 4403) return; // not allowed: retrying would not help
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 10000);
    };
  }
  connect();
  return { close: () => socket && socket.close() };
};

// A run's estimate (its JSON `estimate`: start and end as times) in words, as experiments/formats/estimates.py words
// it, from the clock now: pages word it again as time passes, so "starts in 1-3 min" does not stay on for an hour.
window.specdashEstimateText = (function () {
  function inWords(seconds) {  // experiments/formats/durations.py: in_words
    seconds = Math.max(0, Math.round(seconds));
    if (seconds < 90) return `${seconds} s`;
    let minutes = Math.round(seconds / 60);
    if (minutes < 90) return `${minutes} min`;
    const hours = Math.floor(minutes / 60);
    minutes %= 60;
    return minutes ? `${hours} h ${minutes} min` : `${hours} h`;
  }
  function rangeInWords(low, high) {
    const top = inWords(high);
    if (low < 1) return `within ${top}`;
    let bottom = inWords(low);
    if (top.endsWith(" min") && top.split(" ").length === 2 && Math.round(low / 60) >= 1) {
      bottom = `${Math.round(low / 60)} min`;  // in the top's unit: "1-3 min", not "60 s-3 min"
    }
    if (bottom === top) return `in ${top}`;
    const [number, ...rest] = bottom.split(" ");
    const unit = rest.join(" ");
    if (!unit.includes(" ") && top.endsWith(` ${unit}`) && top.split(" ").length === 2) return `in ${number}-${top}`;
    return `in ${bottom}-${top}`;
  }
  function clock(at, now) {
    const iso = at.toISOString();
    return iso.slice(0, 10) === now.toISOString().slice(0, 10) ? iso.slice(11, 16) : `${iso.slice(0, 10)} ${iso.slice(11, 16)}`;
  }
  function clockRange(low, high, now) {
    const bottom = clock(low, now), top = clock(high, now);
    return bottom === top ? `${top} UTC` : `${bottom}-${top} UTC`;
  }
  return function (estimate, nowMs) {
    const now = new Date(nowMs === undefined ? Date.now() : nowMs);
    if (!estimate.ends_at) return "cannot start until its host is cleaned";
    const ends = [new Date(estimate.ends_at.low), new Date(estimate.ends_at.high)];
    const seconds = (ends[1] - now) / 1000;
    let when = "";
    if (estimate.phase === "queued" && estimate.starts_at) {
      const starts = [new Date(estimate.starts_at.low), new Date(estimate.starts_at.high)];
      const start = (starts[1] - now) / 1000;
      when = start <= 0 ? `should have started by ${clockRange(starts[1], starts[1], now)}`
        : `starts ${rangeInWords((starts[0] - now) / 1000, start)}`;
    } else if (seconds <= 0) {
      return `should have been done by ${clockRange(ends[1], ends[1], now)} (${estimate.based_on})`;
    }
    const by = clockRange(ends[0], ends[1], now);
    let done;
    if (!estimate.known) done = `done by ${clockRange(ends[1], ends[1], now)} at the latest`;
    else if (when) done = `done by ${by}`;
    else done = `done ${rangeInWords((ends[0] - now) / 1000, seconds)}, by ${by}`;
    return when ? `${when}, ${done} (${estimate.based_on})` : `${done} (${estimate.based_on})`;
  };
})();
