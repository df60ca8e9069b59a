// Experiments table: the address is the saved view (search, filters, sort); "Copy link" puts it on the clipboard.
(function () {
  const button = document.getElementById("copy-view");
  const status = document.getElementById("copy-view-status");
  if (!button) return;
  button.addEventListener("click", async () => {
    const url = location.href;
    try {
      await navigator.clipboard.writeText(url);
      status.textContent = "Link copied.";
    } catch (error) {
      // No clipboard (an insecure origin, a denied permission): show the address to copy by hand.
      status.textContent = url;
    }
  });
  // Changing a select applies the view at once; the text fields apply with Enter or the button.
  for (const select of document.querySelectorAll("#experiment-filters select")) {
    select.addEventListener("change", () => select.form.requestSubmit());
  }
})();
