// Run page: keyboard shortcuts of the log viewer. They press the viewer's own buttons, so a key and a click do
// the same thing; `?` shows the list. Keys typed into a field, or with Ctrl/Alt/Meta, are left alone.
(function () {
  const help = document.getElementById("shortcuts");
  const filter = document.getElementById("log-filter");
  if (!help || !filter) return;
  const press = (id) => document.getElementById(id)?.click();

  function showHelp(show) {
    help.hidden = !show;
    if (show) document.getElementById("shortcuts-close").focus();
  }

  const actions = {
    "/": () => { filter.focus(); filter.select(); },
    n: () => press("next-error"),
    p: () => press("prev-error"),
    G: () => press("jump-bottom"),
    "?": () => showHelp(help.hidden),
  };

  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && !help.hidden) {
      showHelp(false);
      document.getElementById("shortcuts-button").focus();
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey || event.isComposing) return;
    const target = event.target;
    if (target.closest && target.closest("input, textarea, select, [contenteditable]")) return;
    const action = actions[event.key];
    if (!action) return;
    event.preventDefault(); // "/" would open the browser's quick find
    action();
  });
  document.getElementById("shortcuts-button").addEventListener("click", () => showHelp(true));
  document.getElementById("shortcuts-close").addEventListener("click", () => showHelp(false));
  help.addEventListener("click", (event) => { if (event.target === help) showHelp(false); });
})();
