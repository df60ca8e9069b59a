// New experiment form: add and remove candidate blocks. Each block gets a fresh prefix (cand-N); the server
// skips numbers of removed blocks, so nothing here has to renumber. A new block starts as a copy of the last
// one (candidates usually differ in one or two values), but with an empty name, which each needs its own.
(function () {
  const container = document.getElementById("candidates");
  const template = document.getElementById("candidate-template");
  const counter = document.getElementById("candidate-count");
  if (!container || !template || !counter) return;

  function copyValues(from, to) {
    const prefixOf = (block) => block.dataset.prefix + "-";
    for (const field of to.querySelectorAll("input[name], select[name], textarea[name]")) {
      const key = field.name.slice(prefixOf(to).length);
      const source = from.querySelector(`[name="${prefixOf(from)}${key}"]`);
      if (source && key !== "name") field.value = source.value;
    }
  }

  function addCandidate() {
    const blocks = container.querySelectorAll("fieldset.candidate");
    const last = blocks.length ? blocks[blocks.length - 1] : null;
    const index = Number(counter.value);
    const html = template.innerHTML.replaceAll("cand-__prefix__", "cand-" + index);
    template.insertAdjacentHTML("beforebegin", html);
    counter.value = String(index + 1);
    const added = template.previousElementSibling;
    if (last && added) copyValues(last, added);
    added?.querySelector('[name$="-name"]')?.focus();
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

// Model paths: suggest the model directories on the chosen host (those under its models root holding a
// config.json), listed by a worker over SSH through the JSON API. Typing any path still works.
(function () {
  const urlsScript = document.getElementById("host-models-urls");
  const hostSelect = document.getElementById("id_experiment-host");
  const datalist = document.getElementById("host-models");
  const status = document.getElementById("host-models-status");
  if (!urlsScript || !hostSelect || !datalist || !status) return;
  const urls = JSON.parse(urlsScript.textContent);
  const listings = new Map(); // url -> Promise of the models (each host is asked once per page)

  function listing(url) {
    if (!listings.has(url)) {
      listings.set(url, fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(async (response) => {
          const body = await response.json().catch(() => ({}));
          if (!response.ok) throw new Error(body.detail || `HTTP ${response.status}`);
          return body;
        }));
    }
    return listings.get(url);
  }

  async function suggest() {
    const host = hostSelect.value;
    const url = urls[host];
    datalist.replaceChildren();
    status.textContent = "";
    if (!url) return;
    status.textContent = `Listing the models on ${host} …`;
    try {
      const models = await listing(url);
      if (hostSelect.value !== host) return; // the choice changed meanwhile
      for (const model of models) {
        const option = document.createElement("option");
        option.value = model.path;
        const context = model.max_position_embeddings ? ` · context ${model.max_position_embeddings}` : "";
        option.label = `${model.name}${context}`;
        datalist.append(option);
      }
      status.textContent = models.length
        ? `${models.length} model${models.length === 1 ? "" : "s"} on ${host}: the path fields suggest them.`
        : `No model directories found under ${host}'s models root.`;
    } catch (error) {
      if (hostSelect.value === host) status.textContent = `Could not list the models on ${host}: ${error.message}`;
    }
  }

  hostSelect.addEventListener("change", suggest);
  suggest();
})();
