// The fact page (templates/dashboard/fact.html), progressive enhancement only: every part works without it.
// - Keyboard navigation between facts: j or ] follows the "Next" link (rel=next), k or [ the "Previous" link
//   (rel=prev). Never while typing in a field, and never with Ctrl, Alt or Meta held (browser shortcuts).
// - A link to a part of the page inside a closed section (#mem-… in the history, an audit row) opens the
//   section first, so the target is shown rather than hidden in a collapsed <details>.
(function () {
  "use strict";
  var KEYS = { j: "next", "]": "next", k: "prev", "[": "prev" };

  function typing(target) {
    if (!target || !target.closest) return false;
    if (target.isContentEditable) return true;
    return target.closest("input, textarea, select, [contenteditable]") !== null;
  }

  document.addEventListener("keydown", function (event) {
    if (event.defaultPrevented || event.ctrlKey || event.altKey || event.metaKey || event.isComposing) return;
    var rel = KEYS[event.key];
    if (!rel || typing(event.target)) return;
    var link = document.querySelector('.fact-nav a[rel="' + rel + '"]');
    if (!link) return;
    event.preventDefault();
    window.location.assign(link.href);
  });

  function openTarget() {
    var id = window.location.hash.slice(1);
    if (!id) return;
    var target = document.getElementById(decodeURIComponent(id));
    var section = target ? target.closest("details") : null;
    while (section) {
      section.open = true;
      section = section.parentElement ? section.parentElement.closest("details") : null;
    }
    if (target) target.scrollIntoView();
  }
  document.addEventListener("DOMContentLoaded", openTarget);
  window.addEventListener("hashchange", openTarget);
})();
