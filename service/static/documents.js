// The Search card of a documents table: the documents most like one document (POST .../search {"id"}), filtered
// by the table's fields with controls built from GET .../fields, paged by offset. Each hit shows its score, id,
// fields and the start of its text, with the words it shares with the query document marked.

const DEFAULT_K = 10;
const CHIPS_SHOWN = 8; // values of a field shown before its "more" button
const SNIPPET_CHARS = 240; // whole sentences from the start of a text, until about this long
const MARKED_CHARS = 100_000; // of a text, where its shared words are marked (a written text's most, max_text_chars)
const MIN_WORD = 3; // shorter words are never marked
const LABEL_CHARS = 80; // of a text query, where the card names it, and of a field's value shown
// Common English words, never marked as shared: two news stories share "the" and "said" whatever they are about.
const STOPWORDS = new Set((
  "about after again all also and any are because been before being but can could did does down during each few " +
  "for from had has have her here hers him his how into its just more most not now off once only other our out " +
  "over own said same she should some such than that the their theirs them then there these they this those " +
  "through too under until very was were what when where which while who whom why will with would you your"
).split(" "));

/**
 * Text queries: the card has a text box that stays disabled while the page has no way to search by text. One plugs
 * in here: ``query(table, text)`` resolving to {ok: true, query} (the request's query part: {"vector": …} from an
 * encoder, or a keyword search's fields) or, as the page's api() answers, {ok: false, status, data: {error}}. With
 * one set, the box is enabled, a text in it is searched before the document id, and each hit marks its words.
 */
export const textSearch = { query: null };

let uid = 0;
const nextId = (stem) => `${stem}-${++uid}`;
const WORD = /[\p{L}\p{N}]+(?:['’][\p{L}]+)*/gu;

/** The distinct lower-cased words of ``text`` that may be marked. */
function markable(text) {
  const words = new Set();
  for (const [word] of (text || "").matchAll(WORD)) {
    const lower = word.toLowerCase();
    if (lower.length >= MIN_WORD && !STOPWORDS.has(lower)) words.add(lower);
  }
  return words;
}

/** Whole sentences from the start of ``text``, about SNIPPET_CHARS long (cut at a word when one is longer). */
function snippet(text) {
  const sentences = (text || "").match(/[^.!?]+(?:[.!?]+["'’”)]*|$)\s*/g) || [];
  let out = "";
  for (const sentence of sentences) {
    if (out && out.length + sentence.length > SNIPPET_CHARS) break;
    out += sentence;
  }
  out = out.trim();
  if (out.length > SNIPPET_CHARS * 1.5) out = `${out.slice(0, SNIPPET_CHARS).replace(/\s+\S*$/, "")}`;
  return out.length < (text || "").trim().length ? `${out} …` : out;
}

/** ``text`` cut after ``most`` characters, "…" marking the cut: a long text query is searched whole, and a long
 * value (a vector store's metadata JSON) filters whole, but shown whole either pushes the card's hits and filter
 * controls screens down. */
function cut(text) {
  const chars = [...text]; // by code point, so an emoji is never cut in half
  return chars.length > LABEL_CHARS ? `${chars.slice(0, LABEL_CHARS).join("")}…` : text;
}

/** A text query as the card names it: in quotes, cut. */
const quoted = (text) => `“${cut(text)}”`;

/** ``text`` cut, as an element's content and, when cut, whole as its tooltip. */
const cutWithTitle = (text) => {
  const shown = cut(text);
  return { shown, attrs: shown === text ? {} : { title: text } };
};

/** Filter JSON text as the URL keeps it (compact), or the text itself when it is not JSON. */
function compact(text) {
  try {
    return text.trim() ? JSON.stringify(JSON.parse(text)) : "";
  } catch {
    return text.trim();
  }
}

/** Filter JSON text for the text box: one top-level condition per line. */
function pretty(text) {
  let spec;
  try {
    spec = JSON.parse(text);
  } catch {
    return text;
  }
  if (!isPlain(spec) || !Object.keys(spec).length) return JSON.stringify(spec);
  const lines = Object.entries(spec).map(([key, value]) => `  ${JSON.stringify(key)}: ${JSON.stringify(value)}`);
  return `{\n${lines.join(",\n")}\n}`;
}

const DAY_MS = 86_400_000;
const dayAfter = (day, step = 1) => new Date(Date.parse(`${day}T00:00:00Z`) + step * DAY_MS).toISOString().slice(0, 10);
const isNumber = (v) => typeof v === "number" && Number.isFinite(v);
const isPlain = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
const only = (object, keys) => isPlain(object) && Object.keys(object).every((k) => keys.includes(k));

/** A field's value as a hit shows it. */
export function showValue(value, type) {
  if (value === null || value === undefined) return "—";
  if (Array.isArray(value)) return value.length ? value.join(", ") : "(none)";
  if (type === "float") return String(+value.toFixed(4));
  if (type === "boolean") return value ? "yes" : "no";
  return String(value);
}

/** The search modes a text can use on a documents table (``summary``, from GET /v1/tables): vector and hybrid
 * when its documents were embedded by an encoder of the server's (which embeds the text too), keyword and hybrid
 * when it has a keyword index. */
export function textModes(summary) {
  const documents = summary?.documents || {};
  const modes = [];
  if (documents.encoder) modes.push("vector");
  if (documents.keyword) modes.push("keyword");
  if (documents.encoder && documents.keyword) modes.push("hybrid");
  return modes;
}

export class DocumentSearch {
  /**
   * @param {HTMLElement} root the Search card
   * @param {{api: Function, tablePath: Function, el: Function, errorBox: Function, show: Function, state: object,
   *          writeURL: Function}} deps the page's helpers and its URL state (keys doc, filter, offset, per, text,
   *          mode)
   */
  constructor(root, deps) {
    this.root = root;
    this.deps = deps;
    this.table = null;
    this.summary = null;
    this.rows = null; // the live document count, from GET .../fields
    this.example = "";
    this.controls = [];
    this.documents = new Map(); // id -> promise of the query document ({id, text}), or null when unknown
    this.ticket = 0;
    this.last = null; // {body, status, data}: the latest request and its answer
    this.wire();
  }

  $(id) {
    return this.root.querySelector(`#${id}`);
  }

  // ------------------------------------------------------------------ opening a table
  /** Show the card for ``summary`` (a documents table from GET /v1/tables) with the query in the URL state. */
  async open(summary) {
    if (summary.name !== this.table) {
      this.table = summary.name;
      this.summary = summary;
      this.rows = null;
      this.documents.clear();
      this.controls = [];
      this.ticket++; // an answer still on its way is the table before's
      this.$("ds-out").replaceChildren();
      this.$("ds-out").removeAttribute("aria-busy");
      this.$("ds-controls").replaceChildren(this.deps.el("p", { class: "muted" }, "Loading the fields…"));
      const { api, tablePath } = this.deps;
      const [stats, first] = await Promise.all([api(tablePath("fields")), api(tablePath("ids/0"))]);
      if (this.table !== summary.name) return;
      const example = first.ok ? await this.liveExample(first.data) : "";
      if (this.table !== summary.name) return;
      this.example = example;
      this.$("ds-id").placeholder = this.example ? `a document id, e.g. ${this.example}` : "a document id";
      this.buildControls(stats);
    }
    this.enableText();
    this.fill();
    await this.run();
  }

  /** The id of a live document to search from until one is given: the table's first row (``GET .../ids/0``), or,
   * when that document was deleted since the import, the live document nearest its vector. "" when none. */
  async liveExample(first) {
    const id = String(first.token);
    if (await this.document(id)) return id;
    const nearest = await this.deps.api(this.deps.tablePath("search"), { vector: first.vector, k: 1 });
    const hit = nearest.ok ? (nearest.data.hits || [])[0] : null;
    return hit ? String(hit.id) : "";
  }

  textModes() {
    return textModes(this.summary);
  }

  /** The text box: on when the table can search by text, or a text search is plugged in (``textSearch``). */
  enableText() {
    const plugged = typeof textSearch.query === "function";
    const modes = this.textModes();
    const on = plugged || modes.length > 0;
    this.$("ds-text").disabled = !on;
    // one mode is no choice: the box names it, and the menu (which still holds it) is hidden
    const only = !plugged && modes.length === 1 ? ` (${modes[0]})` : "";
    this.$("ds-text").placeholder = on ? `words to search for${only}` : "text search needs an encoder";
    this.$("ds-text-note").hidden = on;
    const select = this.$("ds-mode");
    select.hidden = plugged || modes.length < 2;
    const { el } = this.deps;
    select.replaceChildren(...modes.map((mode) => el("option", { value: mode }, mode)));
    if (modes.includes("hybrid")) select.value = "hybrid";
  }

  /** The inputs as the URL state says. */
  fill() {
    const { state } = this.deps;
    this.$("ds-id").value = state.doc || this.example;
    this.$("ds-text").value = state.text || "";
    if (this.textModes().includes(state.mode)) this.$("ds-mode").value = state.mode;
    this.$("ds-k").value = String(this.k());
    this.$("ds-filter").value = state.filter ? pretty(state.filter) : "";
    this.writeControls(state.filter || "");
  }

  k() {
    const k = Number(this.deps.state.per);
    return [5, 10, 20, 50].includes(k) ? k : DEFAULT_K;
  }

  offset() {
    const offset = Number(this.deps.state.offset);
    return Number.isInteger(offset) && offset > 0 ? offset : 0;
  }

  // ------------------------------------------------------------------ filter controls
  buildControls({ ok, data }) {
    const box = this.$("ds-controls");
    if (!ok) {
      box.replaceChildren(this.deps.errorBox(data.error || {}));
      return;
    }
    this.rows = data.rows; // live: written documents in, deleted ones out
    const changed = () => this.controlsChanged();
    this.controls = Object.entries(data.fields).map(([name, stats]) => this.control(name, stats, data.rows, changed));
    box.replaceChildren(...this.controls.map((c) => c.node));
    if (!this.controls.length) box.replaceChildren(this.deps.el("p", { class: "muted" }, "No fields to filter on."));
  }

  /** One field's control: {name, node, read() -> its filter or undefined, write(filter) -> whether it could}. */
  control(name, stats, rows, onChange) {
    const { el } = this.deps;
    const head = nextId("ds-field");
    const n = (count) => count.toLocaleString("en");
    const set = stats.non_null === rows ? "every document" : `${n(stats.non_null)} of ${n(rows)}`;
    const node = el("div", { class: "ds-field", role: "group", "aria-labelledby": head, "data-field": name },
      el("div", { class: "ds-field-name", id: head }, name, " ",
        el("span", { class: "muted" }, `${stats.type.replace("_", " ")} · ${set}`)));
    const make = { string: valuePicker, string_list: valuePicker, boolean: triState, timestamp: dateRange };
    const part = (make[stats.type] || numberRange)(el, name, stats, onChange);
    node.append(...part.nodes);
    return { name, node, read: part.read, write: part.write, reset: () => part.write(undefined) };
  }

  readControls() {
    const spec = Object.create(null); // a field may be named __proto__
    for (const control of this.controls) {
      const value = control.read();
      if (value !== undefined) spec[control.name] = value;
    }
    return spec;
  }

  /** Set the controls from filter JSON text where they can show it (one condition per field, of their shapes);
   * a note says when the filter holds more than they show. */
  writeControls(text) {
    let spec = {};
    try {
      spec = text ? JSON.parse(text) : {};
    } catch {
      spec = null;
    }
    const plain = isPlain(spec);
    let fits = plain && Object.keys(spec).every((name) => this.controls.some((c) => c.name === name));
    for (const control of this.controls) fits = control.write(plain && Object.hasOwn(spec, control.name) ? spec[control.name] : undefined) && fits;
    this.$("ds-hand").hidden = fits || !this.controls.length;
  }

  controlsChanged() {
    const spec = this.readControls();
    const text = Object.keys(spec).length ? JSON.stringify(spec) : "";
    this.$("ds-filter").value = text && pretty(text);
    this.$("ds-hand").hidden = true;
    Object.assign(this.deps.state, { filter: text, offset: "", ...this.readText() });
    this.deps.writeURL(true);
    this.run();
  }

  // ------------------------------------------------------------------ searching
  /** The text box and its mode, as the URL state keeps them. */
  readText() {
    const text = this.$("ds-text").disabled ? "" : this.$("ds-text").value.trim();
    return { text, mode: text && !this.$("ds-mode").hidden ? this.$("ds-mode").value : "" };
  }

  wire() {
    this.$("ds-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const filter = compact(this.$("ds-filter").value);
      const per = this.$("ds-k").value;
      Object.assign(this.deps.state, {
        doc: this.$("ds-id").value.trim(), filter, offset: "", per: per === String(DEFAULT_K) ? "" : per,
        ...this.readText(),
      });
      this.writeControls(filter);
      this.deps.writeURL(true);
      this.run();
    });
    this.$("ds-k").addEventListener("change", () => this.$("ds-form").requestSubmit());
    this.$("ds-mode").addEventListener("change", () => { // the hits shown are always the picked mode's
      if (this.$("ds-text").value.trim()) this.$("ds-form").requestSubmit();
    });
    this.$("ds-filter").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey) {
        event.preventDefault();
        this.$("ds-form").requestSubmit();
      }
    });
    this.$("ds-clear").addEventListener("click", () => {
      for (const control of this.controls) control.reset();
      this.controlsChanged();
    });
  }

  /** The query document's text (for the words it shares with each hit); null when it cannot be had. Asked in a
   * body (POST .../documents/get), not in the URL: a browser takes an id "." or ".." in a path, escaped or not, for
   * a step of the path. */
  document(id) {
    if (!this.documents.has(id)) {
      const asked = this.deps.api(this.deps.tablePath("documents/get"), { ids: [id], fields: [] });
      this.documents.set(id, asked.then(({ ok, data }) => (ok ? data.documents[0] ?? null : null)));
    }
    return this.documents.get(id);
  }

  searchFrom(id) {
    Object.assign(this.deps.state, { doc: id, offset: "", text: "", mode: "" });
    this.$("ds-id").value = id;
    this.$("ds-text").value = "";
    this.deps.writeURL(true);
    this.run();
  }

  page(offset) {
    this.deps.state.offset = offset ? String(offset) : "";
    this.deps.writeURL(true);
    this.run().then(() => this.root.scrollIntoView({ block: "start" }));
  }

  /** The text query searched (the box's text when the form was sent), when the table can search text; else "". */
  textQuery() {
    const on = typeof textSearch.query === "function" || this.textModes().length > 0;
    return on ? this.deps.state.text.trim() : "";
  }

  async run() {
    const { el, api, tablePath, errorBox, state } = this.deps;
    const out = this.$("ds-out");
    const text = this.textQuery();
    const id = state.doc || this.example;
    const ticket = ++this.ticket;
    out.removeAttribute("aria-busy"); // of a run this one overtakes; set again while this one asks
    this.$("ds-said").textContent = ""; // said again once this run is answered; an error is said by its alert
    if (!id && !text) return this.deps.show(out, el("p", { class: "muted" }, "Give a document id to search from."));
    let filter = null;
    const spec = (state.filter || "").trim();
    if (spec) {
      try {
        filter = JSON.parse(spec);
      } catch (err) {
        this.last = null;
        return this.deps.show(out, errorBox({ message: `The filter is not valid JSON: ${err.message}` }));
      }
    }
    const page = { k: this.k(), offset: this.offset(), ...(filter === null ? {} : { filter }) };
    out.setAttribute("aria-busy", "true");
    let body;
    let query; // what the hits are marked against: {label, text}
    if (text && typeof textSearch.query !== "function") {
      const mode = this.textModes().includes(state.mode) ? state.mode : this.$("ds-mode").value;
      body = { text, mode, ...page };
      query = { label: quoted(text), text, words: markable(text) };
    } else if (text) {
      const asked = await textSearch.query(this.table, text);
      if (ticket !== this.ticket) return;
      if (!asked.ok) {
        out.removeAttribute("aria-busy");
        return this.deps.show(out, this.failure(asked));
      }
      body = { ...asked.query, ...page };
      query = { label: quoted(text), text, words: markable(text) };
    } else {
      body = { id, ...page };
    }
    const [answer, document] = await Promise.all([api(tablePath("search"), body), text ? null : this.document(id)]);
    if (ticket !== this.ticket) return;
    out.removeAttribute("aria-busy");
    query ??= { label: id, text: document?.text || "", words: markable(document?.text), id };
    this.last = { body, status: answer.status, data: answer.data };
    if (!answer.ok) return this.deps.show(out, this.failure(answer), this.request(body));
    this.deps.show(out, ...this.results(body, answer.data, query), this.request(body));
    // The hits are said in one line: read out whole (their texts, fields and buttons) they were a page long.
    const count = out.querySelector(".ds-count").textContent;
    this.$("ds-said").textContent = `${query.id ? "More like" : "Nearest to"} ${query.label}: ${count}`;
  }

  failure({ status, data }) {
    const { el, errorBox } = this.deps;
    const error = data?.error || {};
    const box = errorBox(error);
    if (status) box.append(el("p", { class: "muted ds-code" }, `${error.code || "error"} · HTTP ${status}`));
    if (error.code === "unknown_document" && this.example) {
      box.append(el("p", { class: "muted" }, `Ids are as the documents were imported, e.g. ${this.example}.`));
    }
    return box;
  }

  /** The request as sent, to copy. */
  request(body) {
    const { el } = this.deps;
    return el("details", { class: "ds-request" },
      el("summary", {}, `Request: POST ${this.deps.tablePath("search")}`),
      el("pre", { id: "ds-request" }, JSON.stringify(body, null, 1).replace(/\n\s*/g, " ")));
  }

  results(body, data, query) {
    const { el } = this.deps;
    const hits = data.hits || [];
    const rows = this.rows ?? this.summary.rows;
    const types = Object.fromEntries(Object.entries(this.summary.documents?.fields || {}).map(([n, f]) => [n, f.type]));
    const shared = query.words;
    const head = el("p", { class: "answer" }, query.id ? "More like " : "Nearest to ",
      el("strong", { class: "ds-query" }, query.label));
    if (query.id && query.text) {
      head.append(el("span", { class: "muted ds-query-text" }, ` — ${snippet(query.text)}`));
    }
    const count = el("p", { class: "ds-count" });
    if (data.passing !== undefined) {
      count.append(el("strong", { class: "ds-passing" }, data.passing.toLocaleString("en")),
        ` of ${rows.toLocaleString("en")} documents pass the filter`);
    } else {
      count.append(`${rows.toLocaleString("en")} documents, no filter`);
    }
    const range = hits.length ? `hits ${body.offset + 1}–${body.offset + hits.length}` : "no hits";
    count.append(` · ${range}`);
    const list = el("ol", { class: "ds-hits", start: body.offset + 1 });
    const mode = data.fallback?.mode ?? body.mode; // a hybrid search fallen back to one list has that list's scores
    for (const hit of hits) list.append(this.hit(hit, types, shared, mode));
    const parts = [head, count];
    if (data.fallback) { // hybrid on a text whose words the encoder does not know: searched by keyword alone
      parts.push(el("p", { class: "muted ds-fallback" }, `Searched by ${data.fallback.mode} only: `,
        data.fallback.reason, "."));
    }
    if (hits.length && shared.size) {
      const against = query.id ? "" : "the query ";
      parts.push(el("p", { class: "muted ds-legend" }, `Marked: the words a hit shares with ${against}`,
        el("strong", {}, query.label), ` (${MIN_WORD} letters or more, common English words left out).`));
    }
    if (!hits.length) {
      parts.push(el("p", { class: "muted" }, body.offset ? "No more hits: go back a page."
        : data.passing === 0 ? "No document passes the filter." : "No hits."));
    }
    parts.push(list, this.pager(body, hits.length, data.passing));
    return parts;
  }

  hit(hit, types, shared, mode) {
    const { el } = this.deps;
    const words = markable(hit.text);
    const common = new Set([...words].filter((w) => shared.has(w)));
    const values = el("ul", { class: "ds-values" });
    for (const [name, value] of Object.entries(hit.fields || {})) {
      const { shown, attrs } = cutWithTitle(showValue(value, types[name]));
      values.append(el("li", { "data-field": name }, el("span", { class: "ds-key" }, name), " ",
        el("span", { class: "ds-value", ...attrs }, shown)));
    }
    const item = el("li", { class: "ds-hit", "data-id": String(hit.id) },
      el("div", { class: "ds-hit-head" },
        el("span", { class: "ds-id" }, String(hit.id)),
        el("span", { class: "score", title: scoreTitle(mode) }, hit.score.toFixed(3)),
        mode === "hybrid" && hit.ranks ? el("span", { class: "muted ds-ranks" }, fusedRanks(hit.ranks)) : null,
        shared.size ? el("span", { class: "muted ds-shared" }, `${common.size} shared word${common.size === 1 ? "" : "s"}`) : null,
        el("button", {
          type: "button", class: "secondary small ds-more", onclick: () => this.searchFrom(String(hit.id)),
          "aria-label": `more like this: ${hit.id}`, // the words shown first: a voice command names them
        }, "more like this")),
      values);
    if (hit.text) {
      const start = snippet(hit.text);
      item.append(marked(el, el("p", { class: "ds-snippet" }), start, common));
      if (start.endsWith(" …")) {
        const whole = el("p", {});
        const details = el("details", { class: "ds-whole" },
          el("summary", {}, `whole text (${hit.text.length.toLocaleString("en")} characters)`), whole);
        // Written when first opened: an imported text has no bound on its length (10 MB is a million words).
        details.addEventListener("toggle", () => {
          if (details.open && !whole.hasChildNodes()) marked(el, whole, hit.text, common);
        });
        item.append(details);
      }
    }
    return item;
  }

  pager(body, shown, passing) {
    const { el } = this.deps;
    const { k, offset } = body;
    const more = shown === k && (passing === undefined || offset + k < passing);
    return el("div", { class: "row ds-pages", role: "navigation", "aria-label": "Pages of hits" },
      el("button", {
        type: "button", class: "secondary small ds-prev", onclick: () => this.page(Math.max(0, offset - k)),
        ...(offset > 0 ? {} : { disabled: "" }),
      }, "← previous"),
      el("span", { class: "muted" }, `page ${Math.floor(offset / k) + 1}`),
      el("button", { type: "button", class: "secondary small ds-next", onclick: () => this.page(offset + k),
        ...(more ? {} : { disabled: "" }) }, "next →"));
  }
}

/** What a hit's score is in search ``mode`` (none: more like a document, by cosine). */
function scoreTitle(mode) {
  if (mode === "keyword") return "BM25 score of the query's words";
  return mode === "hybrid" ? "fused score (reciprocal rank fusion)" : "cosine with the query";
}

/** A fused hit's rank in each list fused, shown beside its score (not on hover only: a keyboard, touch or
 * screen-reader user reads it there too). */
function fusedRanks(ranks) {
  return Object.entries(ranks).map(([list, rank]) => `${list} no. ${rank}`).join(", ");
}

/** ``parent`` with ``text`` appended, the words in ``words`` (lower-cased) inside <mark> within its first
 * MARKED_CHARS characters: node by node, since a long text's marks, as the arguments of one call, overflow the
 * call stack (the 700,000 marks of a 10 MB text did), and no further, since laying out so many took 30 s. */
function marked(el, parent, text, words) {
  let at = 0;
  if (words.size) {
    for (const match of text.matchAll(WORD)) {
      if (match.index >= MARKED_CHARS) break;
      if (!words.has(match[0].toLowerCase())) continue;
      if (match.index > at) parent.append(text.slice(at, match.index));
      parent.append(el("mark", {}, match[0]));
      at = match.index + match[0].length;
    }
  }
  parent.append(text.slice(at));
  return parent;
}

// ---------------------------------------------------------------------- the controls of each field type
/** Strings and tags: the most common values as check chips (any of them), and a box for another value when the
 * field has more values than GET .../fields lists; figures a sharded table's front knows as lower bounds only
 * (``exact: false``) shown as such. */
function valuePicker(el, name, stats, onChange) {
  const values = stats.values || [];
  const least = stats.exact === false ? "≥" : "";
  const boxes = values.map(({ value, count }, i) => {
    const n = count.toLocaleString("en");
    const { shown, attrs } = cutWithTitle(value);
    // Named with its count apart: the label's text alone reads "libgnutls3037,661" for libgnutls30's 37,661.
    const name = `${value} (${least ? "at least " : ""}${n} documents)`;
    const input = el("input", { type: "checkbox", value, onchange: onChange, "aria-label": name });
    const chip = el("label", { class: "ds-chip", ...attrs, ...(i >= CHIPS_SHOWN ? { hidden: "" } : {}) },
      input, shown, el("span", { class: "ds-n" }, least + n));
    return { input, chip };
  });
  const chips = el("div", { class: "ds-chips" }, ...boxes.map((b) => b.chip));
  const nodes = [chips];
  const hidden = boxes.length - CHIPS_SHOWN;
  let more = null;
  if (hidden > 0) {
    more = el("button", { type: "button", class: "secondary small ds-more-values" }, `${hidden} more`);
    more.addEventListener("click", () => {
      for (const b of boxes) b.chip.hidden = false;
      // The button goes: the focus it held goes to the first value it showed, not to the top of the page.
      if (more === document.activeElement) boxes[CHIPS_SHOWN].input.focus();
      more.remove();
    });
    chips.append(more);
  }
  const showAll = () => more?.click();
  let other = null;
  if (stats.distinct > values.length) {
    const id = nextId("ds-other");
    const what = stats.type === "string_list" ? "tag" : "value";
    other = el("input", {
      id, type: "search", placeholder: `another ${what}`, autocomplete: "off", spellcheck: "false",
    });
    other.addEventListener("change", onChange);
    other.addEventListener("keydown", (event) => {
      if (event.key === "Enter") {
        event.preventDefault();
        onChange();
      }
    });
    const listed = least ? `${values.length} common ones of ≥` : `the ${values.length} most common of `;
    nodes.push(el("div", { class: "row ds-other" },
      el("label", { for: id }, `or any other (${listed}${stats.distinct.toLocaleString("en")} are listed)`),
      other));
  }
  if (!values.length) nodes.push(el("p", { class: "muted" }, "no values"));
  const read = () => {
    const chosen = boxes.filter((b) => b.input.checked).map((b) => b.input.value);
    const extra = other?.value.trim();
    if (extra && !chosen.includes(extra)) chosen.push(extra);
    if (!chosen.length) return undefined;
    return chosen.length === 1 ? chosen[0] : { in: chosen };
  };
  const write = (spec) => {
    for (const b of boxes) b.input.checked = false;
    if (other) other.value = "";
    if (spec === undefined) return true;
    const wanted = typeof spec === "string" ? [spec] : only(spec, ["in"]) && Array.isArray(spec.in) ? spec.in : null;
    if (!wanted || !wanted.every((v) => typeof v === "string")) return false;
    let fits = true;
    for (const value of wanted) {
      const box = boxes.find((b) => b.input.value === value);
      if (box) {
        box.input.checked = true;
        if (box.chip.hidden) showAll();
      } else if (other && !other.value) other.value = value;
      else fits = false;
    }
    return fits;
  };
  return { nodes, read, write };
}

/** Booleans: any, yes or no. */
function triState(el, name, stats, onChange) {
  const group = nextId("ds-bool");
  const counts = Object.fromEntries((stats.values || []).map((v) => [String(v.value), v.count]));
  const radios = [["any", ""], ["yes", "true"], ["no", "false"]].map(([label, value]) => {
    const input = el("input", { type: "radio", name: group, value, onchange: onChange });
    if (!value) input.checked = true;
    const n = value ? el("span", { class: "ds-n" }, (counts[value] || 0).toLocaleString("en")) : null;
    return { input, node: el("label", { class: "ds-radio" }, input, label, n) };
  });
  const read = () => {
    const value = radios.find((r) => r.input.checked)?.input.value;
    return value ? value === "true" : undefined;
  };
  const write = (spec) => {
    const value = spec === undefined ? "" : typeof spec === "boolean" ? String(spec) : null;
    for (const r of radios) r.input.checked = r.input.value === (value ?? "");
    return value !== null;
  };
  return { nodes: [el("div", { class: "row ds-tri" }, ...radios.map((r) => r.node))], read, write };
}

/** Integers and floats: from and to (inclusive), the field's range as placeholders. */
function numberRange(el, name, stats, onChange) {
  const step = stats.type === "integer" ? "1" : "any";
  const show = (v) => (isNumber(v) ? String(stats.type === "float" ? +v.toFixed(4) : v) : "");
  const [low, high] = ["from", "to"].map((word, i) => {
    const id = nextId("ds-num");
    const bound = i ? stats.max : stats.min;
    const input = el("input", {
      id, type: "number", step, inputmode: "decimal", placeholder: show(bound), onchange: onChange,
    });
    return { input, nodes: [el("label", { for: id }, word), input] };
  });
  const read = () => {
    const spec = {};
    if (low.input.value !== "" && isNumber(low.input.valueAsNumber)) spec.gte = low.input.valueAsNumber;
    if (high.input.value !== "" && isNumber(high.input.valueAsNumber)) spec.lte = high.input.valueAsNumber;
    return Object.keys(spec).length ? spec : undefined;
  };
  const write = (spec) => {
    low.input.value = "";
    high.input.value = "";
    if (spec === undefined) return true;
    if (!only(spec, ["gte", "lte"]) || !Object.values(spec).every(isNumber)) return false;
    if (spec.gte !== undefined) low.input.value = String(spec.gte);
    if (spec.lte !== undefined) high.input.value = String(spec.lte);
    return true;
  };
  return { nodes: [el("div", { class: "row ds-range" }, ...low.nodes, ...high.nodes)], read, write };
}

/** Timestamps: from the start of one day to the end of another (UTC), within the field's range. */
function dateRange(el, name, stats, onChange) {
  const [first, last] = [stats.min, stats.max].map((v) => (typeof v === "string" ? v.slice(0, 10) : ""));
  const [low, high] = ["from", "to"].map((word) => {
    const id = nextId("ds-date");
    const input = el("input", { id, type: "date", onchange: onChange, ...(first ? { min: first, max: last } : {}) });
    return { input, nodes: [el("label", { for: id }, word), input] };
  });
  const read = () => {
    const spec = {};
    if (low.input.value) spec.gte = `${low.input.value}T00:00:00Z`;
    if (high.input.value) spec.lt = `${dayAfter(high.input.value)}T00:00:00Z`;
    return Object.keys(spec).length ? spec : undefined;
  };
  const midnight = (v) => typeof v === "string" && /^\d{4}-\d{2}-\d{2}T00:00:00Z$/.test(v);
  const write = (spec) => {
    low.input.value = "";
    high.input.value = "";
    if (spec === undefined) return true;
    if (!only(spec, ["gte", "lt"]) || !Object.values(spec).every(midnight)) return false;
    if (spec.gte) low.input.value = spec.gte.slice(0, 10);
    if (spec.lt) high.input.value = dayAfter(spec.lt.slice(0, 10), -1);
    return true;
  };
  const range = first ? el("p", { class: "muted ds-span" }, `${first} to ${last} (UTC)`) : null;
  const nodes = [el("div", { class: "row ds-range" }, ...low.nodes, ...high.nodes), range].filter(Boolean);
  return { nodes, read, write };
}
