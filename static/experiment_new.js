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
      if (!source || key === "name") continue;
      if (field.type === "checkbox") field.checked = source.checked;
      else field.value = source.value;
    }
  }

  // A new block (the server-rendered template under a fresh prefix) holding `from`'s values bar the name.
  function insertCandidate(from) {
    const index = Number(counter.value);
    const html = template.innerHTML.replaceAll("cand-__prefix__", "cand-" + index);
    template.insertAdjacentHTML("beforebegin", html);
    counter.value = String(index + 1);
    const added = template.previousElementSibling;
    if (from && added) copyValues(from, added);
    // Its engine's fields alone (the engine script below listens for this).
    added?.querySelector('select[name$="-engine"]')?.dispatchEvent(new Event("change", { bubbles: true }));
    return added;
  }

  function addCandidate() {
    const blocks = container.querySelectorAll("fieldset.candidate");
    const added = insertCandidate(blocks.length ? blocks[blocks.length - 1] : null);
    added?.querySelector('[name$="-name"]')?.focus();
  }

  // The sweep's candidates replace the blocks: each a copy of the first block (the one the sweep varied) with the
  // values the sweep gives it. The submission checks every block as usual.
  container.addEventListener("sweep:use", function (event) {
    const blocks = Array.from(container.querySelectorAll("fieldset.candidate"));
    if (!blocks.length) return;
    for (const values of event.detail.candidates) {
      const added = insertCandidate(blocks[0]);
      for (const [key, value] of Object.entries(values)) {
        const field = added.querySelector(`[name="${added.dataset.prefix}-${key}"]`);
        if (!field) continue;
        if (field.type === "checkbox") field.checked = Boolean(value);
        else field.value = value === null || value === undefined ? "" : String(value);
      }
    }
    for (const block of blocks) block.remove();
  });

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
// config.json), as a worker last listed them (the JSON API answers from the stored list, with its age in the
// X-Models-Listed-At header; the host's page lists them again). Typing any path still works.
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
          return { models: body, listedAt: response.headers.get("X-Models-Listed-At") };
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
    status.textContent = `Reading the models listed on ${host} …`;
    try {
      const { models, listedAt } = await listing(url);
      if (hostSelect.value !== host) return; // the choice changed meanwhile
      for (const model of models) {
        const option = document.createElement("option");
        option.value = model.path;
        const context = model.max_position_embeddings ? ` · context ${model.max_position_embeddings}` : "";
        option.label = `${model.name}${context}`;
        datalist.append(option);
      }
      const when = listedAt ? ` (as listed ${new Date(listedAt).toLocaleString()})` : "";
      status.textContent = !listedAt
        ? `The models on ${host} have not been listed yet; a member can list them on the host's page.`
        : models.length
          ? `${models.length} model${models.length === 1 ? "" : "s"} on ${host}${when}: the path fields suggest them.`
          : `No model directories found under ${host}'s models root${when}.`;
    } catch (error) {
      if (hostSelect.value === host) status.textContent = `Could not list the models on ${host}: ${error.message}`;
    }
  }

  hostSelect.addEventListener("change", suggest);
  suggest();
})();

// Sweep: preview the grid of candidates the value lists give (same-origin POST of this page's own form data, checked
// by the server's sweep form), then let its candidates replace the candidate blocks. Every value shown comes from the
// server's answer and is written with textContent.
(function () {
  const sweepForm = document.getElementById("sweep-form");
  const experimentForm = document.getElementById("experiment-form");
  const panel = document.getElementById("sweep");
  const container = document.getElementById("candidates");
  const useButton = document.getElementById("sweep-use");
  const status = document.getElementById("sweep-status");
  const result = document.getElementById("sweep-result");
  if (!sweepForm || !experimentForm || !panel || !container || !useButton || !status || !result) return;
  let grid = null; // the last valid preview's candidates

  function formatDuration(seconds) {
    if (seconds < 60) return "under a minute";
    const minutes = Math.round(seconds / 60);
    if (minutes < 60) return `${minutes} min`;
    return `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
  }

  function cell(row, text) {
    const td = document.createElement("td");
    td.textContent = text === null || text === undefined ? "" : String(text);
    row.append(td);
  }

  function clear() {
    grid = null;
    useButton.hidden = true;
    for (const id of ["sweep-errors", "sweep-notes"]) document.getElementById(id).replaceChildren();
    for (const id of ["sweep-candidates", "sweep-skipped"]) {
      document.querySelector(`#${id} tbody`).replaceChildren();
      document.getElementById(id).hidden = true;
    }
    document.getElementById("sweep-summary").textContent = "";
    for (const label of panel.querySelectorAll(".field.has-error")) label.classList.remove("has-error");
    for (const span of panel.querySelectorAll(".field .error")) span.remove();
  }

  function showErrors(errors) {
    const list = document.getElementById("sweep-errors");
    for (const [key, messages] of Object.entries(errors || {})) {
      const input = key.startsWith("sweep.") ? document.getElementById(`id_sweep-${key.slice(6)}`) : null;
      for (const message of messages) {
        if (input) {
          const span = document.createElement("span");
          span.className = "error";
          span.textContent = message;
          input.closest(".field")?.append(span);
          input.closest(".field")?.classList.add("has-error");
        }
        const item = document.createElement("li");
        const where = key.replace(/^sweep\.base\./, "first candidate: ").replace(/^sweep\.?/, "sweep: ");
        item.textContent = `${where.replace(/_/g, " ")} ${message}`;
        list.append(item);
      }
    }
  }

  function show(data, ok) {
    clear();
    result.hidden = false;
    if (!ok) showErrors(data.errors || { sweep: [data.detail || "The preview failed."] });
    for (const note of data.notes || []) {
      const item = document.createElement("li");
      item.textContent = note;
      document.getElementById("sweep-notes").append(item);
    }
    const candidates = data.candidates || [];
    const rows = document.querySelector("#sweep-candidates tbody");
    for (const candidate of candidates) {
      const row = document.createElement("tr");
      cell(row, candidate.name);
      cell(row, candidate.speculative_num_steps);
      cell(row, candidate.speculative_eagle_topk);
      cell(row, candidate.speculative_num_draft_tokens);
      rows.append(row);
    }
    document.getElementById("sweep-candidates").hidden = !candidates.length;
    const skipped = data.skipped || [];
    const skippedRows = document.querySelector("#sweep-skipped tbody");
    for (const entry of skipped) {
      const row = document.createElement("tr");
      cell(row, entry.label);
      cell(row, entry.replaced_by ? `${entry.reason}: runs as ${entry.replaced_by}` : entry.reason);
      skippedRows.append(row);
    }
    document.getElementById("sweep-skipped").hidden = !skipped.length;
    if (!ok) return;
    document.getElementById("sweep-summary").textContent =
      `${candidates.length} candidate${candidates.length === 1 ? "" : "s"}, ${skipped.length} left out · ` +
      `${data.launches} launches (the baseline and ${candidates.length} candidates, ` +
      `${data.launches_per_config} launch${data.launches_per_config === 1 ? "" : "es"} each) · about ` +
      `${formatDuration(data.estimated_seconds)} (${formatDuration(data.seconds_per_launch)} per launch: ` +
      `${data.estimate_basis}) · profile: ${data.profile}`;
    grid = candidates.map((candidate) => candidate.form);
    useButton.hidden = false;
  }

  sweepForm.addEventListener("submit", async function (event) {
    event.preventDefault();
    const body = new FormData(experimentForm); // the host, the candidate blocks, the profile, the CSRF token
    for (const [key, value] of new FormData(sweepForm)) body.append(key, value);
    const base = container.querySelector("fieldset.candidate");
    if (base) body.append("sweep-base", base.dataset.prefix);
    status.textContent = "Previewing …";
    try {
      const response = await fetch(sweepForm.action, {
        method: "POST",
        body,
        credentials: "same-origin",
        headers: { Accept: "application/json", "X-CSRFToken": body.get("csrfmiddlewaretoken") || "" },
      });
      const data = await response.json().catch(() => ({ detail: `HTTP ${response.status}` }));
      status.textContent = "";
      show(data, response.ok);
    } catch (error) {
      status.textContent = `The preview failed: ${error.message}`;
    }
  });

  useButton.addEventListener("click", function () {
    if (!grid) return;
    const count = grid.length;
    container.dispatchEvent(new CustomEvent("sweep:use", { detail: { candidates: grid } }));
    clear();
    result.hidden = true;
    status.textContent = `${count} candidate${count === 1 ? "" : "s"} from the sweep replace the candidate blocks: ` +
      "review them and submit the experiment.";
    container.scrollIntoView({ block: "start" });
  });

  // A preview describes the inputs it was made from: once they change, its candidates are not offered any more.
  function stale(event) {
    const first = container.querySelector("fieldset.candidate");
    if (!grid || !(panel.contains(event.target) || first?.contains(event.target))) return;
    grid = null;
    useButton.hidden = true;
    status.textContent = "Changed since the preview: preview again.";
  }
  document.addEventListener("input", stale);
  document.addEventListener("change", stale);
})();

// Saved configs and profiles: each config block's "Load a saved config…" box (and the profile's "Load a saved
// profile…") searches the stored ones on this site as the user types, offers the matches in its datalist, and fills
// the block's boxes with the one picked. A picked config also fills the block's hidden source_config: submitted
// unchanged, the stored config is reused; changed, it is saved as a new version linked to the stored one. So that a
// changed config does not pass for the stored one by its name, the first change renames the block to the version
// name the server proposes ("eagle3-2step v2"), unless the user has typed a name of their own. Every value from the
// server is written with textContent or as a field value, never as markup.
(function () {
  const form = document.getElementById("experiment-form");
  if (!form) return;
  const sourcesScript = document.getElementById("config-sources");
  const pickers = new WeakMap(); // picker input -> {found: Map(option value -> item), asked, timer}
  const sources = new WeakMap(); // block -> {name, versionName, renamed} of the stored config it was loaded from

  const blockOf = (element) => element.closest("[data-form-block]");
  const fieldOf = (block, key) => block.querySelector(`[name="${block.dataset.formBlock}-${key}"]`);
  const keyOf = (block, field) =>
    field.name && field.name.startsWith(block.dataset.formBlock + "-")
      ? field.name.slice(block.dataset.formBlock.length + 1) : null;

  function say(block, text) {
    const status = block.querySelector(".saved-status");
    if (status) status.textContent = text;
  }

  function fill(block, values) {
    for (const [key, value] of Object.entries(values)) {
      const field = fieldOf(block, key);
      if (!field) continue;
      if (field.type === "checkbox") field.checked = Boolean(value);
      else field.value = value === null || value === undefined ? "" : String(value);
    }
  }

  function remember(block, config) {
    sources.set(block, { name: config.name, versionName: config.version_name, renamed: false });
    say(block, `From the stored config ${config.name} (${config.short_hash}): submitted unchanged, it is reused; ` +
      "a change makes a new version of it.");
  }

  const kinds = {
    config: {
      items: (body) => body.configs || [],
      option: (c) => `${c.name} · ${c.short_hash} · #${c.id}`,
      label: (c) => {
        const spec = c.speculative_algorithm
          ? `${c.speculative_algorithm} ${[c.speculative_num_steps, c.speculative_eagle_topk, c.speculative_num_draft_tokens]
            .map((n) => (n === null ? "auto" : n)).join("/")}`
          : "no speculation";
        return `${spec} · tp ${c.tp_size} · ${c.created_by || "—"} ${c.created_at.slice(0, 10)}`;
      },
      load: (block, c) => {
        fill(block, c.form);
        remember(block, c);
        // The engine and method just filled decide which settings the block shows (the script below); not a
        // "change", which would read as the user's edit of the loaded config.
        block.querySelector('select[name$="-engine"]')?.dispatchEvent(new Event("fields:refresh", { bubbles: true }));
      },
    },
    profile: {
      items: (body) => body.profiles || [],
      option: (p) => `${p.name} · #${p.id}`,
      label: (p) => p.summary,
      load: (block, p) => {
        fill(block, p.form);
        say(block, `Filled from the stored profile ${p.name}; the experiment saves its own copy.`);
      },
    },
  };
  const kindOf = (input) => (input.classList.contains("saved-config") ? kinds.config
    : input.classList.contains("saved-profile") ? kinds.profile : null);

  async function search(input, kind) {
    const picker = pickers.get(input);
    const ticket = ++picker.asked;
    const url = new URL(input.dataset.search, window.location.href);
    url.searchParams.set("q", input.value.trim());
    try {
      const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      const items = kind.items(await response.json());
      if (ticket !== picker.asked) return; // a newer search answers instead
      const list = document.getElementById(input.getAttribute("list"));
      picker.found = new Map();
      const options = items.map((item) => {
        const option = document.createElement("option");
        option.value = kind.option(item);
        option.label = kind.label(item);
        picker.found.set(option.value, item);
        return option;
      });
      list?.replaceChildren(...options);
      if (!items.length) say(blockOf(input), "Nothing stored matches.");
    } catch (error) {
      if (ticket === picker.asked) say(blockOf(input), `The search failed: ${error.message}`);
    }
  }

  function picked(input) {
    const kind = kindOf(input);
    if (!kind) return false;
    if (!pickers.has(input)) pickers.set(input, { found: new Map(), asked: 0, timer: null });
    const picker = pickers.get(input);
    const item = picker.found.get(input.value);
    if (item) {
      // A search still pending from the typing before the pick would answer "Nothing stored matches." for the
      // picked option's text: cancel it and drop any answer in flight.
      clearTimeout(picker.timer);
      picker.asked += 1;
      const block = blockOf(input);
      kind.load(block, item);
      // What depends on the block's values (the sweep's preview) learns that they changed.
      input.dispatchEvent(new Event("change", { bubbles: true }));
      return true;
    }
    clearTimeout(picker.timer);
    picker.timer = setTimeout(() => search(input, kind), 200);
    return true;
  }

  // A change to a block loaded from a stored config: rename it to the new version's name, once.
  function changed(event) {
    const block = blockOf(event.target);
    const source = block && sources.get(block);
    const key = source ? keyOf(block, event.target) : null;
    if (!key || key === "source_config" || source.renamed) return;
    source.renamed = true;
    const name = fieldOf(block, "name");
    if (key === "name" || !name || name.value !== source.name) return; // the user named it
    name.value = source.versionName;
    say(block, `Changed: saved as ${source.versionName}, a new version of ${source.name} (rename it as you like).`);
  }

  form.addEventListener("input", function (event) {
    if (!picked(event.target)) changed(event);
  });
  form.addEventListener("change", changed);
  // The newest stored ones are offered as soon as a box is entered, before anything is typed.
  form.addEventListener("focusin", function (event) {
    const kind = kindOf(event.target);
    if (kind && !pickers.has(event.target)) {
      pickers.set(event.target, { found: new Map(), asked: 0, timer: null });
      search(event.target, kind);
    }
  });

  // Blocks the server filled from stored configs ("Duplicate & edit") behave as if they had been picked.
  const filled = sourcesScript ? JSON.parse(sourcesScript.textContent) || {} : {};
  for (const [prefix, config] of Object.entries(filled)) {
    const block = form.querySelector(`[data-form-block="${CSS.escape(prefix)}"]`);
    if (block) remember(block, config);
  }
})();

// The engine of a config block: show the launch settings that engine takes (each field lists its engines in
// data-engines, from experiments/rules/launch_fields.py) and its methods alone; the others are emptied as they are
// hidden, so a block never posts a setting its engine has no use for. A method's own settings (data-methods) show
// only while one of their methods is chosen, and are emptied likewise. Without this script every field shows, and
// the form refuses another engine's or another method's setting with a message that names it.
(function () {
  const form = document.getElementById("experiment-form") || document.querySelector("form");
  if (!form) return;

  function apply(select) {
    const block = select.closest(".engine-fields");
    if (!block) return;
    const engine = select.value || "sglang";
    const label = select.options[select.selectedIndex]?.text || engine;
    for (const field of block.querySelectorAll("[data-engines]")) {
      const wrapper = field.closest(".field");
      const shown = field.dataset.engines.split(" ").includes(engine);
      if (wrapper) wrapper.hidden = !shown;
      if (!shown && field.tagName !== "SELECT") field.value = "";
    }
    const method = block.querySelector('select[name$="-speculative_algorithm"]');
    if (!method) return;
    for (const group of method.querySelectorAll("optgroup")) {
      const own = group.label === label;
      group.hidden = !own;
      for (const option of group.querySelectorAll("option")) option.disabled = !own;
    }
    if (method.selectedOptions[0]?.disabled) method.value = "";
    showMethodFields(block, engine, method.value);
  }

  function showMethodFields(block, engine, chosen) {
    for (const field of block.querySelectorAll("[data-methods]")) {
      const wrapper = field.closest(".field");
      const shown = field.dataset.engines.split(" ").includes(engine) && field.dataset.methods.split(" ").includes(chosen);
      if (wrapper) wrapper.hidden = !shown;
      if (!shown) field.value = "";
    }
  }

  form.addEventListener("change", function (event) {
    if (event.target.matches?.('select[name$="-engine"]')) apply(event.target);
    if (event.target.matches?.('select[name$="-speculative_algorithm"]')) {
      const block = event.target.closest(".engine-fields");
      const engine = block?.querySelector('select[name$="-engine"]');
      if (engine) apply(engine);
    }
  });
  form.addEventListener("fields:refresh", function (event) {
    if (event.target.matches?.('select[name$="-engine"]')) apply(event.target);
  });
  for (const select of form.querySelectorAll('select[name$="-engine"]')) apply(select);
})();
