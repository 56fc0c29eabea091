// Live counts on a runs page: poll the tenant's counts every 2 s.
(function () {
  var nav = document.getElementById("counts");
  if (!nav) return;
  var url = "/tenants/" + encodeURIComponent(nav.dataset.tenant) + "/counts";
  function refresh() {
    fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (c) {
        if (!c) return;
        nav.querySelectorAll("[data-count]").forEach(function (el) {
          var v = c[el.dataset.count];
          if (v !== undefined) el.textContent = v;
        });
        nav.dataset.refreshed = String(Number(nav.dataset.refreshed || 0) + 1);
      })
      .catch(function () {});
  }
  setInterval(refresh, 2000);
})();
