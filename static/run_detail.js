// Run page: a log viewer over every line of the server log, the run's state and its live facts.
//
// Lines live in JS arrays, never all in the DOM: the log box holds a spacer as tall as all the (filtered) lines
// and only the rows in view are drawn, at a fixed row height. The websocket resumes after the last line held,
// so a reconnect neither loses nor repeats lines. Data-driven redraws are coalesced to ~10 per second; scrolling
// redraws on the next frame. A filter over a million lines runs in time-boxed slices so the page stays usable.
//
// The benchmark client scrapes the server's /metrics four times a second, and uvicorn logs each scrape: runs of
// two or more such access lines in a row are one row in the unfiltered view ("N /metrics scrapes (folded)"),
// opened and closed by a click. Folding is only a view: every line stays held, numbered and downloadable, a filter
// searches and shows them one by one, and jumping to a folded line opens its fold.
(function () {
  "use strict";
  const logBox = document.getElementById("log");
  if (!logBox) return;

  const ROW = 17; // px per line, fixed (the CSS row height comes from --log-row)
  const OVERSCAN = 30; // rows drawn above and below the viewport, so a native scroll never shows a gap
  const MAX_PX = 15000000; // browsers cap element heights (Firefox near 17.9M px); beyond it scrolling is scaled
  const FRAME_MS = 100; // at most ~10 data-driven redraws per second
  const FILTER_SLICE_MS = 12;
  const KEEP_POINTS = 300; // facts kept per series, as the server keeps them

  // Line kinds, classified once when a line arrives (a traceback needs the lines before it).
  const PLAIN = 0, WARN = 1, ERROR = 2, TRACE = 3, TRACE_ERROR = 4;
  const KIND_CLASS = ["", "warn-line", "error-line", "trace-line", "trace-line error-line"];
  const TRACE_HEAD = /Traceback \(most recent call last\)/;
  const ERROR_LINE = /Scheduler hit an exception|CUDA out of memory|CUDA error|\bERROR\b|\w*(?:Error|Exception)\b|Received sigquit/;
  const WARN_LINE = /\bWARN(?:ING)?\b|\w*Warning\b/;
  const STAMPED = /^\[\d{4}-\d\d-\d\d[ T]/; // a new log record; a traceback's frames are not stamped
  const RANK = /^\[[^\]]*?\bTP(\d+)\b[^\]]*\]/;
  const SCRAPE = /"GET \/metrics(?:\?[^" ]*)? HTTP\/[\d.]+" 2\d\d\b/; // a successful scrape's access line

  const $ = (id) => document.getElementById(id);
  const rowsBox = $("log-rows");
  const spacer = $("log-spacer");
  const follow = $("follow");
  const lineCount = $("line-count");
  const matchCount = $("match-count");
  const filterInput = $("log-filter");
  const regexToggle = $("log-regex");
  const filterError = $("log-filter-error");
  const jumpBottom = $("jump-bottom");
  const newLines = $("new-lines");
  const firstErrorButton = $("jump-error");
  const nextErrorButton = $("next-error");
  const prevErrorButton = $("prev-error");
  const failureButton = $("jump-failure");
  logBox.style.setProperty("--log-row", `${ROW}px`);

  // ---- the lines ------------------------------------------------------------------------------------------
  const lines = [];
  let kinds = new Uint8Array(1 << 16);
  let scrapes = new Uint8Array(1 << 16); // 1: the line is a /metrics scrape's access line
  let base = 1; // line number of lines[0]
  let lastLine = 0;
  let inTraceback = false;
  const errorStarts = []; // indices of the first line of each error block (a traceback or a lone error line)

  function classify(index, text) {
    let kind = PLAIN;
    if (TRACE_HEAD.test(text)) {
      kind = ERROR;
      inTraceback = true;
      errorStarts.push(index);
    } else if (inTraceback && !STAMPED.test(text)) {
      kind = ERROR_LINE.test(text) ? TRACE_ERROR : TRACE;
    } else {
      inTraceback = false;
      if (ERROR_LINE.test(text)) {
        kind = ERROR;
        errorStarts.push(index);
      } else if (WARN_LINE.test(text)) {
        kind = WARN;
      }
    }
    if (index >= kinds.length) {
      const grown = new Uint8Array(kinds.length * 2);
      grown.set(kinds);
      kinds = grown;
      const grownScrapes = new Uint8Array(grown.length);
      grownScrapes.set(scrapes);
      scrapes = grownScrapes;
    }
    kinds[index] = kind;
    // The substring test first: most lines are not scrapes, and includes() is far cheaper than the regex.
    scrapes[index] = kind === PLAIN && text.includes("/metrics") && SCRAPE.test(text) ? 1 : 0;
  }

  function ingest(first, texts) {
    if (!lines.length && lastLine === 0) {
      base = first;
      lastLine = first - 1;
    }
    for (let i = 0; i < texts.length; i++) {
      const n = first + i;
      if (n <= lastLine) continue;
      // The server never leaves a gap; if one ever appeared, blank lines keep every number where it belongs.
      while (lastLine + 1 < n) append("");
      append(texts[i]);
    }
    if (matches) scheduleFilter();
    if (pendingJump && lastLine >= pendingJump) {
      const n = pendingJump;
      pendingJump = 0;
      jumpToLine(n);
    }
    renderThrottled();
  }

  function append(text) {
    const index = lines.length;
    classify(index, text);
    lines.push(text);
    lastLine += 1;
    addToView(index);
  }

  // ---- the unfiltered view: line indices, and folds of consecutive scrape lines ---------------------------
  // An entry >= 0 is a line index; -(f + 1) is the row of folds[f] ({start, end}: line indices, inclusive),
  // followed by its lines while it is open. Entries stay in line order, so a line's row is found by bisection.
  let view = [];
  let folds = [];
  const openFolds = new Set(); // start indices of the folds the reader opened (kept across rebuilds)
  let foldTick = 0; // bumped when a fold in the view grows, so its row is redrawn with its new count

  function addToView(index) {
    const tail = folds.length ? folds[folds.length - 1] : null;
    if (!scrapes[index]) {
      view.push(index);
    } else if (tail && tail.end === index - 1) {
      tail.end = index;
      foldTick += 1;
      if (openFolds.has(tail.start)) view.push(index);
    } else if (index > 0 && scrapes[index - 1] && view[view.length - 1] === index - 1) {
      // A lone scrape line followed by another: the two become a fold.
      folds.push({ start: index - 1, end: index });
      view[view.length - 1] = -folds.length;
      if (openFolds.has(index - 1)) view.push(index - 1, index);
    } else {
      view.push(index);
    }
  }

  function rebuildView() {
    view = [];
    folds = [];
    for (let i = 0; i < lines.length; i++) addToView(i);
    viewGeneration += 1;
  }

  const entryStart = (entry) => (entry >= 0 ? entry : folds[-entry - 1].start);

  // The fold that holds line `index`, or null.
  function foldOf(index) {
    let lo = 0, hi = folds.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (folds[mid].start <= index) lo = mid + 1; else hi = mid;
    }
    const fold = lo ? folds[lo - 1] : null;
    return fold && fold.end >= index ? fold : null;
  }

  // The row of line `index` in the unfiltered view (its fold's row while the fold is closed).
  function positionOf(index) {
    let lo = 0, hi = view.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (entryStart(view[mid]) <= index) lo = mid + 1; else hi = mid;
    }
    return Math.max(0, lo - 1);
  }

  function setFoldOpen(fold, open) {
    if (openFolds.has(fold.start) === open) return;
    if (open) openFolds.add(fold.start); else openFolds.delete(fold.start);
    rebuildView(); // the fold's own row keeps its place: only rows after it move
    renderSoon();
  }

  // ---- the view: all lines, or the indices of the matching ones --------------------------------------------
  let matches = null;
  let filterRe = null;
  let filterScanned = 0;
  let filterTimer = null;
  let viewGeneration = 0;

  const viewCount = () => (matches ? matches.length : view.length);
  const entryAt = (v) => (matches ? matches[v] : view[v]);
  // The line a row shows (a fold's: its first); 0 past either end (an empty filter result has no row at all).
  const indexAt = (v) => {
    const entry = entryAt(v);
    return entry === undefined ? 0 : entryStart(entry);
  };

  function lowerBound(sorted, value) {
    let lo = 0, hi = sorted.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (sorted[mid] < value) lo = mid + 1; else hi = mid;
    }
    return lo;
  }

  function escapeRegExp(text) {
    return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  }

  function setFilter(text, asRegex) {
    let re = null;
    if (text) {
      try {
        re = new RegExp(asRegex ? text : escapeRegExp(text), "i");
      } catch (error) {
        // An unfinished regex is normal while typing: say so and keep showing the last valid result.
        filterError.textContent = `Invalid regular expression: ${error.message}`;
        filterError.hidden = false;
        filterInput.setAttribute("aria-invalid", "true");
        return;
      }
    }
    filterError.hidden = true;
    filterInput.removeAttribute("aria-invalid");
    if (String(re) === String(filterRe)) return;
    const anchor = lines.length ? indexAt(Math.min(Math.floor(viewTop / ROW), viewCount() - 1)) : 0;
    filterRe = re;
    matches = re ? [] : null;
    filterScanned = 0;
    viewGeneration += 1;
    // Clearing the filter keeps the line that was on top in view (find it filtered, then read around it).
    viewTop = re ? 0 : positionOf(anchor) * ROW;
    scheduleFilter();
    renderSoon();
  }

  function scheduleFilter() {
    if (filterTimer === null && matches && filterScanned < lines.length) filterTimer = setTimeout(runFilter, 0);
  }

  function runFilter() {
    filterTimer = null;
    if (!matches) return;
    const re = filterRe;
    const deadline = performance.now() + FILTER_SLICE_MS;
    let i = filterScanned;
    while (i < lines.length) {
      const stop = Math.min(lines.length, i + 4096);
      for (; i < stop; i++) if (re.test(lines[i])) matches.push(i);
      if (performance.now() > deadline) break;
    }
    filterScanned = i;
    scheduleFilter();
    renderThrottled();
  }

  let filterDebounce = null;
  function onFilterInput() {
    clearTimeout(filterDebounce);
    filterDebounce = setTimeout(() => setFilter(filterInput.value, regexToggle.checked), 150);
  }
  filterInput.addEventListener("input", onFilterInput);
  regexToggle.addEventListener("change", () => setFilter(filterInput.value, regexToggle.checked));
  filterInput.addEventListener("keydown", (event) => {
    if (event.key === "Escape") { filterInput.value = ""; setFilter("", false); }
  });

  // ---- following and scrolling ------------------------------------------------------------------------------
  let following = follow.checked;
  let pausedAtLine = 0;
  let viewTop = 0; // px from the top of the (unscaled) list of rows in view to the top of the viewport
  let shown = { maxScroll: 0, maxVirtual: 0 }; // geometry of the last render, which the scrollbar reflects
  let expectedScrollTop = -1;
  let targetLine = 0;
  let pendingJump = 0;

  function setFollowing(on) {
    if (on === following) return;
    following = on;
    follow.checked = on;
    if (!on) pausedAtLine = lastLine;
    renderSoon();
  }

  follow.addEventListener("change", () => setFollowing(follow.checked));
  jumpBottom.addEventListener("click", () => { targetLine = 0; setFollowing(true); });

  logBox.addEventListener("scroll", () => {
    if (Math.abs(logBox.scrollTop - expectedScrollTop) < 1) return; // our own scroll
    viewTop = shown.maxScroll ? (logBox.scrollTop / shown.maxScroll) * shown.maxVirtual : 0;
    setFollowing(shown.maxScroll - logBox.scrollTop < ROW);
    renderSoon();
  }, { passive: true });
  // A wheel turn upwards is an unmistakable "stop following", even before the scroll position moves.
  logBox.addEventListener("wheel", (event) => { if (event.deltaY < 0) setFollowing(false); }, { passive: true });
  window.addEventListener("resize", () => renderSoon());

  function jumpToLine(n) {
    const index = n - base;
    if (index < 0 || index >= lines.length) {
      pendingJump = n; // still arriving: jump when it is here
      return;
    }
    let v = -1;
    if (matches) {
      const position = lowerBound(matches, index);
      if (filterScanned > index && matches[position] === index) {
        v = position;
      } else {
        filterInput.value = "";
        setFilter("", false);
      }
    }
    if (v < 0) {
      const fold = foldOf(index);
      if (fold) setFoldOpen(fold, true);
      v = positionOf(index);
    }
    targetLine = n;
    setFollowing(false);
    viewTop = Math.max(0, v * ROW - logBox.clientHeight / 3);
    renderSoon();
  }

  firstErrorButton.addEventListener("click", () => {
    if (errorStarts.length) jumpToLine(base + errorStarts[0]);
  });
  nextErrorButton.addEventListener("click", () => {
    if (!errorStarts.length) return;
    const top = targetLine ? targetLine - base : indexAt(Math.floor(viewTop / ROW)) - 1;
    const next = errorStarts[lowerBound(errorStarts, top + 1)];
    jumpToLine(base + (next === undefined ? errorStarts[0] : next));
  });

  prevErrorButton.addEventListener("click", () => {
    if (!errorStarts.length) return;
    const here = targetLine ? targetLine - base : indexAt(Math.floor(viewTop / ROW));
    const previous = lowerBound(errorStarts, here) - 1;
    jumpToLine(base + errorStarts[previous >= 0 ? previous : errorStarts.length - 1]);
  });

  // Permalinks: #L<n> in the address jumps to line n (once it has arrived) and marks it.
  function jumpToHashLine() {
    const found = /^#L(\d+)$/.exec(window.location.hash);
    if (found) jumpToLine(Number(found[1]));
  }
  window.addEventListener("hashchange", jumpToHashLine);

  let failureLine = Number(logBox.dataset.failureLine || 0);
  failureButton.addEventListener("click", () => { if (failureLine) jumpToLine(failureLine); });

  function setFailureLine(n) {
    if (!n || n === failureLine) return;
    failureLine = n;
    logBox.dataset.failureLine = String(n);
    failureButton.hidden = false;
    failureButton.querySelector("span").textContent = n;
    lastKey = "";
    renderSoon();
  }

  // The failure's block: its first line and, for a traceback, every frame and message line after it.
  function failureRange() {
    if (!failureLine) return [-1, -1];
    const start = failureLine - base;
    let end = start;
    while (end + 1 < lines.length && end - start < 2000 && (kinds[end + 1] === TRACE || kinds[end + 1] === TRACE_ERROR)) end++;
    return [start, end];
  }

  // ---- drawing ------------------------------------------------------------------------------------------------
  let renderQueued = false;
  let renderTimer = null;
  let lastRenderAt = 0;
  let lastKey = "";
  let factsDirty = true;

  function renderSoon() {
    if (renderQueued) return;
    renderQueued = true;
    requestAnimationFrame(render);
  }

  function renderThrottled() {
    if (renderQueued || renderTimer !== null) return;
    const wait = Math.max(0, lastRenderAt + FRAME_MS - performance.now());
    renderTimer = setTimeout(() => { renderTimer = null; renderSoon(); }, wait);
  }

  function render() {
    renderQueued = false;
    lastRenderAt = performance.now();
    const count = viewCount();
    const virtualHeight = count * ROW;
    const height = Math.min(virtualHeight, MAX_PX);
    const viewHeight = logBox.clientHeight;
    const maxVirtual = Math.max(0, virtualHeight - viewHeight);
    const maxScroll = Math.max(0, height - viewHeight);
    spacer.style.height = `${height}px`;
    if (following) viewTop = maxVirtual;
    viewTop = Math.min(Math.max(viewTop, 0), maxVirtual);
    const scrollTop = maxVirtual ? Math.round((viewTop / maxVirtual) * maxScroll) : 0;
    if (Math.abs(logBox.scrollTop - scrollTop) >= 1) logBox.scrollTop = scrollTop;
    expectedScrollTop = logBox.scrollTop;
    shown = { maxScroll, maxVirtual };

    const first = Math.floor(viewTop / ROW);
    const start = Math.max(0, first - OVERSCAN);
    const end = Math.min(count, first + Math.ceil(viewHeight / ROW) + 1 + OVERSCAN);
    const key = `${viewGeneration}:${start}:${end}:${failureLine}:${targetLine}:${matches ? 0 : foldTick}:${end === 0 && filterScanned >= lines.length}`;
    if (key !== lastKey) {
      lastKey = key;
      drawRows(start, end);
    }
    // Rows sit where they belong in the scrolled content, so a native scroll moves them until the next draw.
    rowsBox.style.transform = `translateY(${expectedScrollTop - (viewTop - start * ROW)}px)`;
    drawStatus();
    if (factsDirty) drawFacts();
  }

  function drawRows(start, end) {
    const fragment = document.createDocumentFragment();
    const [failStart, failEnd] = failureRange();
    for (let v = start; v < end; v++) {
      const entry = entryAt(v);
      if (entry < 0) {
        fragment.append(foldRow(folds[-entry - 1]));
        continue;
      }
      const index = entry;
      const n = base + index;
      const text = lines[index];
      const row = document.createElement("div");
      row.className = "line";
      const kind = kinds[index];
      if (kind) row.className += ` ${KIND_CLASS[kind]}`;
      if (index >= failStart && index <= failEnd) row.classList.add("failure-line");
      if (n === targetLine) row.classList.add("target-line");
      row.dataset.n = n;
      // The number is the line's permalink (#L<n>): a link a reviewer can copy and send.
      const number = document.createElement("a");
      number.className = "n";
      number.href = `#L${n}`;
      number.textContent = n;
      const rank = document.createElement("span");
      rank.className = "tp";
      const found = RANK.exec(text);
      if (found) {
        rank.textContent = `TP${found[1]}`;
        rank.dataset.rank = found[1];
      }
      const body = document.createElement("span");
      body.className = "t";
      body.append(...highlighted(text));
      row.append(number, rank, body);
      fragment.append(row);
    }
    if (start === end && matches && filterScanned >= lines.length) {
      const empty = document.createElement("div");
      empty.className = "log-empty";
      empty.textContent = "No line matches the filter.";
      fragment.append(empty);
    }
    rowsBox.replaceChildren(fragment);
  }

  // A fold's row: the count, and a button that opens or closes it. It stands for its lines: data-n is its last.
  function foldRow(fold) {
    const row = document.createElement("div");
    row.className = "line log-fold";
    row.dataset.n = base + fold.end;
    row.dataset.first = base + fold.start;
    const number = document.createElement("span");
    number.className = "n";
    const rank = document.createElement("span");
    rank.className = "tp";
    const toggle = document.createElement("button");
    toggle.type = "button";
    toggle.className = "t link fold-toggle";
    const open = openFolds.has(fold.start);
    toggle.setAttribute("aria-expanded", String(open));
    const count = fold.end - fold.start + 1;
    toggle.textContent = `${open ? "▾" : "▸"} ${count} /metrics scrapes (${open ? "click to fold" : "folded"}) · lines ${base + fold.start}–${base + fold.end}`;
    row.append(number, rank, toggle);
    return row;
  }

  rowsBox.addEventListener("click", (event) => {
    const toggle = event.target.closest("button.fold-toggle");
    if (!toggle) return;
    const fold = foldOf(Number(toggle.parentElement.dataset.first) - base);
    if (fold) setFoldOpen(fold, !openFolds.has(fold.start));
  });

  function highlighted(text) {
    const found = filterRe && filterRe.exec(text);
    if (!found || !found[0]) return [document.createTextNode(text)];
    const mark = document.createElement("mark");
    mark.textContent = found[0];
    return [
      document.createTextNode(text.slice(0, found.index)),
      mark,
      document.createTextNode(text.slice(found.index + found[0].length)),
    ];
  }

  function drawStatus() {
    lineCount.textContent = lastLine;
    if (matches) {
      const scanning = filterScanned < lines.length ? ` (filtering ${Math.floor((100 * filterScanned) / lines.length)}%)` : "";
      matchCount.textContent = ` · ${matches.length} matching${scanning}`;
      matchCount.hidden = false;
    } else {
      matchCount.hidden = true;
    }
    jumpBottom.hidden = following;
    const fresh = Math.max(0, lastLine - pausedAtLine);
    newLines.textContent = fresh;
    newLines.parentElement.hidden = fresh === 0;
    jumpBottom.classList.toggle("has-new", fresh > 0);
    firstErrorButton.disabled = nextErrorButton.disabled = prevErrorButton.disabled = errorStarts.length === 0;
    firstErrorButton.querySelector("span").textContent = errorStarts.length ? ` (${errorStarts.length})` : "";
  }

  // ---- live facts ------------------------------------------------------------------------------------------------
  const facts = { decode: [], metrics: {} };
  const DECODE_FORMAT = {
    accept_len: (v) => v.toFixed(2),
    accept_rate: (v) => v.toFixed(2),
    gen_throughput: (v) => `${v.toFixed(1)} tok/s`,
    running_req: (v) => String(v),
    queue_req: (v) => String(v),
    token_usage: (v) => v.toFixed(2),
  };

  // Points are identified by their line number: anything not newer than what is held is a repeat.
  function mergePoints(series, points, lineOf) {
    let last = series.length ? lineOf(series[series.length - 1]) : 0;
    for (const point of points) {
      if (lineOf(point) > last) {
        series.push(point);
        last = lineOf(point);
      }
    }
    if (series.length > KEEP_POINTS) series.splice(0, series.length - KEEP_POINTS);
  }

  function mergeFacts(message) {
    if (!message || typeof message !== "object") return;
    if (Array.isArray(message.decode)) mergePoints(facts.decode, message.decode, (p) => p.n);
    for (const [name, points] of Object.entries(message.metrics || {})) {
      if (!Array.isArray(points)) continue;
      mergePoints(facts.metrics[name] || (facts.metrics[name] = []), points, (p) => p[0]);
    }
    factsDirty = true;
  }

  function drawFacts() {
    factsDirty = false;
    const last = facts.decode[facts.decode.length - 1];
    for (const cell of document.querySelectorAll("#decode-facts [data-fact]")) {
      const value = last ? last[cell.dataset.fact] : null;
      cell.textContent = typeof value === "number" ? DECODE_FORMAT[cell.dataset.fact](value) : "—";
    }
    const at = $("decode-at");
    at.hidden = !last;
    if (last) {
      at.querySelector("button").textContent = `line ${last.n}`;
      at.querySelector("button").dataset.n = last.n;
      // The time of day at the end of the engine's timestamp (SGLang's "YYYY-MM-DD HH:MM:SS", vLLM's "MM-DD HH:MM:SS").
      const time = last.ts ? String(last.ts).match(/\d\d:\d\d:\d\d/) : null;
      at.querySelector("[data-field=ts]").textContent = time ? ` · ${time[0]}` : "";
    }
    drawDecodeChart();
    drawMetrics();
  }

  const SVG = "http://www.w3.org/2000/svg";
  function svgElement(name, attributes) {
    const element = document.createElementNS(SVG, name);
    for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, value);
    return element;
  }

  // A path through the values, each series scaled to its own range (gaps where a value is missing).
  function sparkPath(values, width, height) {
    const finite = values.filter(Number.isFinite);
    if (!finite.length) return "";
    let lo = Math.min(...finite), hi = Math.max(...finite);
    if (hi === lo) { hi += 1; lo -= 1; }
    const step = values.length > 1 ? width / (values.length - 1) : 0;
    const y = (v) => (2 + (height - 4) * (1 - (v - lo) / (hi - lo))).toFixed(1);
    if (values.length === 1) return `M0 ${y(finite[0])} H${width}`;
    let d = "", pen = "M";
    values.forEach((v, i) => {
      if (!Number.isFinite(v)) { pen = "M"; return; }
      d += `${pen}${(i * step).toFixed(1)} ${y(v)} `;
      pen = "L";
    });
    return d;
  }

  function sparkline(seriesList, width, height, label) {
    const svg = svgElement("svg", { viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: "none", role: "img", "aria-label": label, class: "sparkline" });
    for (const { values, className } of seriesList) {
      const d = sparkPath(values, width, height);
      if (d) svg.append(svgElement("path", { d, class: className, "vector-effect": "non-scaling-stroke" }));
    }
    return svg;
  }

  function range(values) {
    const finite = values.filter(Number.isFinite);
    return finite.length ? `${Math.min(...finite).toFixed(1)}–${Math.max(...finite).toFixed(1)}` : "—";
  }

  function drawDecodeChart() {
    const box = $("decode-chart");
    const throughput = facts.decode.map((p) => p.gen_throughput);
    const acceptLen = facts.decode.map((p) => (p.accept_len === null ? NaN : p.accept_len));
    box.hidden = facts.decode.length === 0;
    if (box.hidden) return;
    $("decode-svg").replaceChildren(sparkline(
      [{ values: throughput, className: "series-throughput" }, { values: acceptLen, className: "series-accept" }],
      240, 64, `gen throughput and accept length over the last ${facts.decode.length} decode batches`,
    ));
    $("decode-legend-throughput").textContent = range(throughput);
    $("decode-legend-accept").textContent = range(acceptLen);
  }

  function drawMetrics() {
    const list = $("metric-facts");
    const names = Object.keys(facts.metrics).sort();
    $("metrics-heading").hidden = list.hidden = names.length === 0;
    list.replaceChildren(...names.map((name) => {
      const points = facts.metrics[name];
      const item = document.createElement("li");
      item.dataset.metric = name;
      const title = document.createElement("span");
      title.className = "metric-name";
      title.textContent = name;
      const value = document.createElement("strong");
      value.className = "metric-value";
      const lastPoint = points[points.length - 1];
      value.textContent = lastPoint ? formatNumber(lastPoint[1]) : "—";
      item.append(title, value, sparkline([{ values: points.map((p) => p[1]), className: "series-metric" }], 240, 28, `${name} over the last ${points.length} points`));
      return item;
    }));
  }

  function formatNumber(v) {
    if (typeof v !== "number") return String(v);
    return Math.abs(v) >= 100 ? v.toFixed(1) : Number(v.toPrecision(4)).toString();
  }

  $("decode-at").querySelector("button").addEventListener("click", (event) => {
    jumpToLine(Number(event.currentTarget.dataset.n));
  });

  const initialFacts = $("run-facts");
  if (initialFacts) {
    try { mergeFacts(JSON.parse(initialFacts.textContent)); } catch (error) { /* no facts yet */ }
  }

  // ---- run state ---------------------------------------------------------------------------------------------------
  // The estimate as of the last state (null once the run has ended), worded again as time passes.
  const estimateData = $("run-estimate-data");
  let estimate = estimateData ? JSON.parse(estimateData.textContent) : null;
  function showEstimate() {
    const line = $("run-estimate");
    if (!line) return;
    line.hidden = !estimate;
    if (estimate) line.querySelector('[data-field="estimate"]').textContent = window.specdashEstimateText(estimate);
  }
  if ($("run-estimate")) setInterval(showEstimate, 5000);

  function onState(message) {
    // Out of the queue, its place in it is history; in it, the place may have moved up.
    const standing = $("queue-standing");
    if (standing && (message.state !== "queued" || !message.queue)) standing.remove();
    else if (standing) {
      standing.querySelector('[data-field="position"]').textContent = message.queue.position;
      standing.querySelector('[data-field="waiting-for"]').textContent = message.queue.waiting_for;
    }
    if ("estimate" in message) {
      estimate = message.estimate;
      showEstimate();
    }
    const state = $("run-state");
    state.textContent = message.state;
    state.className = `state state-${message.state}`;
    const phase = $("fact-phase");
    phase.textContent = message.state;
    phase.className = `state state-${message.state}`;
    const current = message.phases && message.phases[message.phases.length - 1];
    $("fact-phase-since").textContent = current ? `since ${current.at.slice(11, 19)}` : "";
    const server = message.server_facts || { shown: {} };
    const benchmark = $("benchmark-progress");
    benchmark.hidden = !message.benchmark_progress;
    benchmark.querySelector("[data-field]").textContent = message.benchmark_progress ? message.benchmark_progress.label : "";
    const bars = $("loading-progress");
    bars.hidden = !(message.state === "loading" && message.loading_progress !== null);
    setBar("target", message.loading_progress);
    setBar("draft", server.draft_progress);
    for (const cell of document.querySelectorAll("#server-facts [data-server]")) {
      cell.textContent = server.shown[cell.dataset.server] || "—";
    }
    const retraction = $("last-retraction");
    retraction.textContent = server.last_retraction || "";
    retraction.hidden = !server.last_retraction;
    const timeline = $("timeline");
    timeline.innerHTML = "";
    for (const entry of message.phases || []) {
      const item = document.createElement("li");
      const badge = document.createElement("span");
      badge.className = `state state-${entry.state}`;
      badge.textContent = entry.state;
      const duration = entry.duration_s === null ? "" : ` · ${entry.duration_s.toFixed(1)} s`;
      item.append(badge, document.createTextNode(` ${entry.at.slice(11, 19)}${duration}`));
      timeline.append(item);
    }
    renderWarnings(message.warnings);
    if (message.failure) {
      const box = $("failure");
      box.hidden = false;
      box.querySelector('[data-field="kind"]').textContent = message.failure.kind;
      box.querySelector('[data-field="message"]').textContent = message.failure.message;
      const excerpt = box.querySelector('[data-field="excerpt"]');
      excerpt.textContent = message.failure.excerpt;
      excerpt.hidden = !message.failure.excerpt;
      setFailureLine(message.failure.first_line);
      if (!box.hasAttribute("data-remedies-loaded")) loadRemedies(box);
    }
  }

  // Warnings arrive with the state (a live alarm mid-benchmark among them): drawn as the server renders them.
  function renderWarnings(warnings) {
    const slot = $("warnings-slot");
    if (!slot || !warnings || slot.querySelectorAll("li[data-kind]").length === warnings.length) return;
    const section = document.createElement("section");
    section.className = "card";
    section.id = "warnings";
    const heading = document.createElement("h2");
    heading.textContent = "Warnings";
    const list = document.createElement("ul");
    list.className = "warnings server-warnings";
    for (const warning of warnings) {
      const item = document.createElement("li");
      item.dataset.kind = warning.kind;
      const meta = document.createElement("span");
      meta.className = "meta";
      meta.textContent = `${warning.kind} · ${(warning.at || "").slice(11, 19)}`;
      if (warning.line) {
        const link = document.createElement("a");
        link.href = `#L${warning.line}`;
        link.textContent = `log line ${warning.line}`;
        meta.append(" · ", link);
      }
      item.append(meta, ` ${warning.message}`);
      if (warning.text) {
        const excerpt = document.createElement("pre");
        excerpt.className = "excerpt";
        excerpt.textContent = warning.text;
        item.append(excerpt);
      }
      if (warning.remedies && warning.remedies.length) {
        const remedies = document.createElement("ol");
        remedies.className = "remedies";
        for (const remedy of warning.remedies) remedies.append(remedyItem(remedy));
        item.append(remedies);
      }
      list.append(item);
    }
    section.append(heading, list);
    slot.replaceChildren(section);
  }

  // The target's bar, then the draft's (null: not loading one yet).
  // The bars' first widths come as data (CSP: no style attributes in the page); set through the CSSOM.
  for (const bar of document.querySelectorAll("#loading-progress .bar[data-percent]")) {
    bar.style.width = `${bar.dataset.percent}%`;
  }

  function setBar(which, percent) {
    const bar = document.querySelector(`#loading-progress [data-bar=${which}]`);
    bar.hidden = percent === null || percent === undefined;
    if (bar.hidden) return;
    bar.querySelector(".bar").style.width = `${percent}%`;
    bar.querySelector("span").textContent = `${which}: ${percent}% of weight shards loaded`;
  }

  // A failure that arrives live: its remedies come from the API (the page renders them on a reload).
  function loadRemedies(box) {
    box.setAttribute("data-remedies-loaded", "");
    fetch(box.dataset.api, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then((response) => (response.ok ? response.json() : null))
      .then((run) => { if (run && run.failure) showRemedies(run.failure.remedies || []); })
      .catch(() => box.removeAttribute("data-remedies-loaded"));
  }

  // One remedy as a list item, its title and explanation written as text (a failure's and a warning's alike).
  function remedyItem(remedy) {
    const item = document.createElement("li");
    item.dataset.remedy = remedy.id;
    const title = document.createElement("strong");
    title.textContent = remedy.title;
    const explanation = document.createElement("p");
    explanation.textContent = remedy.explanation;
    item.append(title, explanation);
    return item;
  }

  function showRemedies(remedies) {
    const form = $("remedy-form");
    $("remedy-list").replaceChildren(...remedies.map((remedy) => {
      const item = remedyItem(remedy);
      if (remedy.change) {
        const change = document.createElement("p");
        change.className = "meta";
        const code = document.createElement("code");
        code.textContent = remedy.change.text;
        change.append("Change: ", code);
        item.append(change);
        if (form) {
          const post = form.content.firstElementChild.cloneNode(true);
          post.querySelector("input[name=remedy]").value = remedy.id;
          item.append(post);
        }
      }
      if (remedy.link) {
        const link = document.createElement("a");
        link.href = remedy.link;
        link.textContent = remedy.admin ? "the host" : "copy the experiment";
        item.append(" ", link);
      }
      return item;
    }));
    $("remedies").hidden = remedies.length === 0;
  }

  // ---- the server's gauges, streamed while a cell runs ------------------------------------------------------------
  // The worker stores each sample, then sends it with its id; the socket resumes after the newest id the chart has
  // (`metrics_after`), and the consumer refills from storage any it missed, so each arrives once and none is lost.
  // A drawn chart is extended in place; a folded one not yet drawn gets them in the figure it will be drawn from.
  const EXTEND_RETRY_MS = 500;
  const metricsHolder = $("server-metrics-chart");
  let lastMetricId = Number(metricsHolder ? metricsHolder.dataset.metricsAfter : 0) || 0;

  function receiveServerMetrics(message) {
    if (!Array.isArray(message.fields) || !Array.isArray(message.samples) || !Array.isArray(message.ids)) return;
    const fresh = message.samples.filter((_, i) => message.ids[i] > lastMetricId);
    if (fresh.length === 0) return;
    lastMetricId = Math.max(lastMetricId, ...message.ids);
    extendServerMetrics(message.fields, fresh);
  }

  function extendServerMetrics(fields, samples) {
    const holder = metricsHolder;
    const source = holder && document.getElementById(holder.dataset.figure);
    if (!source) return;
    if (holder.dataset.drawn && !holder.data) {
      setTimeout(() => extendServerMetrics(fields, samples), EXTEND_RETRY_MS); // plotly.js still loading
      return;
    }
    const column = new Map(fields.map((name, i) => [name, i]));
    const at = samples.map((s) => new Date(s[column.get("t")] * 1000).toISOString().replace("Z", "+00:00"));
    const figure = holder.data ? null : JSON.parse(source.textContent);
    const traces = holder.data || figure.data;
    const update = { x: [], y: [] };
    const indices = [];
    traces.forEach((trace, index) => {
      const i = trace.meta && column.get(trace.meta.field);
      if (i === undefined) return;
      indices.push(index);
      update.x.push(at);
      update.y.push(samples.map((s) => (typeof s[i] === "number" ? s[i] * trace.meta.scale : null)));
    });
    if (indices.length === 0) return;
    if (holder.data) {
      Plotly.extendTraces(holder, update, indices);
    } else {
      indices.forEach((traceIndex, k) => {
        figure.data[traceIndex].x.push(...update.x[k]);
        figure.data[traceIndex].y.push(...update.y[k]);
      });
      source.textContent = JSON.stringify(figure);
    }
    holder.dataset.streamed = String(Number(holder.dataset.streamed || 0) + samples.length);
  }

  window.specdashSocket(logBox.dataset.ws, {
    resumeQuery: () => `?after=${lastLine}&metrics_after=${lastMetricId}`,
    onMessage(message) {
      if (message.type === "lines") {
        ingest(message.first, message.lines);
      } else if (message.type === "facts") {
        mergeFacts(message);
        renderThrottled();
      } else if (message.type === "state") {
        onState(message);
      } else if (message.type === "server_metrics") {
        receiveServerMetrics(message);
      }
    },
  });
  jumpToHashLine();
  renderSoon();
})();

// "Open in Perfetto": fetch the trace from specdash (same origin, the reader's session) and hand its bytes to a
// Perfetto UI window with postMessage, Perfetto's documented way in: its page asks for nothing and uploads nothing;
// the trace stays in this browser. The window is opened at the click (popup blockers allow only that), then pinged
// until Perfetto answers PONG, then sent the buffer.
(function () {
  const PERFETTO = "https://ui.perfetto.dev";
  const PING_EVERY_MS = 100;
  const GIVE_UP_MS = 30000;

  function open(button) {
    const status = button.parentElement.querySelector(".perfetto-status");
    const say = (text) => { if (status) status.textContent = text; };
    const win = window.open(`${PERFETTO}/#!/`);
    if (!win) { say("The browser blocked the Perfetto window; allow pop-ups for this site, or download the trace."); return; }
    say("Fetching the trace …");
    fetch(button.dataset.traceUrl, { credentials: "same-origin" })
      .then((response) => {
        if (!response.ok) throw new Error(`HTTP ${response.status}`);
        return response.arrayBuffer();
      })
      .then((buffer) => {
        say("Waiting for Perfetto to open …");
        let answered = false;
        const started = Date.now();
        const onMessage = (event) => {
          if (event.origin !== PERFETTO || event.source !== win || event.data !== "PONG" || answered) return;
          answered = true;
          window.removeEventListener("message", onMessage);
          win.postMessage(
            { perfetto: { buffer, title: button.dataset.title, fileName: button.dataset.fileName } }, PERFETTO, [buffer]);
          say("Opened in Perfetto.");
        };
        window.addEventListener("message", onMessage);
        const ping = () => {
          if (answered) return;
          if (win.closed || Date.now() - started > GIVE_UP_MS) {
            window.removeEventListener("message", onMessage);
            say("Perfetto did not answer; download the trace and open it there.");
            return;
          }
          win.postMessage("PING", PERFETTO);
          setTimeout(ping, PING_EVERY_MS);
        };
        ping();
      })
      .catch((error) => say(`Could not fetch the trace: ${error.message}`));
  }

  document.addEventListener("click", (event) => {
    const button = event.target.closest("button.open-perfetto");
    if (button) open(button);
  });
})();
