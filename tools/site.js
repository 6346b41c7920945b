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
