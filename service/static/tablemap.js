// The whole table as a map: every row on a canvas, drawn pixel by pixel into one ImageData (no WebGL, so it is
// as fast in a headless or GPU-less browser), with pan, zoom, hover labels, search-to-highlight, click (or, by the
// keyboard, a button among the search's first matches or in the table of labelled words) for neighbours and colour
// by a column. It cooperates with the page as map widgets in a page do: the mouse wheel and one finger scroll the
// page, Ctrl (⌘ on a Mac) + wheel, a touchpad's pinch and two fingers move the map. The labels follow the page's
// text size; the words they name are listed in a table after the map, with the labelled words nearest to each on
// it, for a screen reader. Positions come from GET .../map (int16 pairs), labels from .../map/labels.

const BACKGROUND = [255, 255, 255];
const CATEGORY_COLOURS = ["#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#7f6d00", "#555555",
  "#9a2a2a", "#2a6f9a", "#6a9a2a", "#9a2a8a", "#2a9a8a", "#8a6a2a", "#4a4a9a", "#999999"];
const RANK_COLOURS = ["#b2182b", "#d6604d", "#e08214", "#8073ac", "#2c7bb6", "#4f8fc0", "#8fa9c4"]; // frequent -> rare
const PROMINENT = 1000; // the most frequent rows are drawn one pixel larger
const DIM_COLOUR = "#b8bec8";
const HIGHLIGHT = 0xff0050e6; // ABGR (little-endian RGBA): rgb(230, 80, 0)
const SELECTED = 0xff2a26a3;
const GRID = 512; // hover index: cells per side
const HOVER_PX = 7;
const MAX_COUNT = 63; // pixel densities above this look the same
const SLASHED = /^\/(.+)\/([a-z]*)$/s; // a search written /regular expression/flags
const AUTO_LABELS = 140; // labels placed on frequent visible rows
const AUTO_SCAN = 4000;
const PICKS = 10; // matches of a search listed as buttons
const REGEX_SECONDS = 3; // a regular expression still testing the labels after this long is stopped
const NEAREST_ON_MAP = 3; // labelled words listed beside each labelled word in the table
const SETTLE_MS = 250; // the table of labelled words and the view's line follow the map once it stops moving
const HINT_MS = 1500; // how long a hint over the map (how to move or zoom it) stays
// A wheel's delta in CSS pixels for each of its units (deltaMode: pixels, lines as Firefox sends a mouse's, pages)
const WHEEL_PIXELS = [1, 40, 800];
const ZOOM_KEY = /Mac|iPhone|iPad/.test(navigator.platform) ? "⌘" : "Ctrl"; // held with the wheel to zoom the map
const HINTS = {
  touch: "Use two fingers to move or zoom the map",
  wheel: `Use ${ZOOM_KEY} + scroll to zoom the map`,
};

const hexRGB = (hex) => [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
const rgba32 = ([r, g, b]) => (0xff000000 | (b << 16) | (g << 8) | r) >>> 0;

/** Why ``response`` (an error answer) failed: its envelope's message, else its status. */
async function refusal(response) {
  const data = await response.json().catch(() => null);
  return data?.error?.message || statusMessage(response);
}

/** What an answer that is no JSON envelope (a proxy's page: 429, 502) says: its status, and when to ask again. */
export function statusMessage(response) {
  const retry = response.headers.get("Retry-After");
  const status = `${response.status}${response.statusText ? ` ${response.statusText}` : ""}`;
  return `the server answered ${status}${retry ? `; try again in ${retry} s` : ""}`;
}

/** What a request that got no answer at all says (the server stopped, or the connection lost), and what to do. */
export function unreachable(err) {
  return `network error: the server could not be reached (${err.message}); check that it is running, then try again`;
}

/** base64 -> Uint8Array */
function fromBase64(text) {
  const raw = atob(text);
  const out = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
  return out;
}

export class TableMap {
  /**
   * @param {HTMLElement} root the section holding the map's controls (ids below are looked up inside it)
   * @param {{fetchJSON: Function, fetch: Function, tablePath: Function, show: Function, onSearch?: Function}} deps
   *   fetch is ``fetch`` with the server's key; tablePath(suffix,
   *   table) is an API path of ``table``; show(out, ...nodes) puts an answer in ``out``, the focus going to ``out``
   *   when it was on something there (a neighbour)
   */
  constructor(root, deps) {
    this.root = root;
    this.deps = deps;
    this.canvas = root.querySelector("canvas");
    this.ctx = this.canvas.getContext("2d", { alpha: false });
    this.status = root.querySelector(".tm-status");
    this.colourNote = root.querySelector(".tm-colour-note"); // colours refused: kept apart from the layout's status
    this.picks = root.querySelector(".tm-picks");
    this.panel = root.querySelector(".tm-panel");
    this.legend = root.querySelector(".tm-legend");
    this.viewLine = root.querySelector(".tm-view");
    this.words = root.querySelector(".tm-words tbody");
    this.hint = root.querySelector(".tm-hint");
    this.labelled = []; // rows whose labels the last frame drew (the hovered row's aside)
    this.listed = ""; // the rows the table lists, as a key
    this.settle = 0; // timer: the table and the view's line made again once the map stops moving
    this.hintTimer = 0;
    this.n = 0;
    this.view = { cx: 0, cy: 0, s: 1 };
    this.fitScale = 1;
    this.labels = null;
    this.lower = null;
    this.matches = null; // Int32Array of row ids, or null
    this.held = false; // a regular expression from a link, not run until Enter (one can take minutes)
    this.searches = 0; // searches run: a regular expression's answer is shown only if no later search came
    this.regexWorker = null; // tests regular expressions on the labels (regexsearch.js)
    this.stopRegex = () => {}; // stops the regular expression being tested, if any
    this.selected = -1;
    this.neighbours = [];
    this.hovered = -1;
    this.codes = null;
    this.colours = [];
    this.dim = false;
    this.frame = 0;
    this.drawTimes = [];
    this.generation = 0; // layouts asked for
    this.layout = 0; // the generation of the layout drawn (or refused): the one the table of labelled words lists
    this.asked = null; // {table, method} of the latest load
    this.colourTicket = 0;
    this.wire();
  }

  // ------------------------------------------------------------------ loading
  /** Load the layout of ``table`` (method pca or tsne): positions first, labels after the first frame. */
  async load(table, method = "pca") {
    const generation = ++this.generation;
    this.asked = { table, method };
    const started = performance.now();
    this.canvas.dataset.ready = "false";
    this.setStatus(`Laying out ${table}…`);
    this.noteColours(""); // a refusal from now on (the layout's own colours, or a column picked meanwhile) stays
    // another table's columns are known once its info comes: till then the menu (of the table drawn) takes no pick
    if (table !== this.table) this.root.querySelector(".tm-colour").disabled = true;
    const path = (suffix) => this.deps.tablePath(suffix, table);
    const [info, points] = await Promise.all([
      this.deps.fetchJSON(path(`map/info?method=${method}`)),
      this.deps.fetch(path(`map?method=${method}`))
        .then(async (r) => (r.ok ? { buffer: await r.arrayBuffer() } : { error: await refusal(r) }))
        .catch(() => ({})), // the network failed
    ]);
    if (generation !== this.generation) return;
    const buffer = points.buffer;
    if (!info.ok || !buffer) {
      this.asked = null; // asked again when the page comes back to it
      this.n = 0;
      this.forget();
      this.drawNow(); // nothing, and nothing in words
      this.setStatus(info.data?.error?.message || points.error || "the map could not be loaded", true);
      return;
    }
    this.info = info.data;
    this.table = table;
    const codes = new Int16Array(buffer);
    const n = codes.length / 2;
    const { x: [x0, x1], y: [y0, y1] } = this.info.bounds;
    const kx = (x1 - x0) / 65534;
    const ky = (y1 - y0) / 65534;
    this.x = new Float32Array(n);
    this.y = new Float32Array(n);
    for (let i = 0; i < n; i++) {
      this.x[i] = x0 + (codes[2 * i] + 32767) * kx;
      this.y[i] = y0 + (codes[2 * i + 1] + 32767) * ky;
    }
    this.n = n;
    this.bounds = { x0, x1, y0, y1 };
    this.forget();
    this.buildIndex();
    this.setColumns();
    // Its own colours from now on, never the layout before's: by rank (the menu still says the column picked) till
    // the column's come, a redraw meanwhile (a pan, a hover, a resize) drawing these.
    this.paint("rank", this.ownColours("rank"));
    await this.colourBy(this.root.querySelector(".tm-colour").value || "rank", false);
    if (generation !== this.generation) return;
    this.fit();
    this.drawNow();
    this.firstView = performance.now() - started;
    this.canvas.dataset.ready = "true";
    this.describe();
    this.loadLabels(generation);
  }

  /** The layout before's labels, search matches, selected row and its neighbours forgotten: a layout in its place
   * (or none, refused) neither labels nor lists them. */
  forget() {
    this.layout = this.generation;
    this.labels = null;
    this.labelsLost = false;
    this.lower = null;
    this.searches++; // a regular expression still testing the labels before shows nothing on this layout
    this.stopRegex();
    this.matches = null;
    this.selected = -1;
    this.neighbours = [];
    this.hovered = -1;
    this.panel.replaceChildren(); // the neighbours of a row of the layout before
    this.listPicks([]);
    this.root.dataset.selected = "";
  }

  /** An API path of the table of the layout loaded: the table picked may be another by now (a documents table,
   * which has no map and lays nothing out in its place). */
  path(suffix) {
    return this.deps.tablePath(suffix, this.table);
  }

  async loadLabels(generation) {
    let text = null;
    let why = ""; // the server's reason, when it refused
    try {
      const response = await this.deps.fetch(this.path("map/labels"));
      if (response.ok) text = await new Response(response.body.pipeThrough(new DecompressionStream("gzip"))).text();
      else why = ` (${await refusal(response)})`;
    } catch {
      text = null; // the network failed: said below, as a refusal is
    }
    if (generation !== this.generation) return;
    if (text === null) {
      this.labelsLost = true;
      this.runSearch();
      this.setStatus(`${this.table}: the labels could not be loaded${why} (hover, search and labels need them).`, true);
      return;
    }
    this.labels = JSON.parse(text);
    this.canvas.dataset.labels = "true";
    this.runSearch();
    this.request();
  }

  describe() {
    const info = this.info;
    const how = info.method === "pca"
      ? `first two principal components of all ${info.rows.toLocaleString("en")} rows ` +
        `(${info.explained_variance_ratio.map((v) => `${(v * 100).toFixed(1)}%`).join(" + ")} of the variance)`
      : `t-SNE of the ${info.rows.toLocaleString("en")} most frequent rows (perplexity ${info.params.perplexity}, ` +
        `seed ${info.params.seed})`;
    this.setStatus(`${this.table}: ${how}. Drag to pan (two fingers on a touch screen), ${ZOOM_KEY} + scroll or ` +
      "pinch to zoom, click or tap a point (or a search's match below) for its neighbours.");
  }

  setStatus(text, error = false) {
    this.status.textContent = text;
    this.status.classList.toggle("warning", error);
  }

  /** Why the colours asked for were refused, on a line of its own ("": none). */
  noteColours(text) {
    this.colourNote.textContent = text;
    this.colourNote.hidden = !text;
  }

  /** Counting sort of the rows into GRID x GRID cells of the layout's bounds, for hover and click. */
  buildIndex() {
    const { x0, x1, y0, y1 } = this.bounds;
    const fx = GRID / Math.max(x1 - x0, 1e-12);
    const fy = GRID / Math.max(y1 - y0, 1e-12);
    const cell = new Int32Array(this.n);
    const start = new Int32Array(GRID * GRID + 1);
    for (let i = 0; i < this.n; i++) {
      const cx = Math.min(GRID - 1, ((this.x[i] - x0) * fx) | 0);
      const cy = Math.min(GRID - 1, ((this.y[i] - y0) * fy) | 0);
      cell[i] = cy * GRID + cx;
      start[cell[i] + 1]++;
    }
    for (let c = 0; c < GRID * GRID; c++) start[c + 1] += start[c];
    const fill = start.slice(0, GRID * GRID);
    const items = new Int32Array(this.n);
    for (let i = 0; i < this.n; i++) items[fill[cell[i]]++] = i;
    this.grid = { start, items, fx, fy };
    this.gx = new Float32Array(this.n);
    this.gy = new Float32Array(this.n);
    for (let j = 0; j < this.n; j++) {
      this.gx[j] = this.x[items[j]];
      this.gy[j] = this.y[items[j]];
    }
  }

  /** The row nearest to canvas pixel (px, py) within HOVER_PX, or -1. */
  nearest(px, py) {
    if (!this.n) return -1;
    const dpr = this.dpr;
    const { x, y } = this.toData(px * dpr, py * dpr);
    const r = (HOVER_PX * dpr) / this.view.s;
    const { x0, y0 } = this.bounds;
    const { start, items, fx, fy } = this.grid;
    const cx0 = Math.max(0, Math.floor((x - r - x0) * fx));
    const cx1 = Math.min(GRID - 1, Math.floor((x + r - x0) * fx));
    const cy0 = Math.max(0, Math.floor((y - r - y0) * fy));
    const cy1 = Math.min(GRID - 1, Math.floor((y + r - y0) * fy));
    let best = -1;
    let bestD = r * r;
    const only = this.matches && this.matches.length ? this.matchSet : null;
    for (let cy = cy0; cy <= cy1; cy++) {
      for (let cx = cx0; cx <= cx1; cx++) {
        const c = cy * GRID + cx;
        for (let k = start[c]; k < start[c + 1]; k++) {
          const i = items[k];
          if (only && !only[i]) continue;
          const dx = this.x[i] - x;
          const dy = this.y[i] - y;
          const d = dx * dx + dy * dy;
          if (d < bestD || (d === bestD && i < best)) {
            bestD = d;
            best = i;
          }
        }
      }
    }
    return best;
  }

  // ------------------------------------------------------------------ colour
  setColumns() {
    const select = this.root.querySelector(".tm-colour");
    const keep = select.value;
    const options = [["rank", "frequency rank"], ["none", "one colour"], ...this.info.columns.map((c) => [c, c])];
    select.replaceChildren(...options.map(([value, text]) => new Option(text, value)));
    select.value = options.some(([v]) => v === keep) ? keep : "rank";
    select.disabled = false;
  }

  /** Colour by ``column``; true when its colours are drawn (false: refused, or overtaken by a later ask). */
  async colourBy(column, redraw = true) {
    const ticket = ++this.colourTicket; // a column asked for later wins over this one
    const generation = this.generation; // and so does a layout asked for while its colours come (see below)
    let colouring = this.ownColours(column);
    if (!colouring) {
      const { ok, data } = await this.deps.fetchJSON(this.path(`map/colours/${encodeURIComponent(column)}`));
      if (ticket !== this.colourTicket) return false;
      if (!ok) {
        this.noteColours(data.error?.message || "colour column not loaded");
        this.root.querySelector(".tm-colour").value = this.column; // the colours drawn stay: the menu says which
        return false;
      }
      // Another layout asked for since: these colours, the layout shown's, are drawn on neither (the menu keeps the
      // pick, which the next layout asks of its own table when that has the column).
      if (generation !== this.generation) return false;
      colouring = { codes: fromBase64(data.codes), categories: data.categories, colours: CATEGORY_COLOURS };
    }
    this.paint(column, colouring);
    this.root.querySelector(".tm-colour").value = column;
    if (redraw) this.request();
    return true;
  }

  /** The colouring of ``column`` made here ("rank" and "none") for the layout shown; null for a column's. */
  ownColours(column) {
    const n = this.n;
    if (column === "none") return { codes: new Uint8Array(n), categories: [], colours: ["#2b5d9b"] };
    if (column !== "rank") return null;
    // Buckets of log-rank: the first 100 rows, 1,000, 10,000, ... (row order is frequency order for most tables).
    const codes = new Uint8Array(n);
    const edges = [100, 300, 1000, 3000, 10000, 30000];
    for (let b = 0, i = 0; i < n; i++) {
      while (b < edges.length && i >= edges[b]) b++;
      codes[i] = b;
    }
    const categories = ["top 100", "100–300", "300–1k", "1k–3k", "3k–10k", "10k–30k", "30k+"].slice(0, 1 + edges.filter((e) => e < n).length);
    return { codes, categories, colours: RANK_COLOURS };
  }

  /** Draw the layout shown by ``column``'s codes (one per row) from now on, with its legend. */
  paint(column, { codes, categories, colours }) {
    const n = this.n;
    this.codes = codes;
    this.colours = colours;
    this.gcodes = new Uint8Array(n);
    const items = this.grid.items;
    for (let j = 0; j < n; j++) this.gcodes[j] = codes[items[j]];
    this.column = column;
    this.legend.replaceChildren(...categories.map((name, i) => {
      const item = document.createElement("li");
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = colours[i % colours.length];
      item.append(swatch, name);
      return item;
    }));
    this.buildLUT();
  }

  /** Packed colours by (category, pixel density): alpha grows with the number of rows on the pixel. */
  buildLUT() {
    const colours = (this.dim ? [DIM_COLOUR] : this.colours).map(hexRGB);
    const stride = MAX_COUNT + 1;
    this.lut = new Uint32Array(16 * stride);
    for (let c = 0; c < 16; c++) {
      const rgb = colours[c % colours.length];
      for (let k = 1; k <= MAX_COUNT; k++) {
        const a = Math.min(1, 0.45 + 0.55 * (Math.log(k) / Math.log(8)));
        this.lut[c * stride + k] = rgba32(rgb.map((v, j) => Math.round(v * a + BACKGROUND[j] * (1 - a))));
      }
    }
    this.background = rgba32(BACKGROUND);
  }

  // ------------------------------------------------------------------ view
  resize() {
    const rect = this.canvas.getBoundingClientRect();
    this.dpr = Math.min(2, window.devicePixelRatio || 1);
    const w = Math.max(200, Math.round(rect.width * this.dpr));
    const h = Math.max(200, Math.round(rect.height * this.dpr));
    if (w === this.canvas.width && h === this.canvas.height && this.image) return;
    const ratio = this.canvas.width ? w / this.canvas.width : 1;
    this.canvas.width = w;
    this.canvas.height = h;
    this.image = this.ctx.createImageData(w, h);
    this.pixels = new Uint32Array(this.image.data.buffer);
    this.counts = new Uint16Array(w * h); // a pixel may hold thousands of rows
    this.winner = new Uint8Array(w * h);
    this.touched = new Int32Array(w * h);
    if (this.n && ratio !== 1) this.view.s *= ratio;
    this.request();
  }

  fit(ids = null) {
    const w = this.canvas.width;
    const h = this.canvas.height;
    let { x0, x1, y0, y1 } = this.bounds || { x0: -1, x1: 1, y0: -1, y1: 1 };
    if (ids && ids.length) {
      x0 = y0 = Infinity;
      x1 = y1 = -Infinity;
      for (const i of ids) {
        x0 = Math.min(x0, this.x[i]);
        x1 = Math.max(x1, this.x[i]);
        y0 = Math.min(y0, this.y[i]);
        y1 = Math.max(y1, this.y[i]);
      }
    }
    const spanX = Math.max(x1 - x0, 1e-6);
    const spanY = Math.max(y1 - y0, 1e-6);
    const s = 0.92 * Math.min(w / spanX, h / spanY);
    this.view = { cx: (x0 + x1) / 2, cy: (y0 + y1) / 2, s: ids ? Math.min(s, this.fitScale * 4000) : s };
    if (!ids) this.fitScale = s;
    this.request();
  }

  toData(px, py) {
    const { cx, cy, s } = this.view;
    return { x: cx + (px - this.canvas.width / 2) / s, y: cy - (py - this.canvas.height / 2) / s };
  }

  toPixel(i) {
    const { cx, cy, s } = this.view;
    return [(this.x[i] - cx) * s + this.canvas.width / 2, (cy - this.y[i]) * s + this.canvas.height / 2];
  }

  pan(dx, dy) {
    this.view.cx -= (dx * this.dpr) / this.view.s;
    this.view.cy += (dy * this.dpr) / this.view.s;
    this.request();
  }

  /** Zoom by ``factor`` keeping the data point under CSS pixel (px, py) in place. */
  zoom(factor, px = null, py = null) {
    const w = this.canvas.width;
    const h = this.canvas.height;
    const dx = px === null ? w / 2 : px * this.dpr;
    const dy = py === null ? h / 2 : py * this.dpr;
    const before = this.toData(dx, dy);
    const s = Math.max(this.fitScale * 0.5, Math.min(this.fitScale * 5000, this.view.s * factor));
    this.view.s = s;
    this.view.cx = before.x - (dx - w / 2) / s;
    this.view.cy = before.y + (dy - h / 2) / s;
    this.request();
  }

  /** Draw in the next animation frame (once, however many changes come before it). */
  request() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.drawNow();
    });
  }

  // ------------------------------------------------------------------ drawing
  drawNow() {
    if (this.frame) {
      cancelAnimationFrame(this.frame);
      this.frame = 0;
    }
    const started = performance.now();
    this.draw();
    this.drawTimes.push(performance.now() - started);
    if (this.drawTimes.length > 240) this.drawTimes.splice(0, this.drawTimes.length - 240);
    clearTimeout(this.settle);
    this.settle = setTimeout(() => this.describeView(), SETTLE_MS);
  }

  /** The view in words, once the map stops moving: its line (rows in view, rows labelled) and the table of the
   * labelled words, most frequent first, each with its place and the labelled words nearest to it on the map. The
   * table is made again only when the rows labelled change; the focus on one of its words stays on that word. */
  describeView() {
    const count = (n) => `${n.toLocaleString("en")} row${n === 1 ? "" : "s"}`;
    const ids = this.labels ? [...this.labelled].sort((a, b) => a - b) : [];
    const line = !this.n ? "" : `${this.visible.toLocaleString("en")} of ${count(this.n)} in view` +
      (this.labels ? `; ${count(ids.length)} labelled, listed in the table below.` : ".");
    if (this.viewLine.textContent !== line) this.viewLine.textContent = line;
    // The layout drawn, not the one asked for: till that comes, the rows listed are still the layout before's.
    const key = `${this.layout} ${ids.join(",")}`;
    if (key === this.listed) return;
    const sameLayout = this.listed.startsWith(`${this.layout} `); // else a row's number names another word
    this.listed = key;
    const inside = this.words.contains(document.activeElement);
    const focused = inside && sameLayout ? document.activeElement.closest("tr").dataset.row : null;
    const nearest = this.nearestOnMap(ids);
    const cell = (text) => {
      const td = document.createElement("td");
      td.textContent = text;
      return td;
    };
    this.words.replaceChildren(...ids.map((i, k) => {
      const row = document.createElement("tr");
      row.dataset.row = String(i);
      const head = document.createElement("th");
      head.scope = "row";
      head.append(this.goButton(i, "token"));
      const near = document.createElement("ol"); // a list: a label may be a comma
      near.className = "tm-near";
      near.append(...nearest[k].map((j) => {
        const item = document.createElement("li");
        item.textContent = this.labels[j];
        return item;
      }));
      const places = cell("");
      places.append(near);
      row.append(head, cell(this.x[i].toFixed(3)), cell(this.y[i].toFixed(3)), places);
      return row;
    }));
    if (inside) {
      const again = focused === null ? null : this.words.querySelector(`tr[data-row="${focused}"] button`);
      (again || this.words.closest("details").querySelector("summary")).focus();
    }
  }

  /** For each of rows ``ids``, the NEAREST_ON_MAP others of them nearest to it on the map (equal distances by row). */
  nearestOnMap(ids) {
    return ids.map((i) => ids
      .filter((j) => j !== i)
      .map((j) => [(this.x[j] - this.x[i]) ** 2 + (this.y[j] - this.y[i]) ** 2, j])
      .sort((a, b) => a[0] - b[0] || a[1] - b[1])
      .slice(0, NEAREST_ON_MAP)
      .map(([, j]) => j));
  }

  /** Show ``text`` (one of HINTS) over the map for HINT_MS, or hide the hint (""). Its element is a polite live
   * region: the text is said once as it comes, not again while the same gesture keeps it up. */
  showHint(text) {
    clearTimeout(this.hintTimer);
    if (this.hint.textContent !== text) this.hint.textContent = text;
    if (text) this.hintTimer = setTimeout(() => this.showHint(""), HINT_MS);
  }

  draw() {
    if (!this.image) this.resize();
    const w = this.canvas.width;
    const h = this.canvas.height;
    const { pixels, counts, winner, lut, touched } = this;
    let t = 0; // pixels touched this frame (counts is all zeros between frames)
    const n = this.n;
    const { cx, cy, s } = this.view;
    const ox = w / 2 - cx * s;
    const oy = h / 2 + cy * s;
    // Rows in the hover index's cell order (``gx``, ``gy``, ``gcodes``), so that neighbouring rows write
    // neighbouring pixels; a shared pixel takes the lowest code (the most frequent rows, coloured by rank).
    const x = this.gx;
    const y = this.gy;
    const codes = this.gcodes;
    const size = s > this.fitScale * 40 ? 3 : s > this.fitScale * 8 ? 2 : 1;
    let visible = 0;
    // The rows to visit: all of them or, zoomed in, only the cells in view (one run of ``items`` per cell row).
    const runs = this.runsInView();
    const half = size >> 1;
    for (let r = 0; r < runs.length; r += 2) {
      const to = runs[r + 1];
      for (let j = runs[r]; j < to; j++) {
        const px = ((x[j] * s + ox) | 0) - half;
        const py = ((oy - y[j] * s) | 0) - half;
        if (px < 0 || py < 0 || px > w - size || py > h - size) continue;
        visible++;
        const code = codes[j];
        if (size === 1) {
          const k = py * w + px;
          if (counts[k]++ === 0) {
            touched[t++] = k;
            winner[k] = code;
          } else if (code < winner[k]) winner[k] = code;
          continue;
        }
        for (let dy = 0; dy < size; dy++) {
          for (let k = (py + dy) * w + px, end = k + size; k < end; k++) {
            if (counts[k]++ === 0) {
              touched[t++] = k;
              winner[k] = code;
            } else if (code < winner[k]) winner[k] = code;
          }
        }
      }
    }
    const stride = MAX_COUNT + 1;
    pixels.fill(this.background);
    if (this.dim) {
      for (let j = 0; j < t; j++) {
        const k = touched[j];
        const c = counts[k];
        pixels[k] = lut[c > MAX_COUNT ? MAX_COUNT : c];
        counts[k] = 0;
      }
    } else {
      for (let j = 0; j < t; j++) {
        const k = touched[j];
        const c = counts[k];
        pixels[k] = lut[winner[k] * stride + (c > MAX_COUNT ? MAX_COUNT : c)];
        counts[k] = 0;
      }
    }
    if (!this.dim) this.prominent(size + 1);
    if (this.matches) this.stamp(this.matches, HIGHLIGHT, size + 2);
    if (this.selected >= 0) this.stamp(this.neighbours.map((nb) => nb.id).concat([this.selected]), SELECTED, size + 4);
    this.ctx.putImageData(this.image, 0, 0);
    this.visible = visible;
    this.drawLabels();
  }

  /** [from, to) pairs over the grid's ``items`` covering the cells in view, or ``allRows`` when most are. */
  runsInView() {
    if (!this.n || !this.grid) return [];
    if (!this.allRows || this.allRows[1] !== this.n) this.allRows = [0, this.n];
    const { x0, y0 } = this.bounds;
    const { start, fx, fy } = this.grid;
    const a = this.toData(0, this.canvas.height);
    const b = this.toData(this.canvas.width, 0);
    const cx0 = Math.max(0, Math.floor((a.x - x0) * fx) - 1);
    const cx1 = Math.min(GRID - 1, Math.floor((b.x - x0) * fx) + 1);
    const cy0 = Math.max(0, Math.floor((a.y - y0) * fy) - 1);
    const cy1 = Math.min(GRID - 1, Math.floor((b.y - y0) * fy) + 1);
    if (cx1 < cx0 || cy1 < cy0) return [];
    const from = start[cy0 * GRID + cx0];
    let inside = 0;
    for (let cy = cy0; cy <= cy1; cy++) inside += start[cy * GRID + cx1 + 1] - start[cy * GRID + cx0];
    if (inside > 0.5 * this.n || from === undefined) return this.allRows;
    const runs = [];
    for (let cy = cy0; cy <= cy1; cy++) runs.push(start[cy * GRID + cx0], start[cy * GRID + cx1 + 1]);
    return runs;
  }

  /** The PROMINENT most frequent rows once more, ``side`` pixels wide, in their own colours (least frequent first). */
  prominent(side) {
    const stride = MAX_COUNT + 1;
    const top = Math.min(this.n, PROMINENT);
    const w = this.canvas.width;
    const h = this.canvas.height;
    const { cx, cy, s } = this.view;
    const ox = w / 2 - cx * s;
    const oy = h / 2 + cy * s;
    for (let i = top - 1; i >= 0; i--) {
      const px = ((this.x[i] * s + ox) | 0) - (side >> 1);
      const py = ((oy - this.y[i] * s) | 0) - (side >> 1);
      if (px < 0 || py < 0 || px + side > w || py + side > h) continue;
      const colour = this.lut[this.codes[i] * stride + MAX_COUNT];
      for (let dy = 0; dy < side; dy++) this.pixels.fill(colour, (py + dy) * w + px, (py + dy) * w + px + side);
    }
  }

  /** Square marks of ``side`` pixels on rows ``ids``, written straight into the frame. */
  stamp(ids, colour, side) {
    const w = this.canvas.width;
    const h = this.canvas.height;
    const half = side >> 1;
    for (const i of ids) {
      const [fx, fy] = this.toPixel(i);
      const px = (fx | 0) - half;
      const py = (fy | 0) - half;
      if (px < 0 || py < 0 || px + side > w || py + side > h) continue;
      for (let dy = 0; dy < side; dy++) this.pixels.fill(colour, (py + dy) * w + px, (py + dy) * w + px + side);
    }
  }

  /** Labels: the selected row and its neighbours, then frequent visible rows (search matches first while
   * searching), each only where it overlaps no label already placed; then the hovered row's, over them (so that
   * the labels placed, and the table listing them, stay as the pointer moves). Their size is the canvas's font
   * size (style.css: the page's small text, which follows the browser's text size). The rows labelled, but for
   * a hovered one no other label names, are kept in ``labelled``. */
  drawLabels() {
    const ctx = this.ctx;
    const w = this.canvas.width;
    const h = this.canvas.height;
    const size = parseFloat(getComputedStyle(this.canvas).fontSize) * this.dpr; // a label's, in canvas pixels
    const unit = size / 12; // the sizes below were chosen for 12 px labels
    const font = (strong) => `${strong ? `600 ${13 * unit}` : size}px system-ui, sans-serif`;
    const cell = 8 * unit;
    const cols = Math.ceil(w / cell);
    const rows = Math.ceil(h / cell);
    const taken = new Uint8Array(cols * rows);
    const { cx, cy, s } = this.view;
    const ox = w / 2 - cx * s;
    const oy = h / 2 + cy * s;
    const labels = new Map(); // row -> [x, y, strong], in the order drawn
    ctx.font = font(false);
    // -1: off screen, 0: no room, 1: placed.
    const place = (i, strong, force) => {
      if (!this.labels) return 0;
      const px = this.x[i] * s + ox;
      const py = oy - this.y[i] * s;
      if (px < 0 || py < 0 || px > w || py > h) return -1;
      const x0 = px + 5 * unit;
      const c0 = Math.max(0, Math.floor(x0 / cell));
      const r0 = Math.max(0, Math.floor((py - 7 * unit) / cell));
      const r1 = Math.min(rows - 1, Math.floor((py + 7 * unit) / cell));
      if (!force && (c0 >= cols || taken[r0 * cols + c0] || taken[r1 * cols + c0])) return 0; // cheap test first
      const tw = ctx.measureText(this.labels[i]).width;
      const c1 = Math.min(cols - 1, Math.floor((x0 + tw) / cell));
      if (!force) {
        if (x0 + tw > w) return 0;
        for (let r = r0; r <= r1; r++) for (let c = c0; c <= c1; c++) if (taken[r * cols + c]) return 0;
      }
      for (let r = r0; r <= r1; r++) for (let c = c0; c <= c1; c++) taken[r * cols + c] = 1;
      if (!labels.has(i)) labels.set(i, [x0, py, strong]);
      return 1;
    };
    if (this.selected >= 0) {
      const [sx, sy] = this.toPixel(this.selected);
      ctx.strokeStyle = "rgba(163,38,42,0.45)";
      ctx.lineWidth = 1 * this.dpr;
      for (const nb of this.neighbours) {
        const [nx, ny] = this.toPixel(nb.id);
        ctx.beginPath();
        ctx.moveTo(sx, sy);
        ctx.lineTo(nx, ny);
        ctx.stroke();
      }
      place(this.selected, true, true);
      for (const nb of this.neighbours) place(nb.id, true, false);
    }
    let placed = 0;
    let tried = 0; // visible rows tried: off-screen ones cost little
    const source = this.matches || null;
    const total = this.labels ? (source ? source.length : this.n) : 0;
    for (let j = 0; j < total && placed < AUTO_LABELS && tried < AUTO_SCAN; j++) {
      const outcome = place(source ? source[j] : j, false, false);
      if (outcome >= 0) tried++;
      if (outcome > 0) placed++;
    }
    this.labelled = [...labels.keys()];
    const hovered = this.hovered;
    if (hovered >= 0) {
      const spot = labels.get(hovered);
      labels.delete(hovered); // drawn last, strong
      if (spot) labels.set(hovered, [spot[0], spot[1], true]);
      else place(hovered, true, true);
    }
    ctx.textBaseline = "middle";
    ctx.lineJoin = "round";
    ctx.lineWidth = 3 * unit;
    ctx.strokeStyle = "rgba(255,255,255,0.9)";
    for (const [i, [x, y, strong]] of labels) {
      ctx.font = font(strong);
      ctx.strokeText(this.labels[i], x, y);
      ctx.fillStyle = strong ? "#7a1a1a" : "#1d2430";
      ctx.fillText(this.labels[i], x, y);
    }
  }

  // ------------------------------------------------------------------ search and selection
  /** Put a search from a link in the box: a substring runs once the labels are in; a regular expression waits
   * for Enter, since a link can carry one that backtracks for minutes over every label. */
  setSearch(text) {
    this.root.querySelector(".tm-search").value = text;
    this.held = SLASHED.test(text);
  }

  /** Highlight the rows whose label matches: a substring (case-insensitive), or /regular expression/flags, tested
   * in a worker (``regexsearch.js``) and stopped after ``REGEX_SECONDS``. An invalid or stopped expression
   * highlights nothing (the rows of the one before would not be what the box says) and says why. True once this
   * search's matches are shown (not when a later search took its place meanwhile). */
  async runSearch() {
    const input = this.root.querySelector(".tm-search");
    const text = input.value;
    const out = this.root.querySelector(".tm-matches");
    const search = ++this.searches;
    this.stopRegex();
    input.removeAttribute("aria-invalid");
    if (!text) return this.unhighlight("");
    if (this.held) return this.unhighlight("a regular expression from the link: press Enter to run it");
    if (!this.labels) {
      out.textContent = this.labelsLost ? "no labels to search: they could not be loaded" : "labels loading…";
      return false;
    }
    let found = [];
    let exact = -1; // a substring search's row whose whole label it is
    const rows = Math.min(this.n, this.labels.length); // a t-SNE map holds the first rows only
    const slashed = SLASHED.exec(text);
    if (slashed) {
      const flags = slashed[2].replace(/[gy]/g, "");
      try {
        new RegExp(slashed[1], flags);
      } catch (err) {
        input.setAttribute("aria-invalid", "true");
        return this.unhighlight(`not a regular expression: ${err.message}`);
      }
      this.unhighlight("searching…"); // the rows of the search before are not what the box says
      found = await this.testLabels(slashed[1], flags, rows);
      if (search !== this.searches) return false;
      if (found === null) {
        return this.unhighlight(`stopped after ${REGEX_SECONDS} s: the expression takes too long over the labels ` +
          "(a repeat inside a repeat, as in (a+)+, can take minutes)");
      }
    } else {
      if (!this.lower) this.lower = this.labels.map((label) => label.toLowerCase());
      const needle = text.toLowerCase();
      for (let i = 0; i < rows; i++) {
        if (!this.lower[i].includes(needle)) continue;
        found.push(i);
        if (exact < 0 && this.lower[i].length === needle.length) exact = i;
      }
    }
    this.matches = Int32Array.from(found);
    this.matchSet = new Uint8Array(this.n);
    for (const i of this.matches) this.matchSet[i] = 1;
    this.setDim(true);
    out.textContent = `${found.length.toLocaleString("en")} match${found.length === 1 ? "" : "es"}` +
      (found.length ? ` (Enter zooms to them)` : "");
    this.root.dataset.matches = String(found.length);
    const first = Array.from(found.slice(0, PICKS + 1)).filter((i) => i !== exact);
    this.listPicks((exact < 0 ? first : [exact, ...first]).slice(0, PICKS));
    this.request();
    return true;
  }

  /** The first ``rows`` labels' ids that the expression (``source``, ``flags``) matches, tested in the worker
   * (started, and given the labels, when it has none or another table's); null when it ran past its time. */
  testLabels(source, flags, rows) {
    if (!this.regexWorker || this.regexWorker.labels !== this.labels) {
      this.regexWorker?.terminate();
      this.regexWorker = new Worker("/static/regexsearch.js");
      this.regexWorker.labels = this.labels;
      this.regexWorker.postMessage({ labels: this.labels });
    }
    const worker = this.regexWorker;
    return new Promise((resolve) => {
      const stop = () => {
        worker.terminate(); // it may be testing a label for minutes: a new one takes the next search
        if (this.regexWorker === worker) this.regexWorker = null;
        this.stopRegex = () => {};
        resolve(null);
      };
      const timer = setTimeout(stop, REGEX_SECONDS * 1000);
      this.stopRegex = () => {
        clearTimeout(timer);
        stop();
      };
      worker.onmessage = ({ data }) => {
        clearTimeout(timer);
        this.stopRegex = () => {};
        resolve(data.rows);
      };
      worker.postMessage({ source, flags, rows });
    });
  }

  /** A button named by row ``i``'s label that takes the map there and lists its neighbours: the keyboard's way
   * to a row, as a click on its point is the mouse's (``className``: how it looks). */
  goButton(i, className) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = className;
    button.textContent = this.labels[i];
    button.title = `Go to ${this.labels[i]} on the map and list its neighbours`;
    button.addEventListener("click", () => this.goTo(i));
    return button;
  }

  /** Buttons for rows ``ids`` (a search's first matches). */
  listPicks(ids) {
    this.picks.replaceChildren(...ids.map((i) => {
      const item = document.createElement("li");
      item.append(this.goButton(i, "chip"));
      return item;
    }));
    this.picks.hidden = !ids.length;
  }

  /** No rows highlighted, ``note`` in place of the count. */
  unhighlight(note) {
    this.matches = null;
    this.setDim(false);
    this.root.querySelector(".tm-matches").textContent = note;
    this.root.dataset.matches = "";
    this.listPicks([]);
    this.request();
    return false;
  }

  setDim(dim) {
    if (this.dim === dim) return;
    this.dim = dim;
    this.buildLUT();
  }

  async select(i) {
    this.selected = i;
    this.neighbours = [];
    this.request();
    if (i < 0) {
      this.panel.replaceChildren();
      this.root.dataset.selected = "";
      return;
    }
    const generation = this.generation;
    const { ok, data } = await this.deps.fetchJSON(this.path(`neighbors?id=${i}&k=8`));
    if (generation !== this.generation || this.selected !== i) return;
    if (!ok) {
      this.deps.show(this.panel, data.error?.message || "no neighbours");
      return;
    }
    this.neighbours = data.neighbors;
    const label = this.labels ? this.labels[i] : data.query?.token || `row ${i}`;
    const list = document.createElement("ol");
    list.className = "scores";
    for (const nb of data.neighbors) {
      const item = document.createElement("li");
      const button = document.createElement("button");
      button.type = "button";
      button.className = "token";
      button.textContent = nb.token;
      button.title = `Go to ${nb.token} on the map`;
      button.addEventListener("click", () => this.goTo(nb.id));
      const score = document.createElement("span");
      score.className = "score";
      score.textContent = nb.score.toFixed(3);
      item.append(button, score);
      list.append(item);
    }
    const title = document.createElement("p");
    title.className = "muted";
    title.textContent = `Nearest to “${label}” (row ${i}), marked on the map:`;
    this.deps.show(this.panel, title, list); // Enter on a neighbour: the keyboard goes on from its list
    this.root.dataset.selected = String(i);
    this.request();
  }

  goTo(i) {
    this.view.cx = this.x[i];
    this.view.cy = this.y[i];
    this.view.s = Math.max(this.view.s, this.fitScale * 20);
    this.select(i);
  }

  /** Rows to export: the search matches, else the rows in view; at most ``limit``, most frequent first. */
  selection(limit) {
    if (this.matches) return Array.from(this.matches.slice(0, limit));
    const out = [];
    const w = this.canvas.width;
    const h = this.canvas.height;
    for (let i = 0; i < this.n && out.length < limit; i++) {
      const [px, py] = this.toPixel(i);
      if (px >= 0 && py >= 0 && px < w && py < h) out.push(i);
    }
    return out;
  }

  // ------------------------------------------------------------------ events
  wire() {
    const canvas = this.canvas;
    // The pointer pressed on the map: a mouse or a pen drags it, a finger only taps (two move it: touches below).
    let drag = null;
    canvas.addEventListener("pointerdown", (event) => {
      if (drag) {
        drag.moved = Infinity; // a second finger: no tap
        return;
      }
      canvas.setPointerCapture(event.pointerId);
      drag = { id: event.pointerId, x: event.clientX, y: event.clientY, moved: 0, touch: event.pointerType === "touch" };
    });
    canvas.addEventListener("pointermove", (event) => {
      if (drag) {
        if (event.pointerId !== drag.id) return;
        const dx = event.clientX - drag.x;
        const dy = event.clientY - drag.y;
        drag.moved += Math.abs(dx) + Math.abs(dy);
        drag.x = event.clientX;
        drag.y = event.clientY;
        if (!drag.touch) this.pan(dx, dy);
        return;
      }
      const rect = canvas.getBoundingClientRect();
      const i = this.nearest(event.clientX - rect.left, event.clientY - rect.top);
      if (i !== this.hovered) {
        this.hovered = i;
        canvas.title = i >= 0 && this.labels ? this.labels[i] : "";
        this.request();
      }
    });
    canvas.addEventListener("pointerup", (event) => {
      if (!drag || event.pointerId !== drag.id) return;
      const wasClick = drag.moved < 4;
      drag = null;
      if (!wasClick) return;
      const rect = canvas.getBoundingClientRect();
      this.select(this.nearest(event.clientX - rect.left, event.clientY - rect.top));
    });
    canvas.addEventListener("pointercancel", () => {
      drag = null; // the browser took the finger: it scrolls the page
    });
    // One finger scrolls the page (style.css: touch-action pan-x pan-y), as a phone's user expects of a map in a
    // page (Google Maps' and Mapbox's cooperative gestures), and is told that two move the map; two fingers pan
    // and pinch-zoom it.
    let pinch = null;
    const fingers = ({ touches: [a, b] }) => {
      const rect = canvas.getBoundingClientRect();
      return {
        x: (a.clientX + b.clientX) / 2 - rect.left,
        y: (a.clientY + b.clientY) / 2 - rect.top,
        d: Math.hypot(a.clientX - b.clientX, a.clientY - b.clientY),
      };
    };
    canvas.addEventListener("touchstart", (event) => {
      if (event.touches.length < 2) return;
      event.preventDefault();
      pinch = fingers(event);
      this.showHint("");
    }, { passive: false });
    canvas.addEventListener("touchmove", (event) => {
      if (event.touches.length < 2 || !pinch) {
        if (event.touches.length === 1) this.showHint(HINTS.touch);
        return;
      }
      if (!event.cancelable) return; // the page scrolls already
      event.preventDefault();
      const now = fingers(event);
      this.pan(now.x - pinch.x, now.y - pinch.y);
      if (pinch.d > 0 && now.d > 0) this.zoom(now.d / pinch.d, now.x, now.y);
      pinch = now;
    }, { passive: false });
    const lift = (event) => {
      if (event.touches.length < 2) pinch = null;
    };
    canvas.addEventListener("touchend", lift);
    canvas.addEventListener("touchcancel", lift);
    canvas.addEventListener("pointerleave", () => {
      if (this.hovered >= 0) {
        this.hovered = -1;
        this.request();
      }
    });
    // The wheel scrolls the page over the map too (a map most of the screen high would otherwise catch a reader
    // scrolling by) and says how to zoom; with Ctrl or ⌘ held it zooms the map about the pointer, as does a
    // touchpad's pinch, which browsers send as a wheel with ctrlKey set (Google Maps' cooperative gestures).
    canvas.addEventListener("wheel", (event) => {
      if (!event.ctrlKey && !event.metaKey) {
        this.showHint(HINTS.wheel);
        return;
      }
      event.preventDefault(); // the page itself is not zoomed
      this.showHint("");
      const rect = canvas.getBoundingClientRect();
      const pixels = event.deltaY * (WHEEL_PIXELS[event.deltaMode] ?? 1);
      this.zoom(Math.exp(-pixels * 0.0015), event.clientX - rect.left, event.clientY - rect.top);
    }, { passive: false });
    canvas.addEventListener("keydown", (event) => {
      const step = 40;
      const keys = {
        ArrowLeft: () => this.pan(step, 0), ArrowRight: () => this.pan(-step, 0),
        ArrowUp: () => this.pan(0, step), ArrowDown: () => this.pan(0, -step),
        "+": () => this.zoom(1.5), "=": () => this.zoom(1.5), "-": () => this.zoom(1 / 1.5), 0: () => this.fit(),
        Escape: () => this.select(-1),
      };
      if (keys[event.key]) {
        event.preventDefault();
        keys[event.key]();
      }
    });
    this.root.querySelector(".tm-zoom-in").addEventListener("click", () => this.zoom(1.5));
    this.root.querySelector(".tm-zoom-out").addEventListener("click", () => this.zoom(1 / 1.5));
    this.root.querySelector(".tm-fit").addEventListener("click", () => this.fit());
    const search = this.root.querySelector(".tm-search");
    let timer = 0;
    search.addEventListener("input", () => {
      this.held = false;
      clearTimeout(timer);
      timer = setTimeout(() => this.runSearch(), 120);
      this.deps.onSearch?.(search.value);
    });
    search.addEventListener("keydown", async (event) => {
      if (event.key !== "Enter") return;
      event.preventDefault();
      clearTimeout(timer);
      this.held = false;
      if ((await this.runSearch()) && this.matches.length) this.fit(this.matches);
    });
    this.root.querySelector(".tm-colour").addEventListener("change", async (event) => {
      if (await this.colourBy(event.target.value)) this.noteColours(""); // the refusal before is past
    });
    new ResizeObserver(() => this.resize()).observe(canvas);
  }
}
