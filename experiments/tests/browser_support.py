"""What several browser tests need of a page."""

# Keeps the page's websockets reachable, so a test can drop them (the page then reconnects, as after a network
# blip): `page.add_init_script(KEEP_SOCKETS)`, then `page.evaluate(DROP_SOCKETS)`.
KEEP_SOCKETS = """
window.__sockets = [];
const PageSocket = window.WebSocket;
window.WebSocket = function (...args) {
  const socket = new PageSocket(...args);
  window.__sockets.push(socket);
  return socket;
};
"""
DROP_SOCKETS = "window.__sockets.forEach((socket) => socket.close())"
