// Browser notifications while a specdash page is open: once the user has allowed them (the button on the
// Notifications page asks), every page listens on the user's channel and shows what arrives.
(function () {
  "use strict";
  if (!("Notification" in window) || !("WebSocket" in window)) return;

  const button = document.getElementById("enable-browser-notifications");
  const status = document.getElementById("browser-notifications-status");
  function showStatus() {
    if (!status) return;
    status.textContent = {
      granted: "This browser shows specdash notifications while a specdash page is open.",
      denied: "This browser blocks specdash notifications; allow them in its site settings.",
      default: "This browser has not been asked yet.",
    }[Notification.permission];
    if (button) button.hidden = Notification.permission !== "default";
  }
  if (button) {
    button.addEventListener("click", function () {
      Notification.requestPermission().then(function () {
        showStatus();
        listen();
      });
    });
  }
  showStatus();

  let socket = null;
  let delay = 1000;
  function listen() {
    if (Notification.permission !== "granted" || socket) return;
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    socket = new WebSocket(`${scheme}://${location.host}/ws/notifications/`);
    socket.onopen = function () { delay = 1000; };
    socket.onmessage = function (event) {
      const data = JSON.parse(event.data);
      if (data.type !== "notification") return;
      document.dispatchEvent(new CustomEvent("specdash:notification", { detail: data }));
      // One notification per message however many tabs are open: the tag replaces a duplicate.
      const shown = new Notification(data.title, { body: data.body, tag: data.url });
      shown.onclick = function () {
        const target = new URL(data.url, location.href);
        window.focus();
        location.assign(target.pathname + target.search + target.hash);  // stays on this site
      };
    };
    socket.onclose = function (event) {
      socket = null;
      if (event.code === 4403) return;  // not allowed: do not knock again
      setTimeout(listen, delay);
      delay = Math.min(delay * 2, 30000);
    };
  }
  listen();
})();
