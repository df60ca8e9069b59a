// Every page: on a narrow screen the navigation folds behind the menu button.
(function () {
  const button = document.getElementById("menu-button");
  if (!button) return;
  const bar = button.closest(".topbar");
  button.addEventListener("click", () => {
    const open = bar.classList.toggle("open");
    button.setAttribute("aria-expanded", String(open));
  });
})();
