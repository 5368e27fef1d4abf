// Progressive enhancement for the layout (base.html): a table wider than its box scrolls inside it, so it
// is made focusable, and a keyboard user can scroll it too. Without JavaScript the table still scrolls.
(function () {
  "use strict";
  function markScrollable(root) {
    (root || document).querySelectorAll("table, .table-wrap").forEach(function (box) {
      var scrolls = box.scrollWidth > box.clientWidth + 1;
      var style = window.getComputedStyle(box);
      var canScroll = style.overflowX === "auto" || style.overflowX === "scroll";
      if (scrolls && canScroll) {
        if (!box.hasAttribute("tabindex")) {
          box.setAttribute("tabindex", "0");
          box.setAttribute("data-scroll-focus", "");
        }
      } else if (box.hasAttribute("data-scroll-focus")) {
        box.removeAttribute("tabindex");
        box.removeAttribute("data-scroll-focus");
      }
    });
  }
  document.addEventListener("DOMContentLoaded", function () { markScrollable(document); });
  window.addEventListener("resize", function () { markScrollable(document); });
  document.addEventListener("htmx:afterSettle", function () { markScrollable(document); });
})();
