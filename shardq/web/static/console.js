// shardq console: refresh the live regions of a page without reloading it.
// The page's <body data-live="/live/..." data-poll-ms="3000"> names a JSON endpoint whose
// "regions" map an element id to fresh server-rendered (escaped) HTML for that element.
(function () {
  "use strict";
  var body = document.body;
  var url = body.getAttribute("data-live");
  if (!url) { return; }
  var every = parseInt(body.getAttribute("data-poll-ms"), 10) || 3000;
  var dot = document.getElementById("live-status");
  var busy = false;

  function mark(ok) {
    if (!dot) { return; }
    dot.className = "live-dot " + (ok ? "ok" : "stale");
    dot.title = ok ? "live: updated " + new Date().toISOString() : "live refresh failing";
  }

  function poll() {
    if (busy || document.hidden) { return; }
    busy = true;
    fetch(url, { headers: { "Accept": "application/json" }, credentials: "same-origin" })
      .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.json(); })
      .then(function (data) {
        var regions = data.regions || {};
        Object.keys(regions).forEach(function (id) {
          var el = document.getElementById(id);
          if (el) { el.innerHTML = regions[id]; }
        });
        body.setAttribute("data-refreshed", String(Date.now()));
        mark(true);
      })
      .catch(function () { mark(false); })
      .then(function () { busy = false; });
  }

  setInterval(poll, every);
})();
