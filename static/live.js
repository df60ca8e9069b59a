// A websocket that reconnects with back-off and lets the caller say where to resume (used by every live page).
window.specdashSocket = function (path, { onMessage, resumeQuery }) {
  let delay = 500;
  let socket = null;
  function connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const query = resumeQuery ? resumeQuery() : "";
    socket = new WebSocket(`${scheme}://${location.host}${path}${query}`);
    socket.onopen = () => { delay = 500; document.body.dataset.live = "on"; };
    socket.onmessage = (event) => onMessage(JSON.parse(event.data));
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
