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
