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
// the names its code defines or calls k, its prose x). Every word of the query must match somewhere; a word also
// matches its course synonyms (backward ~ gradient ~ adjoint).
(function () {
  var input = document.getElementById('search-input'), list = document.getElementById('search-results');
  var index = window.MINIMA_SEARCH || [];
  if (!input || !list) return;
  var SYN = [['backward', 'gradient', 'adjoint', 'derivative', 'vjp'], ['forward', 'compute'],
             ['conv', 'convolution', 'conv2d'], ['matmul', 'matrix multiplication'], ['stride', 'strides', 'strided']];
  function variants(w) {
    var out = [w];
    SYN.forEach(function (g) { if (g.indexOf(w) >= 0) g.forEach(function (v) { if (out.indexOf(v) < 0) out.push(v); }); });
    return out;
  }
  function esc(s) { return s.replace(/[&<>"]/g, function (c) { return {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'}[c]; }); }
  function has(text, vs) { for (var i = 0; i < vs.length; i++) if (text.indexOf(vs[i]) >= 0) return vs[i]; return null; }
  function search(q) {
    var words = q.toLowerCase().split(/\s+/).filter(Boolean);
    if (!words.length) return [];
    var hits = [];
    index.forEach(function (e) {
      var head = (e.t + ' ' + (e.s || '') + ' ' + e.h).toLowerCase(), names = (e.k || '').toLowerCase(), body = e.x.toLowerCase();
      var score = 0, found = [];
      for (var i = 0; i < words.length; i++) {
        var vs = variants(words[i]), exact = [words[i]];
        if (has(head, exact)) score += 3; else if (has(head, vs)) score += 2.5;
        else if (has(names, exact)) score += 2; else if (has(names, vs)) score += 1.6;
        else if (has(body, exact)) score += 1; else if (has(body, vs)) score += 0.8;
        else return;
        found.push(has(body, vs) || words[i]);
      }
      if (!e.h) score -= 0.5;
      hits.push([score, e, found]);
    });
    hits.sort(function (a, b) { return b[0] - a[0]; });
    return hits.slice(0, 12);
  }
  function snippet(text, found) {
    var low = text.toLowerCase(), at = -1;
    for (var i = 0; i < found.length && at < 0; i++) at = low.indexOf(found[i]);
    var start = Math.max(0, at - 40), s = (start ? '…' : '') + text.slice(start, start + 130) + (text.length > start + 130 ? '…' : '');
    return esc(s);
  }
  function render() {
    var q = input.value.trim(), hits = search(q);
    if (!q) { list.hidden = true; list.innerHTML = ''; return; }
    list.innerHTML = hits.length ? hits.map(function (h) {
      var e = h[1], where = e.h ? e.t + (e.s ? ' › ' + e.s : '') : '';
      return '<li><a href="' + e.p + (e.a ? '#' + e.a : '') + '"><span class="sr-title">' + esc(e.h || e.t) + '</span>' +
             (where ? '<span class="sr-page">' + esc(where) + '</span>' : '') +
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
