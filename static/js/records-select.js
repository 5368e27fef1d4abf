// Records table: "select all on this page" and the selection bar that names the verb and the count
// ("Expire 2 records"). Progressive enhancement: without JavaScript the checkboxes, the "Select all on this
// page" link and the bar's buttons still post the form (the bar is then always shown and says "selected
// records"); with it, the bar appears only while records are ticked, and counts them.
// Delegated listeners on the document, so rows that htmx swaps in are covered without re-binding.
(function () {
  "use strict";

  function boxes() {
    return Array.prototype.slice.call(document.querySelectorAll('#bulk-form input[name="ids"]'));
  }

  function records(n) {
    return n + (n === 1 ? " record" : " records");
  }

  function refresh() {
    var all = document.getElementById("select-all");
    var bar = document.getElementById("bulk-bar");
    var count = document.querySelector("#bulk-bar [data-selected-count]");
    if (!bar || !count) return;
    var list = boxes();
    var chosen = list.filter(function (b) { return b.checked; }).length;
    count.textContent = chosen ? chosen + " selected" : "With the selected records";
    bar.classList.add("js-bar");
    bar.classList.toggle("has-selection", chosen > 0);
    bar.hidden = chosen === 0;
    Array.prototype.forEach.call(bar.querySelectorAll("button[data-verb]"), function (button) {
      button.textContent = button.getAttribute("data-verb") + " " + (chosen ? records(chosen) : "selected records");
    });
    if (all) {
      all.hidden = false;
      all.checked = list.length > 0 && chosen === list.length;
      all.indeterminate = chosen > 0 && chosen < list.length;
    }
    var noJs = bar.querySelector(".no-js-select");
    if (noJs) noJs.hidden = true;
  }

  document.addEventListener("change", function (event) {
    var target = event.target;
    if (!(target instanceof HTMLInputElement)) return;
    if (target.id === "select-all") {
      boxes().forEach(function (b) { b.checked = target.checked; });
      refresh();
    } else if (target.name === "ids") {
      refresh();
    }
  });
  document.addEventListener("DOMContentLoaded", refresh);
  document.addEventListener("htmx:afterSettle", refresh);
})();
