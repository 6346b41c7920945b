// minima course site: highlight the section being read in the "On this page" list, and keep the active chapter in view.
(function () {
  var active = document.querySelector('.chapters li.active');
  if (active && active.scrollIntoView) active.scrollIntoView({block: 'nearest'});
  var links = Array.prototype.slice.call(document.querySelectorAll('.toc a[href^="#"]'));
  if (!links.length || !('IntersectionObserver' in window)) return;
  var byId = {};
  links.forEach(function (a) { byId[decodeURIComponent(a.getAttribute('href').slice(1))] = a; });
  var observer = new IntersectionObserver(function (entries) {
    entries.forEach(function (e) {
      if (!e.isIntersecting) return;
      var a = byId[e.target.id];
      if (!a) return;
      links.forEach(function (l) { l.classList.remove('current'); });
      a.classList.add('current');
    });
  }, {rootMargin: '0px 0px -75% 0px'});
  Object.keys(byId).forEach(function (id) {
    var el = document.getElementById(id);
    if (el) observer.observe(el);
  });
})();

// Search: every h2/h3 section of every page (tools/build_docs writes search-index.js); all words must match.
(function () {
  var input = document.getElementById('search-input'), list = document.getElementById('search-results');
  var index = window.MINIMA_SEARCH || [];
  if (!input || !list) return;
  function esc(s) { return s.replace(/[&<>"]/g, function (c) { return {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'}[c]; }); }
  function search(q) {
    var words = q.toLowerCase().split(/\s+/).filter(Boolean);
    if (!words.length) return [];
    var hits = [];
    index.forEach(function (e) {
      var head = (e.t + ' ' + e.h).toLowerCase(), body = e.x.toLowerCase(), score = 0;
      for (var i = 0; i < words.length; i++) {
        var w = words[i];
        if (head.indexOf(w) >= 0) score += 3; else if (body.indexOf(w) >= 0) score += 1; else return;
      }
      if (!e.h) score -= 0.5;
      hits.push([score, e]);
    });
    hits.sort(function (a, b) { return b[0] - a[0]; });
    return hits.slice(0, 12).map(function (h) { return h[1]; });
  }
  function snippet(text, words) {
    var low = text.toLowerCase(), at = low.indexOf(words[0] || '');
    var start = Math.max(0, at - 40), s = (start ? '…' : '') + text.slice(start, start + 130) + (text.length > start + 130 ? '…' : '');
    return esc(s);
  }
  function render() {
    var q = input.value.trim(), hits = search(q);
    if (!q) { list.hidden = true; list.innerHTML = ''; return; }
    var words = q.toLowerCase().split(/\s+/).filter(Boolean);
    list.innerHTML = hits.length ? hits.map(function (e) {
      return '<li><a href="' + e.p + (e.a ? '#' + e.a : '') + '"><span class="sr-title">' + esc(e.h || e.t) + '</span>' +
             (e.h ? '<span class="sr-page">' + esc(e.t) + '</span>' : '') +
             '<span class="sr-text">' + snippet(e.x, words) + '</span></a></li>';
    }).join('') : '<li class="sr-none">No matches</li>';
    list.hidden = false;
  }
  input.addEventListener('input', render);
  input.addEventListener('keydown', function (ev) {
    if (ev.key === 'Enter') { var a = list.querySelector('a'); if (a) window.location.href = a.getAttribute('href'); }
    if (ev.key === 'Escape') { input.value = ''; render(); }
  });
})();
