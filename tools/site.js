// minima course site: highlight the section being read in the "On this page" list, and keep the active chapter in view.
(function () {
  var active = document.querySelector('.chapters li.active');
  // the page's sections, also under the current chapter in the sidebar (shown where the right-hand list is hidden)
  var top = document.querySelectorAll('.toc > ul > li > a[href^="#"]');
  if (active && top.length) {
    var ul = document.createElement('ul');
    ul.className = 'page-toc';
    Array.prototype.forEach.call(top, function (a) {
      var li = document.createElement('li'), b = document.createElement('a');
      b.setAttribute('href', a.getAttribute('href'));
      b.innerHTML = a.innerHTML;
      li.appendChild(b); ul.appendChild(li);
    });
    active.appendChild(ul);
  }
  if (active && active.scrollIntoView) active.scrollIntoView({block: 'nearest'});
  var links = Array.prototype.slice.call(document.querySelectorAll('.toc a[href^="#"], .page-toc a[href^="#"]'));
  if (!links.length || !('IntersectionObserver' in window)) return;
  var byId = {};
  links.forEach(function (a) { var id = decodeURIComponent(a.getAttribute('href').slice(1)); (byId[id] = byId[id] || []).push(a); });
  var observer = new IntersectionObserver(function (entries) {
    entries.forEach(function (e) {
      if (!e.isIntersecting) return;
      var as = byId[e.target.id];
      if (!as) return;
      links.forEach(function (l) { l.classList.remove('current'); });
      as.forEach(function (a) { a.classList.add('current'); });
    });
  }, {rootMargin: '0px 0px -75% 0px'});
  Object.keys(byId).forEach(function (id) {
    var el = document.getElementById(id);
    if (el) observer.observe(el);
  });
})();

// The interactive flame chart (chapter 23): speedscope fetches its trace, which a browser allows over http(s) but
// not from a file:// page; there, the frame says how to see it instead of speedscope's alert.
(function () {
  Array.prototype.forEach.call(document.querySelectorAll('iframe.flame-chart[data-src]'), function (f) {
    if (location.protocol === 'http:' || location.protocol === 'https:') { f.src = f.getAttribute('data-src'); return; }
    var p = document.createElement('p');
    p.className = 'flame-chart-note';
    p.textContent = 'The interactive flame chart needs the site served over http: python -m http.server -d _docs, ' +
      'then open http://localhost:8000/profiler.html (the static chart above shows the same kind of trace).';
    f.replaceWith(p);
  });
})();

// Long listings (a whole CUDA source file, a long exported cell) show their first lines and a button for the rest.
(function () {
  var LIMIT = 28;   // lines; a clipped block shows about 24 (site.css)
  Array.prototype.forEach.call(document.querySelectorAll('main div.sourceCode, main .cell-output > pre'), function (d) {
    var n = d.textContent.replace(/\n$/, '').split('\n').length;
    if (n <= (d.closest('.cell-output') ? 12 : LIMIT)) return;   // an output listing: a preview of ~7 lines
    d.classList.add('clipped');
    var b = document.createElement('button');
    b.type = 'button'; b.className = 'unclip'; b.textContent = 'Show all ' + n + ' lines';
    b.addEventListener('click', function () { d.classList.remove('clipped'); b.remove(); });
    d.parentNode.insertBefore(b, d.nextSibling);
  });
})();

// Search: every h2/h3 section of every page (tools/build_docs writes search-index.js: page title t, heading h, its h2 s,
// the names its code defines or calls k, the start of its prose x, the rest of its prose's words w, c for a doc card).
// Words match by stem and by prefix ("finder" finds "Finding", "broad" finds "broadcasting"), and also through the
// course's synonyms (backward ~ gradient ~ adjoint); every word of the query must match somewhere. A match in a
// heading counts most, then in the code's names, then in the page's title, then in the prose; a section whose
// heading holds the whole query gets a bonus; doc cards rank below the explanations around them.
(function () {
  var STOP = {};
  ('a an and are as at be by for from has have in into is it its of on or so that the their them then there these ' +
   'this those to was we were which with you your our can not no one two all each any how what why').split(' ')
    .forEach(function (w) { STOP[w] = 1; });
  var SYN = [['backward', 'gradient', 'adjoint', 'derivative', 'vjp', 'backprop'], ['forward', 'compute'],
             ['conv', 'convolution', 'conv2d'], ['matmul', 'matrix multiplication'], ['stride', 'strides', 'strided'],
             ['lr', 'learning rate'], ['gradcheck', 'gradient check']];
  // a light suffix stripper, the same for the index and the query: finding, finder, finds -> find; rates -> rat
  // words the suffix rules would fold into another word: "autograder" is not "autograd", "grading" is not "grad"
  var KEEP = {autograder: 'autograder', autograders: 'autograder', grader: 'grader', graders: 'grader',
              grading: 'grader', graded: 'grader', grade: 'grader', grades: 'grader'};
  function stem(w) {
    if (KEEP[w]) return KEEP[w];
    if (w.length <= 3 || /\d/.test(w)) return w;
    var s = w;
    if (/ies$/.test(s) && s.length > 4) s = s.slice(0, -3) + 'y';
    else if (/sses$/.test(s)) s = s.slice(0, -2);
    else if (/(xes|ches|shes|zes)$/.test(s)) s = s.slice(0, -2);
    else if (/[^su]s$/.test(s)) s = s.slice(0, -1);
    var m = /^(.{3,}?)(ing|ed|er|ly)$/.exec(s);
    if (m) { s = m[1]; if (/([^aeioulsz])\1$/.test(s)) s = s.slice(0, -1); }
    if (s.length > 3 && /e$/.test(s)) s = s.slice(0, -1);
    return s;
  }
  function words(text) {
    return (text || '').toLowerCase().split(/[^a-z0-9_]+/).filter(Boolean);
  }
  function stems(text) {        // the stems of a text's words, identifiers' parts (lr_find: lr, find) included
    var out = {};
    words(text).forEach(function (w) {
      (w.indexOf('_') >= 0 ? [w].concat(w.split('_')) : [w]).forEach(function (p) { if (p && !STOP[p]) out[stem(p)] = 1; });
    });
    return Object.keys(out);
  }
  function camel(names) { return (names || '').replace(/([a-z0-9])([A-Z])/g, '$1 $2'); }   // LogSoftmax: log softmax
  var input = document.getElementById('search-input'), list = document.getElementById('search-results');
  var index = (window.MINIMA_SEARCH || []).map(function (e) {
    return {e: e, head: stems(e.h), ctx: stems(e.t + ' ' + (e.s || '')), names: stems(e.k + ' ' + camel(e.k)),
            raw: (e.k || '').toLowerCase() + ' ' + (e.h || '').toLowerCase(), body: stems(e.x + ' ' + (e.w || ''))};
  });
  // how rare a stem is: a word found in most sections (gradient, compute) says less than a rare one (unbroadcast)
  var df = {}, N = index.length;
  index.forEach(function (d) {
    var seen = {};
    [d.head, d.names, d.body].forEach(function (l) { l.forEach(function (s) { if (!seen[s]) { seen[s] = 1; df[s] = (df[s] || 0) + 1; } }); });
  });
  function weight(s) {
    var n = df[s];
    if (!n) Object.keys(df).forEach(function (k) { if (k.lastIndexOf(s, 0) === 0) n = Math.max(n || 0, df[k]); });
    return 0.6 + 0.4 * Math.min(1, Math.log(1 + N / (n || 1)) / 5);
  }
  // how well the query term q (a stem) matches a list of stems: 1 exact, 0.8 as a prefix (3 letters at least)
  function match(list, q) {
    var best = 0;
    for (var i = 0; i < list.length && best < 1; i++) {
      if (list[i] === q) best = 1;
      else if (q.length >= 3 && list[i].lastIndexOf(q, 0) === 0) best = 0.8;
    }
    return best;
  }
  // a query word, its synonyms (a synonym of several words, "learning rate", counts as the phrase), as stems
  function terms(w) {
    var out = [[stem(w), 1]];
    SYN.forEach(function (g) {
      if (g.map(stem).indexOf(stem(w)) < 0) return;
      g.forEach(function (v) { var s = stems(v); if (s.length === 1 && s[0] !== stem(w)) out.push([s[0], 0.85]); });
    });
    return out;
  }
  // a query that holds a phrase of the synonyms ("gradient check") is also searched with its one-word form
  // ("gradcheck", its score scaled to the phrase's length); an entry keeps its better score
  function search(q) {
    var best = {}, hits = [], n = words(q).length;
    [q].concat(rewrites(q)).forEach(function (v) {
      search1(v).forEach(function (h) {
        h[0] *= n / words(v).length;     // the one word stands for the phrase's words
        var key = h[1].p + '#' + h[1].a + '#' + h[1].h;
        if (!best[key]) { best[key] = h; hits.push(h); }
        else if (h[0] > best[key][0]) { best[key][0] = h[0]; best[key][2] = h[2]; }
      });
    });
    hits.sort(function (a, b) { return b[0] - a[0]; });
    return hits.slice(0, 12);
  }
  function rewrites(q) {
    var low = ' ' + words(q).join(' ') + ' ', out = [];
    SYN.forEach(function (g) {
      var one = g.filter(function (v) { return v.indexOf(' ') < 0; })[0];
      g.forEach(function (v) { if (one && v.indexOf(' ') > 0 && low.indexOf(' ' + v + ' ') >= 0) out.push(low.replace(' ' + v + ' ', ' ' + one + ' ')); });
    });
    return out;
  }
  function search1(q) {
    var ws = words(q).filter(function (w) { return !STOP[w]; });
    if (!ws.length) return [];
    var qs = ws.map(terms), hits = [];
    var wq = qs.map(function (ts) { return weight(ts[0][0]); });
    index.forEach(function (d) {
      var score = 0, inHead = 0, found = [], headHit = {};
      for (var i = 0; i < qs.length; i++) {
        var best = 0, where = 0;
        qs[i].forEach(function (t) {
          var s = t[0], f = t[1], v;
          if ((v = 4 * f * match(d.head, s)) > best) { best = v; where = 1; d.head.forEach(function (h) { if (h.lastIndexOf(s, 0) === 0) headHit[h] = 1; }); }
          if ((v = 2.5 * f * match(d.names, s)) > best) { best = v; where = 0; }
          if (s.length >= 4 && d.raw.indexOf(s) >= 0 && (v = 1.8 * f) > best) { best = v; where = 0; }   // unbroadcast
          if ((v = 1.5 * f * match(d.ctx, s)) > best) { best = v; where = 0; }
          if ((v = 1 * f * match(d.body, s)) > best) { best = v; where = 0; }
        });
        if (!best) return;
        score += best * wq[i]; inHead += where; found.push(qs[i][0][0]);
      }
      if (qs.length > 1 && inHead === qs.length) score += 2;    // the heading says it all
      if (inHead) score += 1.5 * Object.keys(headHit).length / d.head.length;   // ... and little else
      if (d.e.c) score = 0.85 * score - 3;                     // a doc card: below the explanation around it,
                                                               // even when its name holds every word of the query
      if (!d.e.h) score -= 0.5;                                // a page's opening lines
      hits.push([score, d.e, found]);
    });
    return hits;
  }
  window.minimaSearch = function (q) { return search(q).map(function (h) { return {score: h[0], p: h[1].p, a: h[1].a, h: h[1].h, c: !!h[1].c}; }); };
  function esc(s) { return s.replace(/[&<>"]/g, function (c) { return {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'}[c]; }); }
  function snippet(text, found) {      // around the first word of the text whose stem starts with a query stem
    var re = /[A-Za-z0-9_]+/g, m, at = -1;
    while (at < 0 && (m = re.exec(text))) {
      var s = stem(m[0].toLowerCase());
      for (var i = 0; i < found.length; i++) if (s.lastIndexOf(found[i], 0) === 0) { at = m.index; break; }
    }
    var start = Math.max(0, at - 40), s2 = (start ? '…' : '') + text.slice(start, start + 130) + (text.length > start + 130 ? '…' : '');
    return esc(s2);
  }
  if (!input || !list) return;
  function render() {
    var q = input.value.trim(), hits = search(q);
    if (!q) { list.hidden = true; list.innerHTML = ''; return; }
    list.innerHTML = hits.length ? hits.map(function (h) {
      var e = h[1], where = e.h ? e.t + (e.s ? ' › ' + e.s : '') : '';
      return '<li' + (e.c ? ' class="sr-card"' : '') + '><a href="' + e.p + (e.a ? '#' + e.a : '') + '"><span class="sr-title">' +
             esc(e.h || e.t) + '</span>' + (where ? '<span class="sr-page">' + esc(where) + '</span>' : '') +
             '<span class="sr-text">' + snippet(e.x, h[2]) + '</span></a></li>';
    }).join('') : '<li class="sr-none">No matches</li>';
    list.hidden = false;
  }
  input.addEventListener('input', render);
  input.addEventListener('keydown', function (ev) {
    if (ev.key === 'Enter') { var a = list.querySelector('a'); if (a) window.location.href = a.getAttribute('href'); }
    if (ev.key === 'Escape') { input.value = ''; render(); }
  });
})();
