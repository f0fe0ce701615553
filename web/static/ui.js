// The console's only script: the bulk replay progress bar, and refreshing an event's
// page while it is still in the inbox. Pages work without it.
(function () {
  "use strict";

  var box = document.getElementById("bulk");
  if (box && box.dataset.progressUrl && box.dataset.finished !== "true") {
    var bar = document.getElementById("bulk-progress");
    var fields = ["status", "percent", "done", "total", "moved", "skipped"];
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
          box.querySelector('[data-field="status"]').className = "state state-" + p.status;
          if (p.finished) {
            clearInterval(timer);
            box.dataset.finished = "true";
            var cancel = document.getElementById("cancel-form");
            if (cancel) {
              cancel.remove();
            }
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
