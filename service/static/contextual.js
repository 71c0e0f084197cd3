// The Contextual vectors card of a transformer table (POST .../contextual): a word's last-layer vector at each
// place it occurs in a few sentences, beside the word's static row (its input row): their cosines side by side,
// a map of them on their own first two principal components, and each one's nearest rows of the input table.

export const DEFAULT_TEXTS = [
  "the river bank was muddy",
  "she deposited money at the bank",
  "we fished from the bank of the river",
].join("\n");
export const DEFAULT_WORD = "bank";
const K = 5; // nearest input rows per vector
const STATIC_COLOUR = "#555555";
// A text's colour is also its words' ink and their background under white: each is 4.5:1 or more against white.
const PALETTE = ["#0072b2", "#bb5300", "#008460", "#bb4d8a", "#996a00", "#6a3d9a", "#7f6d00"];
const SPECIAL = new Set(["[CLS]", "[SEP]", "[PAD]", "<s>", "</s>"]);

/** The sentences of the text box: one a line, blank lines left out. */
export const sentences = (text) => text.split("\n").map((line) => line.trim()).filter(Boolean);

/** Eigenvalues and eigenvectors (columns of ``vectors``) of a small symmetric matrix, by Jacobi rotations. */
function eigen(matrix) {
  const n = matrix.length;
  const a = matrix.map((row) => [...row]);
  const v = a.map((_, i) => a.map((__, j) => (i === j ? 1 : 0)));
  for (let sweep = 0; sweep < 100; sweep++) {
    let off = 0;
    for (let p = 0; p < n; p++) for (let q = p + 1; q < n; q++) off += a[p][q] * a[p][q];
    if (off < 1e-22) break;
    for (let p = 0; p < n; p++) {
      for (let q = p + 1; q < n; q++) {
        if (Math.abs(a[p][q]) < 1e-300) continue;
        const theta = (a[q][q] - a[p][p]) / (2 * a[p][q]);
        const t = Math.sign(theta || 1) / (Math.abs(theta) + Math.sqrt(theta * theta + 1));
        const c = 1 / Math.sqrt(t * t + 1);
        const s = t * c;
        for (let k = 0; k < n; k++) { // columns p and q
          const akp = a[k][p];
          const akq = a[k][q];
          a[k][p] = c * akp - s * akq;
          a[k][q] = s * akp + c * akq;
        }
        for (let k = 0; k < n; k++) { // rows p and q
          const apk = a[p][k];
          const aqk = a[q][k];
          a[p][k] = c * apk - s * aqk;
          a[q][k] = s * apk + c * aqk;
        }
        for (let k = 0; k < n; k++) {
          const vkp = v[k][p];
          const vkq = v[k][q];
          v[k][p] = c * vkp - s * vkq;
          v[k][q] = s * vkp + c * vkq;
        }
      }
    }
  }
  return { values: a.map((row, i) => row[i]), vectors: v };
}

/** The rows of ``points`` (vectors) on their first two principal components: {coords: [[x, y]], variance}, the
 * share of the variance each axis carries. Each axis points so that its largest coordinate is positive. */
export function pca2(points) {
  const n = points.length;
  const dim = points[0].length;
  const mean = new Float64Array(dim);
  for (const p of points) for (let j = 0; j < dim; j++) mean[j] += p[j] / n;
  const centred = points.map((p) => Float64Array.from(p, (x, j) => x - mean[j]));
  const gram = centred.map((a) => centred.map((b) => a.reduce((sum, x, j) => sum + x * b[j], 0)));
  const { values, vectors } = eigen(gram);
  const order = values.map((_, i) => i).sort((i, j) => values[j] - values[i]);
  const total = values.reduce((sum, x) => sum + Math.max(x, 0), 0) || 1;
  const axes = [0, 1].map((rank) => {
    const i = order[rank];
    if (i === undefined) return { coords: new Array(n).fill(0), share: 0 };
    const scale = Math.sqrt(Math.max(values[i], 0));
    let coords = vectors.map((row) => row[i] * scale);
    const top = coords.reduce((best, x) => (Math.abs(x) > Math.abs(best) ? x : best), 0);
    if (top < 0) coords = coords.map((x) => -x);
    return { coords, share: Math.max(values[i], 0) / total };
  });
  return { coords: points.map((_, k) => [axes[0].coords[k], axes[1].coords[k]]), variance: axes.map((a) => a.share) };
}

/** A text's tokens as words: the model's word pieces (``##ache``) joined to the piece before them, special
 * tokens left out; each word with the positions of its pieces. */
function words(tokens) {
  const out = [];
  tokens.forEach((token, position) => {
    if (SPECIAL.has(token.token)) return;
    const last = out[out.length - 1];
    if (token.token.startsWith("##") && last) {
      last.word += token.token.slice(2);
      last.positions.push(position);
    } else {
      out.push({ word: token.token, positions: [position] });
    }
  });
  return out;
}

export class Contextual {
  /**
   * @param {HTMLElement} root the card
   * @param {{api: Function, tablePath: Function, el: Function, svg: Function, errorBox: Function,
   *          scoreList: Function, onPickRow: Function, state: object, writeURL: Function}} deps the page's helpers
   *          and its URL state (keys ctx: the sentences, cw: the word)
   */
  constructor(root, deps) {
    this.root = root;
    this.deps = deps;
    this.ticket = 0;
    this.last = null; // {texts, word, data, map}: the latest answer shown
    this.$("cx-form").addEventListener("submit", (event) => {
      event.preventDefault();
      this.submit();
    });
    this.$("cx-texts").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) this.$("cx-form").requestSubmit();
    });
  }

  $(id) {
    return this.root.querySelector(`#${id}`);
  }

  texts() {
    return this.deps.state.ctx || DEFAULT_TEXTS;
  }

  /** Show the card's inputs as the URL state says and answer them. */
  open() {
    this.$("cx-texts").value = this.texts();
    this.$("cx-word").value = this.deps.state.cw;
    return this.run();
  }

  submit() {
    const texts = this.$("cx-texts").value.trim();
    Object.assign(this.deps.state, {
      ctx: texts === DEFAULT_TEXTS ? "" : texts, cw: this.$("cx-word").value.trim(),
    });
    this.deps.writeURL(true);
    return this.run();
  }

  pick(word) {
    this.$("cx-word").value = word;
    return this.submit();
  }

  async run() {
    const { el, api, tablePath, errorBox } = this.deps;
    const out = this.$("cx-out");
    const texts = sentences(this.$("cx-texts").value);
    const word = this.$("cx-word").value.trim();
    const ticket = ++this.ticket;
    if (texts.length < 2) {
      this.last = null;
      return out.replaceChildren(el("p", { class: "muted" }, "Type two sentences or more, one a line."));
    }
    out.setAttribute("aria-busy", "true");
    const body = { texts, k: K, ...(word ? { token: word } : {}) };
    let answer = await api(tablePath("contextual"), body);
    let failure = null;
    if (!answer.ok && word && answer.status === 422) { // the word is not in them: show their words to pick from
      failure = answer;
      answer = await api(tablePath("contextual"), { texts, k: K });
    }
    if (ticket !== this.ticket) return;
    out.removeAttribute("aria-busy");
    if (!answer.ok) {
      this.last = null;
      return out.replaceChildren(errorBox((failure || answer).data.error || {}));
    }
    const data = answer.data;
    const view = data.token || null;
    this.last = { texts, word, data, map: null };
    const parts = [];
    if (failure) parts.push(errorBox(failure.data.error || {}));
    parts.push(this.textList(data, view));
    if (!view) {
      parts.push(el("p", { class: "muted cx-prompt" }, "Pick a word above to follow it through the sentences."));
    } else {
      parts.push(this.matrix(data, view), this.map(data, view), this.neighbours(data, view));
    }
    out.replaceChildren(...parts);
  }

  /** The sentences as the model split them, each word a button that picks it, the chosen word's places marked. */
  textList(data, view) {
    const { el } = this.deps;
    const marked = new Map(); // text -> positions of the word's pieces there
    for (const o of view?.occurrences || []) {
      const at = marked.get(o.text) || new Set();
      for (let i = 0; i < view.pieces.length; i++) at.add(o.position + i);
      marked.set(o.text, at);
    }
    const list = el("ol", { class: "cx-texts" });
    data.texts.forEach((text, t) => {
      const at = marked.get(t) || new Set();
      const line = el("li", { "data-text": String(t) });
      line.style.setProperty("--cx-colour", PALETTE[t % PALETTE.length]);
      for (const { word, positions } of words(text.tokens)) {
        const hit = positions.some((p) => at.has(p));
        line.append(el("button", {
          type: "button", class: `cx-word${hit ? " cx-hit" : ""}`, title: `Follow “${word}”`,
          onclick: () => this.pick(word),
        }, word), " ");
      }
      if (text.truncated) line.append(el("span", { class: "muted" }, "(cut to the model's length)"));
      list.append(line);
    });
    return list;
  }

  /** The points: the static row, then each occurrence (its text's colour). */
  points(data, view) {
    const word = view.token;
    return [
      { label: `${word} (static row)`, short: "static", vector: view.static.vector, colour: STATIC_COLOUR },
      ...view.occurrences.map((o) => ({
        label: `${word} in ${o.text + 1}`, short: `${word} · ${o.text + 1}`, vector: o.vector,
        colour: PALETTE[o.text % PALETTE.length], text: o.text,
      })),
    ];
  }

  /** Cosines side by side: the static row and each occurrence against each other. */
  matrix(data, view) {
    const { el } = this.deps;
    const points = this.points(data, view);
    const n = points.length;
    const cosine = (i, j) => {
      if (i === j) return 1;
      if (i === 0 || j === 0) return view.occurrences[Math.max(i, j) - 1].static_cosine;
      return view.cosines[i - 1][j - 1];
    };
    const head = el("tr", {}, el("th", { scope: "col" }, el("span", { class: "sr-only" }, "cosine")));
    for (const p of points) head.append(el("th", { scope: "col", style: `color:${p.colour}` }, p.short));
    const rows = points.map((p, i) => {
      const row = el("tr", {}, el("th", { scope: "row", style: `color:${p.colour}` }, p.label));
      for (let j = 0; j < n; j++) {
        const value = cosine(i, j);
        const shade = Math.round(Math.max(0, Math.min(1, value)) * 40);
        row.append(el("td", { class: i === j ? "cx-self" : "", style: i === j ? "" : `--cx-shade:${shade}%` },
          value.toFixed(3)));
      }
      return row;
    });
    const split = view.pieces.length > 1
      ? ` (“${view.token}” is ${view.pieces.map((p) => p.token).join(" ")}: each vector is the mean of its pieces')`
      : "";
    return el("div", { class: "cx-block" },
      el("h3", {}, "Cosines"),
      el("p", { class: "muted cx-note" }, `The static row is “${view.token}”'s input row${split}; each other ` +
        "column is its last-layer vector in that sentence."),
      el("div", { class: "cx-scroll" }, el("table", { class: "cx-matrix" }, el("thead", {}, head), el("tbody", {}, ...rows))));
  }

  /** The vectors on their own first two principal components. */
  map(data, view) {
    const { el, svg } = this.deps;
    const points = this.points(data, view);
    const { coords, variance } = pca2(points.map((p) => p.vector));
    this.last.map = { coords, variance, labels: points.map((p) => p.label) };
    const width = 560;
    const height = 300;
    const pad = { left: 30, right: 110, top: 16, bottom: 30 };
    const xs = coords.map((c) => c[0]);
    const ys = coords.map((c) => c[1]);
    const scale = (lo, hi, a, b) => (v) => (hi - lo < 1e-12 ? (a + b) / 2 : a + ((v - lo) / (hi - lo)) * (b - a));
    const sx = scale(Math.min(...xs), Math.max(...xs), pad.left + 16, width - pad.right);
    const sy = scale(Math.min(...ys), Math.max(...ys), height - pad.bottom - 16, pad.top + 10);
    const pct = (v) => `${(v * 100).toFixed(1)}%`;
    const plot = svg("svg", {
      viewBox: `0 0 ${width} ${height}`, width, height, role: "img", class: "scatter cx-map",
      "aria-label": `Map of “${view.token}”: its static row and ${view.occurrences.length} contextual vectors ` +
        "on their first two principal components",
    });
    plot.append(
      svg("line", { x1: pad.left, y1: height - pad.bottom, x2: width - 16, y2: height - pad.bottom, class: "axis" }),
      svg("line", { x1: pad.left, y1: pad.top, x2: pad.left, y2: height - pad.bottom, class: "axis" }),
      svg("text", { x: width - 16, y: height - 8, "text-anchor": "end", class: "axis-label" },
        `PC1 · ${pct(variance[0])}`),
      svg("text", { x: 12, y: pad.top, transform: `rotate(-90 12 ${pad.top})`, "text-anchor": "end", class: "axis-label" },
        `PC2 · ${pct(variance[1])}`),
    );
    points.forEach((p, i) => {
      const [cx, cy] = [sx(coords[i][0]), sy(coords[i][1])];
      const g = svg("g", { class: "point", "data-x": String(coords[i][0]), "data-y": String(coords[i][1]) });
      const mark = i === 0
        ? svg("rect", { x: cx - 5, y: cy - 5, width: 10, height: 10, fill: p.colour, class: "cx-static" })
        : svg("circle", { cx, cy, r: 6, fill: p.colour });
      g.append(mark, svg("text", { x: cx + 9, y: cy + 4 }, p.short), svg("title", {}, p.label));
      plot.append(g);
    });
    const shown = ((variance[0] + variance[1]) * 100).toFixed(1);
    return el("div", { class: "cx-block" },
      el("h3", {}, "Map"),
      plot,
      el("p", { class: "muted cx-note" }, `The static row (square) and the word in each sentence, on the first two ` +
        `principal components of these ${points.length} vectors (${shown}% of their variance). Near points are ` +
        "alike."));
  }

  /** Each vector's nearest rows of the model's input table, side by side. */
  neighbours(data, view) {
    const { el, scoreList, onPickRow } = this.deps;
    const points = this.points(data, view);
    const lists = [view.static.neighbors, ...view.occurrences.map((o) => o.neighbors)];
    const columns = points.map((p, i) => el("div", { class: "cx-side", "data-point": String(i) },
      el("h4", { style: `color:${p.colour}` }, p.label),
      i > 0 ? el("p", { class: "muted cx-sentence" }, data.texts[p.text].text) : null,
      scoreList(lists[i], onPickRow)));
    return el("div", { class: "cx-block" },
      el("h3", {}, `Nearest rows of the input table (${K} each)`),
      el("div", { class: "cx-grid" }, ...columns));
  }
}
