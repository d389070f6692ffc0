// hopgym report: renders the episode list, timelines and the comparison from the embedded JSON.
// Every string from the data goes into the page as a text node or an attribute value, never as
// markup, so questions and documents from a dataset cannot inject HTML.
(function () {
  "use strict";
  const DATA = JSON.parse(document.getElementById("hopgym-data").textContent);
  const DOCS = DATA.docs;
  const RUNS = DATA.runs;
  const PAGE = 50;
  const OUTCOMES = ["correct", "wrong", "no answer"];

  function h(tag, attrs) {
    const el = document.createElement(tag);
    if (attrs) {
      for (const key of Object.keys(attrs)) {
        const v = attrs[key];
        if (v === null || v === undefined || v === false) continue;
        if (key === "class") el.className = v;
        else if (key.slice(0, 2) === "on") el.addEventListener(key.slice(2), v);
        else el.setAttribute(key, v === true ? "" : String(v));
      }
    }
    for (let i = 2; i < arguments.length; i++) add(el, arguments[i]);
    return el;
  }
  function add(el, kid) {
    if (kid === null || kid === undefined || kid === false) return;
    if (Array.isArray(kid)) { kid.forEach(function (k) { add(el, k); }); return; }
    el.appendChild(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  function clear(el) { while (el.firstChild) el.removeChild(el.firstChild); return el; }
  function num(v, d) { return (typeof v === "number") ? v.toFixed(d === undefined ? 3 : d) : "–"; }
  function signed(v) { return (v >= 0 ? "+" : "−") + Math.abs(v).toFixed(3); }
  function outcome(ep) { return ep.prediction === null ? "no answer" : (ep.em >= 1 ? "correct" : "wrong"); }
  function cls(name) { return name.replace(/ /g, "-"); }
  function plural(n, one, many) { return n + " " + (n === 1 ? one : (many || one + "s")); }
  function hops(ep) { return ep.hops === null || ep.hops === undefined ? "hops unknown" : plural(ep.hops, "hop"); }
  function label(v) { return v === null || v === undefined ? "unknown" : String(v); }
  function outcomeBadge(ep) {
    const o = outcome(ep);
    return h("span", { class: "badge b-" + cls(o), "data-outcome": o }, o);
  }

  // ------------------------------------------------------------------ tabs
  const panels = {};
  document.querySelectorAll(".panel").forEach(function (p) { panels[p.id] = p; });
  const built = {};
  function showTab(name) {
    document.querySelectorAll(".tab").forEach(function (t) {
      t.setAttribute("aria-selected", t.dataset.tab === name ? "true" : "false");
    });
    Object.keys(panels).forEach(function (k) { panels[k].hidden = k !== name; });
    if (!built[name]) {
      built[name] = true;
      if (name === "episodes") buildEpisodes();
      if (name === "compare") buildCompare();
    }
    state.tab = name;
  }
  document.querySelectorAll(".tab").forEach(function (t) {
    t.addEventListener("click", function () { showTab(t.dataset.tab); });
  });

  // ------------------------------------------------------------------ episodes
  const state = { tab: "summary", run: 0, views: RUNS.map(function () {
    return { outcome: "all", kind: "all", hops: "all", text: "", page: 0, selected: null, rows: null };
  }) };
  const haystacks = RUNS.map(function () { return []; });

  function haystack(r, ep) {
    let s = haystacks[r][ep.index];
    if (s === undefined) {
      const parts = [ep.question_id, ep.question, ep.prediction || "", ep.answers.join(" "),
        ep.kind || "", label(ep.hops)];
      ep.turns.forEach(function (t) {
        parts.push(t.query || "", t.answer || "", t.think || "", t.route || "");
        (t.calls || []).forEach(function (c) { parts.push(c.name, c.query || "", c.answer || ""); });
      });
      s = haystacks[r][ep.index] = parts.join("\n").toLowerCase();
    }
    return s;
  }

  function matches(r, ep, v) {
    if (v.outcome === "invalid turns") { if (!(ep.invalid > 0)) return false; }
    else if (v.outcome !== "all" && outcome(ep) !== v.outcome) return false;
    if (v.kind !== "all" && label(ep.kind) !== v.kind) return false;
    if (v.hops !== "all" && label(ep.hops) !== v.hops) return false;
    if (v.text) {
      const hay = haystack(r, ep);
      const words = v.text.toLowerCase().split(/\s+/).filter(Boolean);
      for (const w of words) if (hay.indexOf(w) < 0) return false;
    }
    return true;
  }

  function values(r, field) {
    const set = new Set();
    RUNS[r].episodes.forEach(function (ep) { set.add(label(ep[field])); });
    return Array.from(set).sort(function (a, b) {
      const na = /^\d+$/.test(a), nb = /^\d+$/.test(b);
      if (na && nb) return Number(a) - Number(b);
      if (a === "unknown") return 1;
      if (b === "unknown") return -1;
      return a < b ? -1 : a > b ? 1 : 0;
    });
  }

  let epUI = null;
  function select(id, options, current, onchange) {
    const s = h("select", { id: id, onchange: function () { onchange(s.value); } });
    options.forEach(function (o) {
      const opt = h("option", { value: o[0] }, o[1]);
      if (o[0] === current) opt.selected = true;
      s.appendChild(opt);
    });
    return s;
  }

  function buildEpisodes() {
    const panel = panels.episodes;
    const filters = h("div", { class: "filters", role: "search" });
    const list = h("div", { class: "list", id: "ep-list" });
    const detail = h("div", { class: "detail", id: "ep-detail" },
      h("div", { class: "timeline empty" }, "Select an episode to see its timeline."));
    const shown = h("span", { class: "shown", id: "shown-count" });
    panel.appendChild(filters);
    panel.appendChild(h("div", { class: "split" }, list, detail));
    epUI = { filters: filters, list: list, detail: detail, shown: shown };
    buildFilters();
    refresh();
  }

  function buildFilters() {
    const r = state.run, v = state.views[r];
    clear(epUI.filters);
    if (RUNS.length > 1) {
      epUI.filters.appendChild(h("label", null, "run ", select("f-run",
        RUNS.map(function (run, i) { return [String(i), (i ? "B: " : "A: ") + run.name]; }), String(r),
        function (x) { state.run = Number(x); buildFilters(); refresh(); })));
    }
    const outs = [["all", "all"]].concat(OUTCOMES.map(function (o) { return [o, o]; }),
      [["invalid turns", "invalid turns"]]);
    epUI.filters.appendChild(h("label", null, "outcome ", select("f-outcome", outs, v.outcome,
      function (x) { v.outcome = x; v.page = 0; refresh(); })));
    ["kind", "hops"].forEach(function (field) {
      const opts = [["all", "all"]].concat(values(r, field).map(function (x) { return [x, x]; }));
      epUI.filters.appendChild(h("label", null, field + " ", select("f-" + field, opts, v[field],
        function (x) { v[field] = x; v.page = 0; refresh(); })));
    });
    let timer = null;
    const text = h("input", { type: "search", id: "f-text", placeholder: "search question, id, answer, query…",
      value: v.text, "aria-label": "search text" });
    text.addEventListener("input", function () {
      clearTimeout(timer);
      timer = setTimeout(function () { v.text = text.value.trim(); v.page = 0; refresh(); }, 150);
    });
    epUI.filters.appendChild(text);
    epUI.filters.appendChild(epUI.shown);
  }

  function refresh() {
    const r = state.run, v = state.views[r], eps = RUNS[r].episodes;
    v.rows = eps.filter(function (ep) { return matches(r, ep, v); });
    epUI.shown.textContent = v.rows.length + " of " + eps.length + " episodes";
    epUI.shown.setAttribute("data-shown", String(v.rows.length));
    renderList();
    if (v.selected !== null) openEpisode(v.selected, false);
    else clear(epUI.detail).appendChild(h("div", { class: "timeline empty" },
      "Select an episode to see its timeline (j / k move through the list)."));
  }

  function pager(page, total, go) {
    const pages = Math.max(1, Math.ceil(total / PAGE));
    if (pages < 2) return null;
    return h("div", { class: "pager" },
      h("button", { type: "button", class: "prev", disabled: page <= 0, onclick: function () { go(page - 1); } }, "‹ prev"),
      h("span", { class: "page" }, "page " + (page + 1) + " of " + pages),
      h("button", { type: "button", class: "next", disabled: page >= pages - 1, onclick: function () { go(page + 1); } }, "next ›"));
  }

  function renderList() {
    const r = state.run, v = state.views[r];
    clear(epUI.list);
    if (!v.rows.length) { epUI.list.appendChild(h("div", { class: "empty" }, "No episode matches these filters.")); return; }
    const start = v.page * PAGE;
    const go = function (p) { v.page = p; renderList(); };
    add(epUI.list, pager(v.page, v.rows.length, go));
    v.rows.slice(start, start + PAGE).forEach(function (ep) {
      epUI.list.appendChild(h("button", {
        type: "button", class: "ep-row" + (ep.index === v.selected ? " selected" : ""),
        "data-index": ep.index, onclick: function () { openEpisode(ep.index, true); },
      },
      h("span", { class: "line1" }, outcomeBadge(ep), ep.invalid > 0 ? h("span", { class: "badge b-invalid" }, ep.invalid + " invalid") : null,
        h("span", null, "#" + (ep.index + 1) + " · " + ep.question_id),
        h("span", null, label(ep.kind) + " · " + hops(ep) + " · " + plural(ep.steps, "step"))),
      h("span", { class: "q" }, ep.question),
      h("span", { class: "pred" }, "→ " + (ep.prediction === null ? "no answer" : ep.prediction) +
        (outcome(ep) === "correct" ? "" : "   (gold: " + ep.answers[0] + ")"))));
    });
    add(epUI.list, pager(v.page, v.rows.length, go));
  }

  function openEpisode(index, scroll) {
    const r = state.run, v = state.views[r];
    v.selected = index;
    epUI.list.querySelectorAll(".ep-row").forEach(function (row) {
      row.classList.toggle("selected", Number(row.dataset.index) === index);
    });
    clear(epUI.detail).appendChild(timeline(RUNS[r].episodes[index], RUNS[r]));
    epUI.detail.scrollTop = 0;
    if (scroll && epUI.detail.getBoundingClientRect().top < 0) epUI.detail.scrollIntoView();
  }

  function step(delta) {
    const v = state.views[state.run];
    if (!v.rows || !v.rows.length) return;
    let pos = v.rows.findIndex(function (ep) { return ep.index === v.selected; });
    pos = Math.min(Math.max(pos + delta, 0), v.rows.length - 1);
    const page = Math.floor(pos / PAGE);
    if (page !== v.page) { v.page = page; renderList(); }
    openEpisode(v.rows[pos].index, true);
    const row = epUI.list.querySelector('.ep-row[data-index="' + v.rows[pos].index + '"]');
    if (row) row.scrollIntoView({ block: "nearest" });
  }
  document.addEventListener("keydown", function (e) {
    if (state.tab !== "episodes" || e.target.closest("input, select, textarea")) return;
    if (e.key === "j" || e.key === "ArrowDown") { step(1); e.preventDefault(); }
    if (e.key === "k" || e.key === "ArrowUp") { step(-1); e.preventDefault(); }
  });

  // Outcome counts on the summary open the filtered list.
  document.querySelectorAll("#summary .count").forEach(function (b) {
    b.addEventListener("click", function () {
      showTab("episodes");
      const v = state.views[state.run];
      v.outcome = b.dataset.outcome; v.page = 0; v.selected = null;
      buildFilters(); refresh();
    });
  });

  // ------------------------------------------------------------------ timeline
  function docCard(idx, marks) {
    const d = DOCS[idx];
    const card = h("div", { class: "doc" + (marks.gold ? " gold" : ""), "data-doc-id": d[0],
      title: "click to show the whole text" },
    h("div", { class: "doc-head" },
      marks.gold ? h("span", { class: "badge b-gold" }, "★ gold") : null,
      marks.repeat ? h("span", { class: "badge b-repeat" }, "repeat · first shown at turn " + marks.repeat) : null,
      marks.note ? h("span", { class: "badge b-repeat" }, marks.note) : null,
      h("span", { class: "doc-title" }, d[1] || "(title not recorded)"),
      h("span", { class: "doc-id" }, d[0])),
    d[2] ? h("div", { class: "doc-text" }, d[2]) : null);
    card.addEventListener("click", function () { card.classList.toggle("open"); });
    return card;
  }

  function terms(obj) {
    return Object.keys(obj || {}).sort().map(function (k) {
      const v = obj[k];
      return h("span", { class: "term " + (v > 0 ? "pos" : v < 0 ? "neg" : "") }, k + " " + signed(v));
    });
  }

  // A tool call as written: name(key=value, …), the values as JSON; arguments that are not an
  // object (malformed JSON) are shown as they came.
  function signature(c) {
    const a = c.arguments;
    let args;
    if (a !== null && typeof a === "object" && !Array.isArray(a)) {
      args = Object.keys(a).map(function (k) { return k + "=" + JSON.stringify(a[k]); }).join(", ");
    } else {
      args = typeof a === "string" ? a : JSON.stringify(a === undefined ? null : a);
    }
    return (c.name || "(no name)") + "(" + args + ")";
  }

  function skippedNote(ids) {
    if (!ids || !ids.length) return null;
    return h("div", { class: "skipped" }, ids.length + " already-seen document" +
      (ids.length > 1 ? "s" : "") + " skipped (de-duplication): " + ids.join(", "));
  }

  // One call of a tools-protocol turn and its result: the documents it showed (gold marked), an
  // answer, a tool error, or the tool message's text.
  function toolCall(c, k, n, gold, firstShown) {
    const type = c.action_type || "invalid";
    const box = h("div", { class: "call c-" + cls(type), "data-call": k + 1 },
      h("div", { class: "call-head" }, h("span", { class: "call-no" }, "Call " + (k + 1)),
        h("span", { class: "badge b-type " + cls(type) }, type),
        h("code", { class: "call-sig" }, signature(c)),
        c.id ? h("span", { class: "muted call-id" }, "id " + c.id) : null,
        c.source && c.name === "search" ? h("span", { class: "muted" }, "in " + c.source) : null));
    const res = h("div", { class: "call-result" });
    if (type === "answer") res.appendChild(h("div", { class: "act" }, h("b", null, "Answer: "), c.answer || "", h("span", { class: "muted" }, " (ends the episode)")));
    if (type === "invalid") res.appendChild(h("div", { class: "act invalid-reason" }, h("b", null, "Tool error: "), c.invalid_action || "unknown reason"));
    if (c.retrieval_error) res.appendChild(h("div", { class: "act invalid-reason" }, "Retrieval error: " + c.retrieval_error));
    if (c.docs && c.docs.length) {
      res.appendChild(h("div", { class: "docs" }, c.docs.map(function (i) {
        const id = DOCS[i][0], at = firstShown[id];
        return docCard(i, { gold: gold.has(id), repeat: at !== undefined && at < n + 1 ? String(at) : null });
      })));
    }
    add(res, skippedNote(c.skipped_ids));
    if (type !== "invalid" && c.result && c.result.trim()) res.appendChild(h("div", { class: "obs" }, c.result.trim()));
    if (res.firstChild) box.appendChild(res);
    return box;
  }

  function timeline(ep, run) {
    const gold = new Set((ep.support_docs || []).map(function (i) { return DOCS[i][0]; }));
    const firstShown = {};
    (ep.background_docs || []).forEach(function (i) { firstShown[DOCS[i][0]] = 0; });
    ep.turns.forEach(function (t, n) {
      (t.docs || []).forEach(function (i) { if (!(DOCS[i][0] in firstShown)) firstShown[DOCS[i][0]] = n + 1; });
    });
    const o = outcome(ep);
    const root = h("article", { class: "timeline", "data-index": ep.index, "data-outcome": o });
    root.appendChild(h("div", { class: "meta" }, "#" + (ep.index + 1) + " · " + ep.question_id +
      " · seed " + label(ep.seed) + " · " + label(ep.kind) + " · " + hops(ep) + " · " + run.name));
    root.appendChild(h("div", { class: "question" }, ep.question));

    const reader = h("div", { class: "reader" }, h("div", { class: "hint" }, "For the reader · never shown to the agent"),
      h("div", { class: "gold-answers" }, h("b", null, "Gold answer: "), ep.answers[0] || "–",
        ep.answers.length > 1 ? h("span", { class: "muted" }, "  (also accepted: " + ep.answers.slice(1).join(", ") + ")") : null));
    if (ep.support_docs === null) {
      reader.appendChild(h("div", { class: "muted" }, "Supporting documents: not recorded in this file."));
    } else {
      reader.appendChild(h("div", null, h("b", null, "Supporting documents")));
      reader.appendChild(h("div", { class: "docs support" }, ep.support_docs.map(function (i) {
        const at = firstShown[DOCS[i][0]];
        return docCard(i, { gold: true, note: at === undefined ? "never shown" : (at === 0 ? "shown in the prompt" : "shown at turn " + at) });
      })));
    }
    root.appendChild(reader);
    if (ep.background_docs && ep.background_docs.length) {
      root.appendChild(h("div", null, h("b", null, "Shown with the question"),
        h("div", { class: "docs" }, ep.background_docs.map(function (i) { return docCard(i, { gold: gold.has(DOCS[i][0]) }); }))));
    }

    const ol = h("ol", { class: "turns" });
    ep.turns.forEach(function (t, n) {
      const type = t.action_type || "invalid";
      const li = h("li", { class: "turn t-" + type, "data-turn": n + 1 });
      const calls = t.calls && t.calls.length ? t.calls : null;
      li.appendChild(h("div", { class: "turn-head" }, h("span", { class: "turn-no" }, "Turn " + (n + 1)),
        calls ? h("span", { class: "badge b-type tools" }, plural(calls.length, "tool call"))
          : h("span", { class: "badge b-type " + type }, type),
        t.source && !calls ? h("span", { class: "muted" }, "in " + t.source) : null,
        h("span", { class: "reward" }, "reward " + signed(t.reward || 0)), terms(t.reward_terms)));
      if (t.think) li.appendChild(h("div", { class: "think" }, t.think));
      if (calls) {
        li.appendChild(h("div", { class: "calls" }, calls.map(function (c, k) { return toolCall(c, k, n, gold, firstShown); })));
        if (t.observation && t.observation.trim()) li.appendChild(h("div", { class: "obs" }, t.observation.trim()));
        if (t.action) li.appendChild(h("details", { class: "raw" }, h("summary", null, "raw turn"), h("pre", null, t.action)));
        ol.appendChild(li);
        return;
      }
      if (type === "search") li.appendChild(h("div", { class: "act" }, h("b", null, "Search: "), h("code", null, t.query || "")));
      if (type === "route") li.appendChild(h("div", { class: "act" }, h("b", null, "Route → "), h("code", null, t.route || "")));
      if (type === "answer") li.appendChild(h("div", { class: "act" }, h("b", null, "Answer: "), t.answer || ""));
      if (type === "invalid") li.appendChild(h("div", { class: "act invalid-reason" }, h("b", null, "Invalid turn: "), t.invalid_action || "unknown reason"));
      if (t.retrieval_error) li.appendChild(h("div", { class: "act invalid-reason" }, "Retrieval error: " + t.retrieval_error));
      if (t.docs && t.docs.length) {
        li.appendChild(h("div", { class: "docs" }, t.docs.map(function (i) {
          const id = DOCS[i][0], at = firstShown[id];
          return docCard(i, { gold: gold.has(id), repeat: at !== undefined && at < n + 1 ? String(at) : null });
        })));
      }
      add(li, skippedNote(t.skipped_ids));
      if (t.observation && t.observation.trim()) li.appendChild(h("div", { class: "obs" }, t.observation.trim()));
      if (t.action) {
        const raw = h("details", { class: "raw", open: type === "invalid" }, h("summary", null, "raw turn"), h("pre", null, t.action));
        li.appendChild(raw);
      }
      ol.appendChild(li);
    });
    root.appendChild(ol);

    const endText = o === "no answer" ? (ep.end === "budget" ? "No answer: the step budget ran out"
      : ep.end === "terminated" ? "No answer: the episode was ended" : "No answer") :
      (o === "correct" ? "Correct" : "Wrong") + ": answered “" + ep.prediction + "”" +
        (o === "correct" ? "" : ", gold “" + ep.answers[0] + "”");
    const bySource = Object.keys(ep.searches_by_source || {}).sort().map(function (k) { return k + " " + ep.searches_by_source[k]; }).join(", ");
    root.appendChild(h("div", { class: "verdict " + cls(o) }, endText,
      h("div", { class: "nums" }, "EM " + num(ep.em, 0) + " · F1 " + num(ep.f1, 2) + " · support recall " +
        num(ep.support_recall, 2) + " · return " + signed(ep.return) + " · " + plural(ep.steps, "step") + " · " +
        plural(ep.searches, "search", "searches") + (bySource ? " (" + bySource + ")" : "") +
        (ep.failed_searches ? " · " + plural(ep.failed_searches, "failed search", "failed searches") : "") +
        " · " + ep.invalid + " invalid"),
      h("div", { class: "nums" }, terms(ep.reward_terms))));
    return root;
  }

  // ------------------------------------------------------------------ compare
  const CATS = ["fixed", "broke", "both wrong", "both correct"];
  let cmp = null;
  function buildCompare() {
    const panel = panels.compare, P = DATA.pairs;
    cmp = { cat: P.fixed.length ? "fixed" : (P.broke.length ? "broke" : "both wrong"), page: 0, text: "", rows: [] };
    const counts = h("div", { class: "count-row" }, CATS.concat(["only a", "only b"]).map(function (c) {
      const n = P[c].length;
      const name = c === "only a" ? "only in A" : c === "only b" ? "only in B" : c;
      const b = h("button", { type: "button", class: "count cmp-" + cls(c), "data-cat": c, "data-count": c },
        h("span", { class: "n" }, String(n)), " ", h("span", { class: "label" }, name));
      if (CATS.indexOf(c) >= 0) b.addEventListener("click", function () { cmp.cat = c; cmp.page = 0; catSel.value = c; renderPairs(); });
      return b;
    }));
    const catSel = select("c-cat", CATS.map(function (c) { return [c, c + " (" + P[c].length + ")"]; }), cmp.cat,
      function (x) { cmp.cat = x; cmp.page = 0; renderPairs(); });
    const text = h("input", { type: "search", id: "c-text", placeholder: "search question or id…", "aria-label": "search text" });
    text.addEventListener("input", function () { cmp.text = text.value.trim().toLowerCase(); cmp.page = 0; renderPairs(); });
    cmp.shown = h("span", { class: "shown", id: "c-shown" });
    cmp.list = h("div", { class: "list", id: "pair-list" });
    cmp.detail = h("div", { class: "detail", id: "pair-detail" });
    panel.appendChild(h("p", { class: "muted" }, "Episodes paired by question id and seed (A = " + RUNS[0].name +
      ", B = " + RUNS[1].name + "). Fixed: B is correct where A was not; broke: A was correct, B is not."));
    panel.appendChild(counts);
    panel.appendChild(h("div", { class: "filters" }, h("label", null, "show ", catSel), text, cmp.shown));
    panel.appendChild(cmp.list);
    panel.appendChild(cmp.detail);
    renderPairs();
  }

  function renderPairs() {
    const A = RUNS[0].episodes, B = RUNS[1].episodes;
    cmp.rows = DATA.pairs[cmp.cat].filter(function (p) {
      if (!cmp.text) return true;
      const a = A[p[0]];
      return (a.question + "\n" + a.question_id).toLowerCase().indexOf(cmp.text) >= 0;
    });
    cmp.shown.textContent = cmp.rows.length + " pairs";
    cmp.shown.setAttribute("data-shown", String(cmp.rows.length));
    clear(cmp.list);
    if (!cmp.rows.length) { cmp.list.appendChild(h("div", { class: "empty" }, "No pair in this group.")); return; }
    const go = function (p) { cmp.page = p; renderPairs(); };
    add(cmp.list, pager(cmp.page, cmp.rows.length, go));
    cmp.rows.slice(cmp.page * PAGE, cmp.page * PAGE + PAGE).forEach(function (p) {
      const a = A[p[0]], b = B[p[1]];
      cmp.list.appendChild(h("button", { type: "button", class: "ep-row pair-row", "data-a": p[0], "data-b": p[1],
        onclick: function () { openPair(p); } },
      h("span", { class: "line1" }, h("span", { class: "run-tag run-a" }, "A"), outcomeBadge(a),
        h("span", { class: "arrow" }, "→"), h("span", { class: "run-tag run-b" }, "B"), outcomeBadge(b),
        h("span", null, a.question_id + " · seed " + label(a.seed) + " · " + label(a.kind) + " · " + hops(a))),
      h("span", { class: "q" }, a.question),
      h("span", { class: "pred" }, "A: " + (a.prediction === null ? "no answer" : a.prediction) + "   B: " +
        (b.prediction === null ? "no answer" : b.prediction) + "   gold: " + a.answers[0])));
    });
  }

  function openPair(p) {
    cmp.list.querySelectorAll(".pair-row").forEach(function (row) {
      row.classList.toggle("selected", Number(row.dataset.a) === p[0] && Number(row.dataset.b) === p[1]);
    });
    clear(cmp.detail).appendChild(h("div", { class: "side" },
      h("div", { class: "side-a" }, h("h3", null, h("span", { class: "run-tag run-a" }, "A"), " " + RUNS[0].name), timeline(RUNS[0].episodes[p[0]], RUNS[0])),
      h("div", { class: "side-b" }, h("h3", null, h("span", { class: "run-tag run-b" }, "B"), " " + RUNS[1].name), timeline(RUNS[1].episodes[p[1]], RUNS[1]))));
    cmp.detail.scrollIntoView();
  }

  document.body.setAttribute("data-ready", "true");
})();
