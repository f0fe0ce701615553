// The console's only script: the bulk replay progress bar, and refreshing an event's
// page while it is still in the inbox. Pages work without it.
(function () {
  "use strict";

  var box = document.getElementById("bulk");
  if (box && box.dataset.progressUrl && box.dataset.finished !== "true") {
    var bar = document.getElementById("bulk-progress");
    var fields = ["label", "percent", "done", "total", "moved", "skipped", "succeeded", "dead_again", "pending"];
    var eta = function (s) {
      if (s === null || s === undefined) {
        return "";
      }
      s = Math.max(0, Math.round(s));
      return "· about " + (s >= 60 ? Math.floor(s / 60) + " m " + (s % 60) + " s" : s + " s") + " left";
    };
    var timer = setInterval(function () {
      fetch(box.dataset.progressUrl, {
        credentials: "same-origin",
        headers: { Accept: "application/json" },
        cache: "no-store"
      })
        .then(function (r) {
          if (r.status === 401 || r.status === 404) {
            clearInterval(timer);
          }
          if (!r.ok) {
            throw new Error("HTTP " + r.status);
          }
          return r.json();
        })
        .then(function (p) {
          bar.value = p.percent;
          bar.textContent = p.percent + "%";
          fields.forEach(function (k) {
            box.querySelectorAll('[data-field="' + k + '"]').forEach(function (el) {
              el.textContent = String(p[k]);
            });
          });
          var badge = box.querySelector('[data-field="label"]');
          badge.className = "state state-" + p.css;
          badge.dataset.verdict = p.verdict;
          box.querySelector('[data-field="eta"]').textContent = eta(p.eta_seconds);
          var alert = box.querySelector('[data-alert="dead_again"]');
          if (alert) {
            alert.classList.toggle("alert", p.dead_again > 0);
          }
          if (p.finished) {
            var cancel = document.getElementById("cancel-form");
            if (cancel) {
              cancel.remove();
            }
          }
          if (p.settled) {
            clearInterval(timer);
            box.dataset.finished = "true";
          }
        })
        .catch(function () {
          // A missed poll is retried on the next tick.
        });
    }, 1000);
  }

  var main = document.querySelector("main[data-autorefresh]");
  if (main) {
    setTimeout(function () {
      window.location.reload();
    }, 1000 * Number(main.dataset.autorefresh));
  }
})();
