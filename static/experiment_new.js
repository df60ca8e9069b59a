// New experiment form: add and remove candidate blocks. Each block gets a fresh prefix (cand-N); the server
// skips numbers of removed blocks, so nothing here has to renumber.
(function () {
  const container = document.getElementById("candidates");
  const template = document.getElementById("candidate-template");
  const counter = document.getElementById("candidate-count");
  if (!container || !template || !counter) return;

  function addCandidate() {
    const index = Number(counter.value);
    const html = template.innerHTML.replaceAll("cand-__prefix__", "cand-" + index);
    template.insertAdjacentHTML("beforebegin", html);
    counter.value = String(index + 1);
  }

  container.addEventListener("click", function (event) {
    const target = event.target;
    if (target.id === "add-candidate") addCandidate();
    if (target.classList.contains("remove-candidate")) {
      const blocks = container.querySelectorAll("fieldset.candidate");
      if (blocks.length > 1) target.closest("fieldset.candidate").remove();
    }
  });
})();
