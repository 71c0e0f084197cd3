// Embedding explorer: a small page over the JSON API (no build step, no dependencies).

import { Contextual, DEFAULT_WORD } from "/static/contextual.js";
import { DocumentSearch, textModes } from "/static/documents.js";
import { statusMessage, TableMap, unreachable } from "/static/tablemap.js";

const K_NEIGHBOURS = 8;
const K_ANALOGY = 5;
const K_CLOSER = 10; // closer-than: the first words listed, most similar first
const K_COMPARE = 10;
const METHOD_NAMES = { tsne: "t-SNE", umap: "UMAP" };
const METHOD_PARAM = { tsne: "perplexity", umap: "n_neighbors" }; // the one parameter the page sets besides seed
const PALETTE = ["#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#7f6d00", "#555555"];
const DEFAULT_WORDS = [
  "colours: red green blue yellow purple orange",
  "numbers: one two three four five six",
  "body parts: hand foot head eye heart arm",
  "animals: dog cat horse cow bird fish",
  "people and pronouns: man woman king queen he she",
].join("\n");
const DEFAULTS = {
  table: "", word: "", a: "man", b: "king", c: "woman", expect: "", method: "3cosadd", x: "cat", y: "dog", words: "",
  axes: "", proj: "", q: "", doc: "", filter: "", offset: "", per: "", text: "", mode: "", ctx: "", cw: DEFAULT_WORD,
};
const URL_KEYS = Object.keys(DEFAULTS);
const WORD_KEYS = ["word", "a", "b", "c", "expect", "method", "x", "y", "words", "axes", "proj", "q"];
/** The URL keys each kind of table's cards read, besides ``table``: a link holds only what applies to its table. */
const KEYS_OF_KIND = {
  words: WORD_KEYS,
  tokens: WORD_KEYS,
  transformer: [...WORD_KEYS, "ctx", "cw"],
  documents: ["doc", "filter", "offset", "per", "text", "mode"],
};
/** Each kind's name in the picker and the cards it gets, as the header says them. */
const KIND_NAMES = { words: "words", tokens: "model tokens", transformer: "transformer model", documents: "documents" };
const KIND_CARDS = {
  words: "word cards", tokens: "word cards", transformer: "word cards + Contextual vectors", documents: "Search card",
};
const MAX_QUERY = 16_000; // characters of the URL's query, well inside the server's limit on a request's head
// A table stepped to with the keyboard on the closed picker (each arrow key picks the next) is used once the steps
// have stopped this long, or on Enter or leaving the picker: the tables passed over are not asked for.
const TABLE_SETTLE_MS = 250;

const $ = (id) => document.getElementById(id);
const state = { ...DEFAULTS };
const pending = {}; // section -> number of its latest request, so stale answers are dropped
let lastMap = null;
let config = { default_table: null, tsne_rows: 0, tsne_available: false, map_install: "the map extra", max_export_rows: 50000 };
let tableMap = null;
let documentSearch = null;
let contextual = null;
let tables = []; // GET /v1/tables

// ------------------------------------------------------------------ helpers
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key === "style") node.style.cssText = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
}

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

/** The server's key, when it asks for one: kept for this tab only (sessionStorage), never in the URL. */
const KEY_STORE = "embedding-explorer-api-key";

/** ``fetch`` with the key typed in, if any, as ``X-API-Key``; a 401 shows the key form. */
async function apiFetch(path, init = {}) {
  const key = sessionStorage.getItem(KEY_STORE);
  const headers = { ...(init.headers || {}), ...(key ? { "X-API-Key": key } : {}) };
  const response = await fetch(path, { ...init, headers });
  if (response.status === 401 || response.status === 403) askKey(); // no key, or a wrong one
  return response;
}

/** Call the API; resolves to {ok, status, data} (data is the JSON body, or an error envelope). */
async function api(path, body) {
  const init = body === undefined ? {} : {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body),
  };
  try {
    const response = await apiFetch(path, init);
    const data = await response.json().catch(() => ({ error: { message: statusMessage(response) } }));
    return { ok: response.ok, status: response.status, data };
  } catch (err) {
    return { ok: false, status: 0, data: { error: { message: unreachable(err) } } };
  }
}

/** An API path of the table picked, or of ``table``. */
const tablePath = (suffix, table = state.table) => `/v1/tables/${encodeURIComponent(table)}/${suffix}`;

function begin(section, out) {
  pending[section] = (pending[section] || 0) + 1;
  out.setAttribute("aria-busy", "true");
  const ticket = pending[section];
  return () => {
    if (ticket !== pending[section]) return false;
    out.removeAttribute("aria-busy");
    return true;
  };
}

/** Put ``nodes`` in ``out``. When the focus was on something there (a neighbour, a suggestion), it goes to ``out``
 * itself, so the keyboard goes on from the new answer instead of from the top of the page. */
function show(out, ...nodes) {
  const focused = out.contains(document.activeElement);
  out.replaceChildren(...nodes);
  if (focused) {
    out.tabIndex = -1;
    out.focus({ preventScroll: true });
  }
}

/** Show ``nodes`` (none: nothing) as a section's answer without asking, dropping any answer still on its way. */
function settle(section, out, ...nodes) {
  pending[section] = (pending[section] || 0) + 1;
  out.removeAttribute("aria-busy");
  show(out, ...nodes);
}

/** An error's box; its suggestions are buttons calling ``onPick`` when they are words (those of an unknown table,
 * withdrawn while the page was open, are table names: the picker above takes them, a word card does not). */
function errorBox(error, onPick) {
  const box = el("div", { class: "error", role: "alert" }, el("p", {}, error.message || "Something went wrong."));
  const suggestions = error.suggestions || [];
  const pick = error.code === "unknown_table" ? null : onPick;
  if (suggestions.length) {
    const list = el("ul", { class: "chips", "aria-label": "Suggestions" });
    for (const word of suggestions) {
      const item = pick ? el("button", { type: "button", class: "chip", onclick: () => pick(word) }, word) : word;
      list.append(el("li", {}, item));
    }
    box.append(el("p", { class: "muted" }, "Did you mean:"), list);
  }
  return box;
}

/** A suggestion picker that puts the chosen word in place of the unknown one and submits the form again. */
function replaceUnknown(error, formId) {
  const inputs = [...$(formId).querySelectorAll("input")].filter((input) => input.value.trim() === error?.token);
  if (!inputs.length) return null;
  return (word) => {
    for (const input of inputs) input.value = word;
    $(formId).requestSubmit();
  };
}

/** A row as a person reads it: a model token by the text it stands for, as the API's ``readable`` spells it
 * (``Ġheart`` and ``▁heart`` as "␣heart", a space shown as ␣; ``å¿ĥ`` as "心"; a control character by its code),
 * any other row by its label. A readable form that only drops a prefix (``##beat``'s "beat") keeps the label:
 * it alone tells the piece from the word. */
function rowLabel({ token, readable }) {
  if (readable === undefined || readable === null || token.endsWith(readable)) return token;
  const code = (c) => `U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}`;
  return readable.replaceAll(" ", "␣").replace(/[\u0000-\u001f\u007f-\u009f]/g, code);
}

function scoreList(neighbors, onPick, scale = 1) {
  const list = el("ol", { class: "scores" });
  for (const row of neighbors) {
    const { token, score } = row;
    const width = Math.max(0, Math.min(1, score / scale)) * 100;
    const title = `Neighbours of ${token}`; // the row's own label: what a search by it finds
    list.append(el("li", {},
      el("button", { type: "button", class: "token", onclick: () => onPick(token), title }, rowLabel(row)),
      el("span", { class: "bar", "aria-hidden": "true" }, el("span", { style: `width:${width.toFixed(1)}%` })),
      el("span", { class: "score" }, score.toFixed(3)),
    ));
  }
  return list;
}

// -------------------------------------------------------------------- state
function readURL() {
  const params = new URLSearchParams(location.search);
  for (const key of URL_KEYS) state[key] = params.get(key) ?? DEFAULTS[key];
  if (state.method !== "3cosmul") state.method = "3cosadd";
}

function writeURL(push = false) {
  const params = new URLSearchParams();
  for (const key of ["table", ...KEYS_OF_KIND[tableKind()]]) {
    if (state[key] !== DEFAULTS[key]) params.set(key, state[key]); // an emptied "bank" as "cw=": "" is no default
  }
  // A value too long for a link (a whole article as the text query) is used but left out, longest first.
  while (params.toString().length > MAX_QUERY) {
    const sized = [...params].map(([key, value]) => [encodeURIComponent(value).length, key]);
    params.delete(sized.sort((x, y) => y[0] - x[0])[0][1]);
  }
  const url = `${location.pathname}${params.size ? `?${params}` : ""}`;
  if (url === `${location.pathname}${location.search}`) return;
  history[push ? "pushState" : "replaceState"](null, "", url);
}

function fillInputs() {
  $("word").value = state.word;
  $("an-a").value = state.a;
  $("an-b").value = state.b;
  $("an-c").value = state.c;
  $("an-method").value = state.method;
  $("an-expect").value = state.expect;
  $("sim-a").value = state.x;
  $("sim-b").value = state.y;
  $("map-words").value = state.words || DEFAULT_WORDS;
  tableMap.setSearch(state.q);
  const pairs = axesOf(state.axes);
  ["ax-a", "ax-b", "ax-c", "ax-d"].forEach((id, i) => { $(id).value = pairs[i] || ""; });
  const [method, seed, param] = state.proj ? state.proj.split(",") : [];
  const nonlinear = METHOD_NAMES[method] ? method : "";
  $("map-seed").value = nonlinear ? seed || "" : "";
  $("map-perplexity").value = nonlinear === "tsne" ? param || "" : "";
  $("map-neighbors").value = nonlinear === "umap" ? param || "" : "";
  $(nonlinear ? `method-${nonlinear}` : pairs.length ? "axes-pairs" : "axes-pca").checked = true;
  showMethod();
}

/** The map's method, as the radio buttons say: "pca", "pairs", "tsne" or "umap". */
function mapMethod() {
  return document.querySelector("input[name=map-method]:checked")?.value || "pca";
}

function showMethod() {
  const method = mapMethod();
  $("axis-pairs").hidden = method !== "pairs";
  $("nonlinear").hidden = !METHOD_NAMES[method];
  for (const node of $("nonlinear").querySelectorAll("[data-for]")) node.hidden = node.dataset.for !== method;
  // A disabled input is not checked when the form is sent: a hidden one left invalid would block every draw unseen.
  for (const input of $("nonlinear").querySelectorAll("input")) input.disabled = input.hidden || $("nonlinear").hidden;
}

/** t-SNE or UMAP with its inputs as the URL keeps them ("tsne,seed,perplexity"), or "" for the other methods. */
function readProj() {
  const method = mapMethod();
  if (!METHOD_NAMES[method]) return "";
  const param = $(method === "tsne" ? "map-perplexity" : "map-neighbors").value.trim();
  return [method, $("map-seed").value.trim(), param].join(",").replace(/,+$/, "");
}

/** A method the server cannot compute (its package is missing): the radio button is disabled and says so in its
 * label, read with its name (a tooltip alone reaches neither a screen reader nor a finger); the reason on hover. */
function methodUnavailable(method, message) {
  const radio = $(`method-${method}`);
  if (!radio || radio.disabled) return;
  radio.disabled = true;
  radio.parentElement.title = message;
  radio.parentElement.classList.add("unavailable");
  radio.parentElement.append(" (not on this server)");
}

/** The axes inputs as the URL keeps them ("a,b,c,d"), or "" for the other methods. */
function readAxes() {
  if (mapMethod() !== "pairs") return "";
  const words = ["ax-a", "ax-b", "ax-c", "ax-d"].map((id) => $(id).value.trim());
  const escaped = words.map((w) => w.replaceAll("%", "%25").replaceAll(",", "%2C"));
  return words.some(Boolean) ? escaped.join(",") : "";
}

/** The four words of the axes' pairs, as readAxes wrote them (a comma of a word, "1,000", escaped). */
const axesOf = (axes) =>
  axes ? axes.split(",").map((w) => w.replace(/%2C|%25/gi, (escape) => (escape === "%25" ? "%" : ","))) : [];

// --------------------------------------------------------------- neighbours
function searchWord(word) {
  $("word").value = word;
  state.word = word;
  writeURL(true);
  runNeighbours();
}

async function runNeighbours() {
  const out = $("neighbours-out");
  if (!state.word) return settle("neighbours", out);
  const done = begin("neighbours", out);
  const { ok, data } = await api(tablePath(`neighbors?token=${encodeURIComponent(state.word)}&k=${K_NEIGHBOURS}`));
  if (!done()) return;
  if (!ok) return show(out, errorBox(data.error || {}, (w) => searchWord(w)));
  const query = data.query || {};
  const note = query.token && query.token !== state.word ? ` (matched “${query.token}”)` : "";
  show(out,
    el("p", { class: "muted" }, `Nearest to “${state.word}”${note}`),
    scoreList(data.neighbors, (w) => searchWord(w)),
  );
}

// ------------------------------------------------------------------ analogy
async function runAnalogy() {
  const out = $("analogy-out");
  const { a, b, c, expect, method } = state;
  if (!a || !b || !c) return settle("analogy", out);
  const done = begin("analogy", out);
  const body = { a, b, c, k: K_ANALOGY, method, ...(expect ? { expect } : {}) };
  const { ok, data } = await api(tablePath("analogy"), body);
  if (!done()) return;
  if (!ok) return show(out, errorBox(data.error || {}, replaceUnknown(data.error, "analogy-form")));
  const neighbors = data.neighbors || [];
  const best = neighbors[0];
  const top = Math.max(...neighbors.map((n) => n.score), 1e-9);
  show(out,
    el("p", { class: "answer" }, `${a} : ${b} :: ${c} : `, el("strong", {}, best ? rowLabel(best) : "—")),
    scoreList(neighbors, (w) => searchWord(w), method === "3cosmul" ? top : 1),
  );
  if (data.expect) out.append(expectation(data.expect));
}

/** Where the expected answer ranks among the candidates, its score and how far below the top answer it is. */
function expectation({ token, rank, score, margin }) {
  const where = rank === 1
    ? ["is the answer (", el("strong", { class: "expect-rank" }, "no. 1"), ")"]
    : ["ranks ", el("strong", { class: "expect-rank" }, `no. ${rank.toLocaleString("en")}`)];
  return el("p", { class: "expect" }, `Expected “${token}” `, ...where,
    `, score ${score.toFixed(3)}, margin ${margin.toFixed(3)} to the top answer.`);
}

// --------------------------------------------------------------- similarity
async function runSimilarity() {
  const out = $("similarity-out");
  const { x, y } = state;
  if (!x || !y) return settle("similarity", out);
  const done = begin("similarity", out);
  const { ok, data } = await api(tablePath(`similarity?a=${encodeURIComponent(x)}&b=${encodeURIComponent(y)}`));
  if (!done()) return;
  if (!ok) return show(out, errorBox(data.error || {}, replaceUnknown(data.error, "similarity-form")));
  const value = data.similarity;
  show(out,
    el("p", { class: "answer" }, `cos(${x}, ${y}) = `, el("strong", {}, value.toFixed(3))),
    el("span", { class: "bar wide", "aria-hidden": "true" },
      el("span", { style: `width:${(Math.max(0, value) * 100).toFixed(1)}%` })),
  );
}

// -------------------------------------------------------------- diagnostics
/** The words of a list: parted by spaces, and by commas but those inside a number ("1,000" is one word). */
const splitWords = (text) => text.split(/\s+|(?<!\d),|,(?!\d)/).filter(Boolean);
/** Words of a space-separated input. */
const wordsOf = (id) => splitWords($(id).value);

async function runOddOneOut() {
  const out = $("odd-out");
  const words = wordsOf("odd-words");
  if (!words.length) return settle("odd", out);
  if (words.length < 2) return settle("odd", out, el("p", { class: "muted" }, "Give two words or more."));
  const done = begin("odd", out);
  const { ok, data } = await api(tablePath("doesnt-match"), { words });
  if (!done()) return;
  if (!ok) return show(out, errorBox(data.error || {}, replaceInLists(data.error, "odd-form")));
  const unknown = data.unknown && data.unknown.length ? ` (not in the table: ${data.unknown.join(", ")})` : "";
  show(out,
    el("p", { class: "answer" }, "Odd one out: ", el("strong", {}, rowLabel(data.doesnt_match)), unknown),
    el("p", { class: "muted" }, "Each word's cosine with the mean of them all:"),
    scoreList(data.ranking, (w) => searchWord(w)),
  );
}

async function runRank() {
  const out = $("rank-out");
  const a = $("rank-a").value.trim();
  const b = $("rank-b").value.trim();
  if (!a || !b) return settle("rank", out);
  const done = begin("rank", out);
  const { ok, data } = await api(tablePath(`rank?a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}`));
  if (!done()) return;
  if (!ok) return show(out, errorBox(data.error || {}, replaceUnknown(data.error, "rank-form")));
  show(out,
    el("p", { class: "answer" }, `“${data.query.b.token}” is neighbour `, el("strong", {}, `no. ${data.rank}`),
      ` of “${data.query.a.token}” (cosine ${data.similarity.toFixed(3)})`),
  );
}

/** A suggestion picker that swaps the unknown word for the chosen one inside word-list inputs, then asks again. */
function replaceInLists(error, formId) {
  const inputs = [...$(formId).querySelectorAll("input")].filter((input) => wordsOf(input.id).includes(error?.token));
  if (!inputs.length) return null;
  return (word) => {
    for (const input of inputs) input.value = wordsOf(input.id).map((w) => (w === error.token ? word : w)).join(" ");
    $(formId).requestSubmit();
  };
}

async function runCloser() {
  const out = $("closer-out");
  const a = $("closer-a").value.trim();
  const b = $("closer-b").value.trim();
  if (!a || !b) return settle("closer", out);
  const done = begin("closer", out);
  const query = `a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}&order=score&limit=${K_CLOSER}`;
  const { ok, data } = await api(tablePath(`closer-than?${query}`));
  if (!done()) return;
  if (!ok) return show(out, errorBox(data.error || {}, replaceUnknown(data.error, "closer-form")));
  const [left, right] = [data.query.a.token, data.query.b.token];
  const count = data.count.toLocaleString("en");
  const head = data.count === 0
    ? [`No word is closer to “${left}” than “${right}” is: it is the nearest neighbour.`]
    : [el("strong", { class: "closer-count" }, count),
      ` word${data.count === 1 ? " is" : "s are"} closer to “${left}” than “${right}” is ` +
      `(cosine ${data.similarity.toFixed(3)})${data.count > data.words.length ? `; the ${data.words.length} nearest:` : ":"}`];
  show(out, el("p", { class: "answer" }, ...head));
  if (data.words.length) out.append(scoreList(data.words, (w) => searchWord(w)));
}

async function runSetSimilarity() {
  const out = $("nsim-out");
  const a = wordsOf("nsim-a");
  const b = wordsOf("nsim-b");
  if (!a.length || !b.length) return settle("nsim", out);
  const done = begin("nsim", out);
  const { ok, data } = await api(tablePath("n-similarity"), { a, b });
  if (!done()) return;
  if (!ok) return show(out, errorBox(data.error || {}, replaceInLists(data.error, "nsim-form")));
  const value = data.similarity;
  show(out,
    el("p", { class: "answer" }, `cos(mean of ${a.join(" ")}, mean of ${b.join(" ")}) = `,
      el("strong", {}, value.toFixed(3))),
    el("span", { class: "bar wide", "aria-hidden": "true" },
      el("span", { style: `width:${(Math.max(0, value) * 100).toFixed(1)}%` })),
  );
}

// ----------------------------------------------------------- compare tables
async function runCompare(word) {
  const out = $("compare-out");
  if (word !== undefined) $("cmp-word").value = word;
  const token = $("cmp-word").value.trim();
  const [first, second] = [$("cmp-first").value, $("cmp-second").value];
  if (!token || !first || !second) return settle("compare", out);
  const done = begin("compare", out);
  const query = new URLSearchParams({ first, second, token, k: K_COMPARE });
  const { ok, data } = await api(`/v1/compare?${query}`);
  if (!done()) return;
  if (!ok) return show(out, errorBox(data.error || {}, replaceUnknown(data.error, "compare-form")));
  const shared = new Set(data.shared);
  const column = (side) => {
    const list = scoreList(side.neighbors, (w) => runCompare(w));
    list.querySelectorAll("li").forEach((item, i) => {
      if (shared.has(side.neighbors[i].token)) item.classList.add("shared");
    });
    return el("div", { class: "compare-side" },
      el("h3", {}, side.table, el("span", { class: "muted" }, ` · “${side.query.token}”`)), list);
  };
  show(out,
    el("p", { class: "answer" }, `overlap@${data.k}: `, el("strong", { class: "overlap" }, data.overlap.toFixed(2)),
      ` (${data.shared.length} of ${data.k} in both lists, marked)`),
    el("div", { class: "compare-grid" }, column(data.first), column(data.second)),
  );
}

// ---------------------------------------------------------------------- map
/** "group: w1 w2" lines -> [{word, group}], first occurrence of each word kept. */
function parseWords(text) {
  const items = [];
  const seen = new Set();
  text.split("\n").forEach((line, i) => {
    const colon = line.indexOf(":");
    const group = colon >= 0 ? line.slice(0, colon).trim() || `group ${i + 1}` : "words";
    for (const word of splitWords(line.slice(colon + 1))) {
      if (word && !seen.has(word)) {
        seen.add(word);
        items.push({ word, group });
      }
    }
  });
  return items;
}

async function runMap() {
  const out = $("map-out");
  $("map-export-out").replaceChildren(); // an export's error belongs to the map before
  const items = parseWords($("map-words").value);
  if (items.length < 2) {
    lastMap = null;
    return settle("map", out, el("p", { class: "muted" }, "Give two words or more to map."));
  }
  const done = begin("map", out);
  const table = state.table;
  const body = { tokens: items.map((item) => item.word), method: "pca", skip_unknown: true };
  const [xa, xb, ya, yb] = axesOf(state.axes);
  const [method, seed, param] = state.proj ? state.proj.split(",") : [];
  if (METHOD_NAMES[method]) {
    body.method = method;
    if (seed) body.seed = Number(seed);
    if (param) body[METHOD_PARAM[method]] = Number(param);
    const first = method === "umap" ? " The first UMAP after a server start takes longer: numba compiles it." : "";
    out.replaceChildren(el("p", { class: "muted" }, `Computing the ${METHOD_NAMES[method]} layout…${first}`));
  } else if (xa && xb) {
    body.method = "axes";
    body.x_axis = [xa, xb];
    if (ya && yb) body.y_axis = [ya, yb];
  }
  const { ok, data } = await api(tablePath("project"), body);
  if (!done()) return;
  if (!ok) {
    lastMap = null;
    if (data.error?.package) methodUnavailable(body.method, data.error.message);
    out.replaceChildren(errorBox(data.error || {}));
    return;
  }
  const unknown = data.unknown || [];
  const known = items.filter((item) => !unknown.includes(item.word));
  // One point per distinct row, named by the first word that found it (its text: "Café" of "Café" and "cafe").
  const byWord = new Map(known.map((item) => [item.word, item]).reverse()); // a word typed twice: the first one
  const points = data.points.map((p) => ({ ...p, ...(byWord.get(p.text) || { word: p.token, group: "words" }) }));
  lastMap = {
    table, points, variance: data.explained_variance_ratio || [], unknown, axes: data.axes || null,
    method: data.method, params: data.params || null, suggestions: {},
  };
  drawMap();
  if (unknown.length) suggestUnknown(lastMap);
}

/** The API's suggestions for the map's unknown words (those of a batch of neighbour queries that each fail), drawn
 * under the map as buttons: a click puts one in place of its unknown word and draws again. */
async function suggestUnknown(map) {
  const words = map.unknown.slice(0, 64); // the API spells out suggestions for the first 64 unknown words
  const { ok, data } = await api(tablePath("neighbors", map.table), { queries: words, k: 1 });
  if (!ok || map !== lastMap) return;
  words.forEach((word, i) => { map.suggestions[word] = data.results[i]?.error?.suggestions || []; });
  drawMap();
}

/** The map's words with ``word`` replaced by ``pick`` wherever it stands, groups kept. */
function replaceMapWord(word, pick) {
  const lines = $("map-words").value.split("\n").map((line) => {
    const colon = line.indexOf(":");
    const words = splitWords(line.slice(colon + 1));
    if (!words.includes(word)) return line;
    const replaced = words.map((w) => (w === word ? pick : w)).join(" ");
    return colon >= 0 ? `${line.slice(0, colon + 1)} ${replaced}` : replaced;
  });
  $("map-words").value = lines.join("\n");
  $("map-form").requestSubmit();
}

/**
 * Greedy label placement: each label takes the free spot nearest its point (8 directions, 5 distances) that
 * overlaps no point and no label placed before it; a label set away from its point gets a leader line. Points in
 * crowded spots are placed first, while there is still room around them.
 */
function placeLabels(points, area) {
  const boxes = points.map((p) => ({ x0: p.cx - 6, y0: p.cy - 6, x1: p.cx + 6, y1: p.cy + 6 }));
  const overlap = (a, b) =>
    Math.max(0, Math.min(a.x1, b.x1) - Math.max(a.x0, b.x0)) * Math.max(0, Math.min(a.y1, b.y1) - Math.max(a.y0, b.y0));
  const directions = [[1, 0], [-1, 0], [0, -1], [0, 1], [1, -1], [-1, -1], [1, 1], [-1, 1]];
  const distances = [8, 22, 38, 56, 78];
  const crowd = points.map((p) => points.filter((q) => Math.hypot(q.cx - p.cx, q.cy - p.cy) < 40).length);
  const order = points.map((_, i) => i).sort((a, b) => crowd[b] - crowd[a] || a - b);
  const out = new Array(points.length);
  for (const i of order) {
    const p = points[i];
    const w = p.word.length * 7.4 + 2;
    let best = null;
    distances.forEach((d, ring) => {
      for (const [dx, dy] of directions) {
        const ax = p.cx + dx * d;
        const ay = p.cy + dy * d * 0.8;
        const x0 = dx > 0 ? ax : dx < 0 ? ax - w : ax - w / 2;
        const y0 = dy < 0 ? ay - 14 : dy > 0 ? ay : ay - 7;
        const box = { x0, y0, x1: x0 + w, y1: y0 + 14 };
        const outside = box.x0 < area.x0 || box.x1 > area.x1 || box.y0 < area.y0 || box.y1 > area.y1;
        const clash = boxes.reduce((sum, b, j) => sum + (j === i ? 0 : overlap(box, b)), 0);
        const cost = (outside ? 1e9 : 0) + clash * 10 + ring * 40;
        if (!best || cost < best.cost) {
          const anchor = dx > 0 ? "start" : dx < 0 ? "end" : "middle";
          best = { cost, box, ring, ax, ay, label: { x: ax, y: y0 + 11, "text-anchor": anchor } };
        }
      }
    });
    boxes.push(best.box);
    out[i] = { ...best.label, leader: best.ring > 0 ? { x1: p.cx, y1: p.cy, x2: best.ax, y2: best.ay } : null };
  }
  return out;
}

function drawMap() {
  if (!lastMap) return;
  const out = $("map-out");
  const { points, variance, unknown, axes, method, params } = lastMap;
  const nonlinear = METHOD_NAMES[method];
  const groups = [...new Set(points.map((p) => p.group))];
  const colour = (group) => PALETTE[groups.indexOf(group) % PALETTE.length];
  const width = Math.max(280, Math.round(out.clientWidth || 600));
  const height = Math.round(Math.min(480, Math.max(280, width * (width < 500 ? 1 : 0.7))));
  const pad = { left: 30, right: 16, top: 14, bottom: 30 };
  const xs = points.map((p) => p.x);
  const ys = points.map((p) => p.y);
  const scale = (lo, hi, a, b) => (v) => (hi === lo ? (a + b) / 2 : a + ((v - lo) / (hi - lo)) * (b - a));
  const sx = scale(Math.min(...xs), Math.max(...xs), pad.left + 6, width - pad.right - 6);
  const sy = scale(Math.min(...ys), Math.max(...ys), height - pad.bottom - 6, pad.top + 6);
  const pct = (v) => `${((v || 0) * 100).toFixed(1)}%`;
  const pair = (p) => `${p[0]} − ${p[1]}`;
  const xName = nonlinear ? `${nonlinear} 1`
    : axes ? `x: ${pair(axes.x)} · ${pct(variance[0])}` : `PC1 · ${pct(variance[0])}`;
  const yName = nonlinear ? `${nonlinear} 2`
    : axes ? `y: ${axes.y === "pca" ? "PC1 of the rest" : pair(axes.y)} · ${pct(variance[1])}`
      : `PC2 · ${pct(variance[1])}`;

  const plot = svg("svg", {
    viewBox: `0 0 ${width} ${height}`, width, height, role: "img", class: "scatter",
    "aria-label": nonlinear ? `${nonlinear} map of ${points.length} words`
      : axes ? `Map of ${points.length} words on the axes ${xName} and ${yName}`
        : `Map of ${points.length} words on their first two principal components`,
  });
  plot.append(
    svg("line", { x1: pad.left, y1: height - pad.bottom, x2: width - pad.right, y2: height - pad.bottom, class: "axis" }),
    svg("line", { x1: pad.left, y1: pad.top, x2: pad.left, y2: height - pad.bottom, class: "axis" }),
    svg("text", { x: width - pad.right, y: height - 8, "text-anchor": "end", class: "axis-label" }, xName),
    svg("text", { x: 12, y: pad.top, transform: `rotate(-90 12 ${pad.top})`, "text-anchor": "end", class: "axis-label" },
      yName),
  );
  const placed = points.map((p) => ({ ...p, cx: sx(p.x), cy: sy(p.y) }));
  const labels = placeLabels(placed, { x0: pad.left + 2, y0: 0, x1: width, y1: height - pad.bottom + 4 });
  placed.forEach((p, i) => {
    const { leader, ...label } = labels[i];
    const g = svg("g", { class: "point" });
    if (leader) g.append(svg("line", { ...leader, class: "leader" }));
    g.append(
      svg("circle", { cx: p.cx, cy: p.cy, r: 5, fill: colour(p.group) }),
      svg("text", label, p.word),
      svg("title", {}, `${p.word} (${p.group})`),
    );
    plot.append(g);
  });
  const legend = el("ul", { class: "legend", "aria-label": "Groups" });
  for (const group of groups) {
    legend.append(el("li", {}, el("span", { class: "swatch", style: `background:${colour(group)}` }), group));
  }
  const explained = ((variance[0] || 0) + (variance[1] || 0)) * 100;
  const caption = nonlinear ? nonlinearCaption(method, params, points.length) : axes
    ? `x is each word's length along ${pair(axes.x)} (${axes.x[0]} at 0.5, ${axes.x[1]} at −0.5), ` +
      `y ${axes.y === "pca" ? "the first principal component of what x leaves" : `the same along ${pair(axes.y)}`}; ` +
      `the axes carry ${pct(variance[0])} and ${pct(variance[1])} of the variance of these ${points.length} words.`
    : `The two components explain ${explained.toFixed(1)}% of the variance of these ${points.length} words ` +
      `(PC1 ${pct(variance[0])}, PC2 ${pct(variance[1])}).`;
  show(out, legend, plot, el("p", { class: "muted" }, caption));
  if (unknown.length) out.append(el("p", { class: "warning" }, `Not in this table, left out: ${unknown.join(", ")}`));
  for (const word of unknown) {
    const picks = lastMap.suggestions[word] || [];
    if (!picks.length) continue;
    const list = el("ul", { class: "chips", "aria-label": `Suggestions for ${word}` }, ...picks.map((pick) => el("li", {},
      el("button", { type: "button", class: "chip", onclick: () => replaceMapWord(word, pick) }, pick))));
    out.append(el("div", { class: "map-suggestions" }, el("p", { class: "muted" }, `Did you mean, for ${word}:`), list));
  }
}

/** What a t-SNE or UMAP map was computed with, from the answer's params. */
function nonlinearCaption(method, params, n) {
  const p = params || {};
  const lowered = (used, asked, limit) =>
    (asked !== undefined && asked !== used ? ` (${asked} asked for; at most ${limit} for ${n} words)` : "");
  const detail = method === "tsne"
    ? `perplexity ${+p.perplexity.toFixed(2)}${lowered(p.perplexity, p.perplexity_requested, "(n − 1) / 3")}, ` +
      `${p.n_iter} iterations, ${p.initialization === "pca" ? "PCA" : p.initialization} initialisation`
    : `${p.n_neighbors} neighbours${lowered(p.n_neighbors, p.n_neighbors_requested, "n − 1")}, ` +
      `min_dist ${p.min_dist}, ${p.n_epochs} epochs, ${p.init} initialisation`;
  return `${METHOD_NAMES[method]} of these ${n} words by ${p.library}: ${detail}, ${p.metric} metric, ` +
    `seed ${p.seed} (the same seed draws the same map). Near words are alike; distances between clusters mean little.`;
}

// ----------------------------------------------------------- the whole table
function runTableMap() {
  const method = $("tm-method");
  $("tm-export-out").replaceChildren();
  const tsne = config.tsne_rows > 0 && config.tsne_available;
  const wanted = method.value;
  method.replaceChildren(new Option("PCA, every row", "pca"),
    ...(tsne ? [new Option(`t-SNE, ${config.tsne_rows.toLocaleString("en")} most frequent rows`, "tsne")] : []));
  method.value = tsne && wanted === "tsne" ? "tsne" : "pca";
  const asked = tableMap.asked;
  if (asked && asked.table === state.table && asked.method === method.value) { // Back or Forward on the same table
    tableMap.runSearch(); // its view, selection and labels stay
    return;
  }
  tableMap.load(state.table, method.value);
}

// ------------------------------------------------------------------- export
function saveBlob(name, blob) {
  const url = URL.createObjectURL(blob);
  const link = el("a", { href: url, download: name, hidden: "" });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 30_000);
}

const csvField = (value) => (/[",\r\n]/.test(String(value)) ? `"${String(value).replaceAll('"', '""')}"` : String(value));

/** One file of a view of ``table`` (the view's own: while another table's loads, the view shown is still of the
 * one before): the projector's vectors.tsv / metadata.tsv (from the server), or coordinates.csv. A refusal or a
 * lost connection is said in ``box``, the export's own place, so the view itself stays. */
async function exportView(kind, table, rows, coordinates, box) {
  if (!rows.length) {
    box.replaceChildren(el("p", { class: "warning" }, "No rows to export."));
    return;
  }
  box.replaceChildren(); // the error of an export before
  if (kind === "csv") {
    const header = Object.keys(coordinates[0]);
    const lines = [header.join(","), ...coordinates.map((c) => header.map((h) => csvField(c[h])).join(","))];
    saveBlob("coordinates.csv", new Blob([lines.join("\n") + "\n"], { type: "text/csv" }));
    return;
  }
  let response;
  try {
    response = await apiFetch(tablePath("export", table), {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ rows, file: kind }),
    });
  } catch (err) {
    box.replaceChildren(errorBox({ message: unreachable(err) }));
    return;
  }
  if (!response.ok) {
    const data = await response.json().catch(() => ({}));
    box.replaceChildren(errorBox(data.error || { message: statusMessage(response) }));
    return;
  }
  saveBlob(`${kind}.tsv`, await response.blob());
}

function exportWordMap(kind) {
  const points = lastMap ? lastMap.points : [];
  const rows = points.map((p) => ({ id: p.id, group: p.group }));
  const coordinates = points.map((p) => ({ token: p.token, group: p.group, x: p.x, y: p.y }));
  exportView(kind, lastMap?.table, rows, coordinates, $("map-export-out"));
}

function exportTableMap(kind) {
  const ids = tableMap.selection(config.max_export_rows);
  const labels = tableMap.labels;
  const coordinates = ids.map((i) => ({ token: labels ? labels[i] : "", id: i, x: tableMap.x[i], y: tableMap.y[i] }));
  exportView(kind, tableMap.table, ids.map((id) => ({ id })), coordinates, $("tm-export-out"));
}

// ------------------------------------------------------------------- tables
/** Show the key form (the server answered 401), unless it is shown already. */
function askKey() {
  const form = $("key-form");
  if (!form.hidden) return;
  form.hidden = false;
  $("api-key").value = sessionStorage.getItem(KEY_STORE) || "";
  if (!sessionStorage.getItem(KEY_STORE)) $("api-key").focus();
}

/** A key typed in (or emptied): kept for this tab, and every card asked again with it. */
async function useKey() {
  const key = $("api-key").value.trim();
  if (key) sessionStorage.setItem(KEY_STORE, key);
  else sessionStorage.removeItem(KEY_STORE);
  $("key-form").hidden = !key;
  if (!tables.length) {
    if (!(await loadTables())) return;
    writeURL();
  }
  runAll();
}

async function loadTables() {
  const select = $("table");
  const [{ ok, data }, explorer] = await Promise.all([api("/v1/tables"), api("/v1/explorer")]);
  if (explorer.ok) config = explorer.data;
  if (!ok) {
    $("table-info").textContent = data.error?.message || "could not list tables";
    return false;
  }
  tables = data.tables || [];
  select.replaceChildren(...tables.map((t) => el("option", { value: t.name },
    `${t.name} (${t.rows.toLocaleString("en")} × ${t.dim}, ${KIND_NAMES[kindOf(t)]})`)));
  if (!tables.length) {
    $("table-info").textContent = "no tables loaded";
    return false;
  }
  if (!tables.some((t) => t.name === state.table)) {
    state.table = tables.some((t) => t.name === config.default_table) ? config.default_table : tables[0].name;
  }
  select.value = state.table;
  showTableInfo(tables);
  fillCompare();
  if (!config.tsne_available) {
    methodUnavailable("tsne", `t-SNE needs the openTSNE package on the server (${config.map_install})`);
  }
  const useTable = () => {
    clearTimeout(settling);
    settling = 0;
    if (select.value === state.table) return;
    state.table = select.value;
    Object.assign(state, { doc: "", filter: "", offset: "", text: "", mode: "" }); // a document query belongs to its table
    showTableInfo(tables);
    writeURL(true);
    runAll();
  };
  let keyed = false; // the next change is a key's step, not a pick from the open list
  let settling = 0;
  select.onkeydown = (event) => {
    if (event.key === "Enter") useTable();
    else keyed = event.key !== "Tab";
  };
  select.onpointerdown = () => { keyed = false; };
  select.onblur = () => { if (settling) useTable(); };
  select.onchange = () => {
    clearTimeout(settling);
    if (keyed) settling = setTimeout(useTable, TABLE_SETTLE_MS);
    else useTable();
    keyed = false;
  };
  return true;
}

/** The Compare card's tables: the words and model-token tables (a documents table has no words to compare), at
 * first the table picked (or the first of them) and another. */
function fillCompare() {
  const names = tables.filter((t) => t.kind !== "documents").map((t) => t.name);
  for (const id of ["cmp-first", "cmp-second"]) $(id).replaceChildren(...names.map((n) => el("option", { value: n }, n)));
  const first = names.includes(state.table) ? state.table : names[0] ?? "";
  $("cmp-first").value = first;
  $("cmp-second").value = names.find((n) => n !== first) ?? first;
}

/** The header's line on the table picked: what it is, what it holds, its index and the cards it gets. */
function showTableInfo(tables) {
  const table = tables.find((t) => t.name === state.table);
  if (!table) {
    $("table-info").textContent = "";
    return;
  }
  const kind = kindOf(table);
  const parts = [KIND_NAMES[kind], tableDetail(table, kind), `${table.index?.kind || "flat"} index`, KIND_CARDS[kind]];
  $("table-info").textContent = parts.filter(Boolean).join(" · ");
}

/** What a table of ``kind`` holds beyond its kind: the model of a model-token or transformer table, whether it
 * runs; a documents table's text search. */
function tableDetail(table, kind) {
  const model = table.model?.name || "a model";
  if (kind === "transformer") return `${model}, ${table.transformer.layers} layers run on text (embed, contextual)`;
  if (kind === "tokens") return `${model}'s input rows, no model to run`;
  if (kind !== "documents") return "";
  const modes = textModes(table);
  const encoder = table.documents?.encoder?.table;
  if (!modes.length) return "no text search";
  return `text search: ${modes.join(", ")}${encoder ? ` (encoder ${encoder})` : ""}`;
}

/** A table's kind as its summary (GET /v1/tables) tells them apart: "documents", "transformer" (model tokens
 * imported with their model, which runs on text: embed and contextual), "tokens" or "words". */
function kindOf(summary) {
  if (summary?.kind === "documents") return "documents";
  if (summary?.transformer) return "transformer";
  return summary?.kind === "tokens" ? "tokens" : "words";
}

/** The kind of the table picked: its cards (data-kinds) and its URL keys. */
function tableKind() {
  return kindOf(tables.find((t) => t.name === state.table));
}

function showCards(kind) {
  $("cards").dataset.kind = kind;
  for (const card of $("cards").querySelectorAll(":scope > [data-kinds]")) {
    card.hidden = !card.dataset.kinds.split(" ").includes(kind);
  }
}

function runAll() {
  const kind = tableKind();
  showCards(kind);
  if (kind === "documents") {
    documentSearch.open(tables.find((t) => t.name === state.table));
    return;
  }
  runTableMap();
  runMap();
  runNeighbours();
  runAnalogy();
  runSimilarity();
  runDiagnostics();
  if (kind === "transformer") contextual.open();
}

/** Each diagnostics tool asked again with its inputs (on the table now picked); one without input is cleared. */
function runDiagnostics() {
  runOddOneOut();
  runRank();
  runCloser();
  runSetSimilarity();
}

// --------------------------------------------------------------------- wire
function wire() {
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    useKey();
  });
  $("neighbours-form").addEventListener("submit", (event) => {
    event.preventDefault();
    searchWord($("word").value.trim());
  });
  $("analogy-form").addEventListener("submit", (event) => {
    event.preventDefault();
    Object.assign(state, {
      a: $("an-a").value.trim(), b: $("an-b").value.trim(), c: $("an-c").value.trim(), method: $("an-method").value,
      expect: $("an-expect").value.trim(),
    });
    writeURL(true);
    runAnalogy();
  });
  $("an-method").addEventListener("change", () => {
    // the answer shown is always the picked method's: picking the other one solves again
    if ($("analogy-form").checkValidity()) $("analogy-form").requestSubmit();
  });
  $("similarity-form").addEventListener("submit", (event) => {
    event.preventDefault();
    Object.assign(state, { x: $("sim-a").value.trim(), y: $("sim-b").value.trim() });
    writeURL(true);
    runSimilarity();
  });
  $("odd-form").addEventListener("submit", (event) => {
    event.preventDefault();
    runOddOneOut();
  });
  $("rank-form").addEventListener("submit", (event) => {
    event.preventDefault();
    runRank();
  });
  $("closer-form").addEventListener("submit", (event) => {
    event.preventDefault();
    runCloser();
  });
  $("nsim-form").addEventListener("submit", (event) => {
    event.preventDefault();
    runSetSimilarity();
  });
  $("compare-form").addEventListener("submit", (event) => {
    event.preventDefault();
    runCompare();
  });
  for (const id of ["cmp-first", "cmp-second"]) {
    $(id).addEventListener("change", () => runCompare()); // the lists shown are always the picked tables'
  }
  $("map-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = $("map-words").value.trim();
    state.words = text === DEFAULT_WORDS ? "" : text;
    state.axes = readAxes();
    state.proj = readProj();
    writeURL(true);
    runMap();
  });
  $("map-words").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) $("map-form").requestSubmit();
  });
  for (const radio of document.querySelectorAll("input[name=map-method]")) {
    radio.addEventListener("change", () => {
      showMethod();
      if (radio.value !== "pairs") $("map-form").requestSubmit(); // word pairs draw once their words are in
    });
  }
  for (const input of [...$("axis-pairs").querySelectorAll("input"), ...$("nonlinear").querySelectorAll("input")]) {
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter") {
        event.preventDefault();
        $("map-form").requestSubmit();
      }
    });
  }
  for (const chip of document.querySelectorAll("[data-pair]")) {
    chip.addEventListener("click", () => {
      const [x, y] = chip.dataset.pair.split(" ");
      $("sim-a").value = x;
      $("sim-b").value = y;
      $("similarity-form").requestSubmit();
    });
  }
  for (const button of $("map-export").querySelectorAll("[data-export]")) {
    button.addEventListener("click", () => exportWordMap(button.dataset.export));
  }
  for (const button of $("tm-export").querySelectorAll("[data-export]")) {
    button.addEventListener("click", () => exportTableMap(button.dataset.export));
  }
  $("tm-method").addEventListener("change", () => tableMap.load(state.table, $("tm-method").value));
  $("map-reset").addEventListener("click", () => {
    $("map-words").value = DEFAULT_WORDS;
    $("axes-pca").checked = true;
    showMethod();
    $("map-form").requestSubmit();
  });
  window.addEventListener("popstate", () => {
    readURL();
    fillInputs();
    const select = $("table");
    if (![...select.options].some((o) => o.value === state.table)) state.table = select.options[0]?.value ?? "";
    select.value = state.table;
    showTableInfo(tables);
    runAll();
  });
  let lastWidth = 0;
  new ResizeObserver(([entry]) => {
    const width = Math.round(entry.contentRect.width);
    if (width !== lastWidth) {
      lastWidth = width;
      drawMap();
    }
  }).observe($("map-out"));
}

async function main() {
  tableMap = new TableMap($("table-map"), {
    fetchJSON: api,
    fetch: apiFetch,
    tablePath,
    show,
    onSearch: (text) => {
      state.q = text;
      writeURL();
    },
  });
  documentSearch = new DocumentSearch($("doc-search"), { api, tablePath, el, errorBox, show, state, writeURL });
  contextual = new Contextual($("contextual"), {
    api, tablePath, el, svg, errorBox, scoreList, onPickRow: (w) => searchWord(w), state, writeURL,
  });
  window.explorer = { tableMap, documentSearch, contextual, state, get lastMap() { return lastMap; } };
  readURL();
  fillInputs();
  wire();
  if (sessionStorage.getItem(KEY_STORE)) askKey(); // the key in use is shown, to change or forget
  if (await loadTables()) {
    writeURL();
    runAll();
  }
}

main();
