// The policy form (policy_edit.html): show the settings of the chosen connector only, as soon as it is
// chosen. Without JavaScript the server does the same ("Show its settings" re-renders the form).
(function () {
  "use strict";
  function sync(form) {
    var select = form.querySelector("select[name=connector]");
    if (!select) { return; }
    var chosen = select.value;
    form.querySelectorAll(".connector-setting").forEach(function (box) {
      var users = (box.getAttribute("data-connectors") || "").split(" ");
      var shown = chosen !== "" && (users.indexOf("any") !== -1 || users.indexOf(chosen) !== -1);
      box.hidden = !shown;
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    var form = document.getElementById("policy-form");
    if (!form) { return; }
    form.querySelectorAll("[data-v-nojs]").forEach(function (el) { el.hidden = true; });
    var select = form.querySelector("select[name=connector]");
    if (select) { select.addEventListener("change", function () { sync(form); }); }
    sync(form);
  });
})();
