/* batchscope report page: draws the charts from the embedded JSON, sorts and filters the op
 * table. It never builds markup from data (textContent and attributes only), and it records
 * for tests what happened: data-charts-expected / data-charts-drawn on <body>, plus
 * data-csp-violations and data-resource-requests (both must stay 0: the page is offline)
 * and data-page-overflow-x (px the page scrolls sideways: must stay 0). */
(function () {
  "use strict";

  var violations = 0;
  document.addEventListener("securitypolicyviolation", function () {
    violations += 1;
    document.documentElement.setAttribute("data-csp-violations", String(violations));
  });

  function readJson(id) {
    var el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }

  function plotConfig() {
    return {
      displaylogo: false,
      responsive: true,
      modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d"],
      toImageButtonOptions: { format: "png", scale: 2 }
    };
  }

  function drawOne(id, fig) {
    var el = document.getElementById("fig-" + id);
    if (!el) { return Promise.reject(new Error("no element for chart " + id)); }
    return Plotly.newPlot(el, fig.data, fig.layout, plotConfig()).then(function () {
      var traces = el.querySelectorAll(".scatterlayer .trace, .barlayer .trace").length;
      if (!traces) { throw new Error("chart " + id + " drew no traces"); }
      el.setAttribute("data-drawn", String(traces));
      return id;
    });
  }

  function finish(results) {
    var body = document.body;
    var drawn = results.filter(function (r) { return r.status === "fulfilled"; }).length;
    var errors = results.filter(function (r) { return r.status === "rejected"; })
      .map(function (r) { return String(r.reason); });
    body.setAttribute("data-charts-drawn", String(drawn));
    if (errors.length) { body.setAttribute("data-chart-errors", errors.join(" | ")); }
    var requests = window.performance && performance.getEntriesByType
      ? performance.getEntriesByType("resource").length : 0;
    body.setAttribute("data-resource-requests", String(requests));
    body.setAttribute("data-csp-violations", String(violations));
    // How far the page scrolls sideways once drawn (must stay 0: wide tables scroll in
    // their own box, long tokens wrap).
    var root = document.documentElement;
    var overflow = Math.max(root.scrollWidth - root.clientWidth, 0);
    body.setAttribute("data-page-overflow-x", String(overflow));
  }

  function drawCharts() {
    var figures = readJson("batchscope-figures") || {};
    var ids = Object.keys(figures);
    document.body.setAttribute("data-charts-expected", String(ids.length));
    if (typeof Plotly === "undefined") {
      finish([{ status: "rejected", reason: "plotly.js did not load" }]);
      return;
    }
    var jobs = ids.map(function (id) {
      try { return drawOne(id, figures[id]); } catch (e) { return Promise.reject(e); }
    });
    Promise.allSettled(jobs).then(finish);
  }

  function cellValue(row, index, type) {
    var cell = row.cells[index];
    if (!cell) { return type === "num" ? -Infinity : ""; }
    if (type === "num") {
      var v = parseFloat(cell.getAttribute("data-v"));
      return isNaN(v) ? -Infinity : v;
    }
    return cell.textContent.trim().toLowerCase();
  }

  function setupTable() {
    var table = document.getElementById("op-table");
    if (!table) { return; }
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var batch = document.getElementById("op-batch");
    var filter = document.getElementById("op-filter");
    var bounds = Array.prototype.slice.call(document.querySelectorAll(".op-bound"));
    var count = document.getElementById("op-count");

    function apply() {
      var wanted = batch ? batch.value : "all";
      var text = filter ? filter.value.trim().toLowerCase() : "";
      var on = {};
      bounds.forEach(function (b) { on[b.value] = b.checked; });
      var shown = 0;
      rows.forEach(function (row) {
        var ok = (wanted === "all" || row.getAttribute("data-batch") === wanted) &&
          on[row.getAttribute("data-bound")] !== false &&
          (!text || row.textContent.toLowerCase().indexOf(text) !== -1);
        row.hidden = !ok;
        if (ok) { shown += 1; }
      });
      if (count) { count.textContent = shown + " of " + rows.length + " rows"; }
    }

    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, index) {
      th.addEventListener("click", function () {
        var type = th.getAttribute("data-type") || "text";
        var asc = !th.classList.contains("asc");
        Array.prototype.forEach.call(table.tHead.rows[0].cells, function (other) {
          other.classList.remove("asc", "desc");
        });
        th.classList.add(asc ? "asc" : "desc");
        rows.sort(function (a, b) {
          var x = cellValue(a, index, type), y = cellValue(b, index, type);
          var c = x < y ? -1 : x > y ? 1 : 0;
          return asc ? c : -c;
        });
        rows.forEach(function (row) { body.appendChild(row); });
      });
    });
    if (batch) { batch.addEventListener("change", apply); }
    if (filter) { filter.addEventListener("input", apply); }
    bounds.forEach(function (b) { b.addEventListener("change", apply); });
    apply();
  }

  document.addEventListener("DOMContentLoaded", function () {
    setupTable();
    try { drawCharts(); } catch (e) {
      finish([{ status: "rejected", reason: String(e) }]);
    }
  });
})();
