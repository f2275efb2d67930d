(function () {
  'use strict';
  // The protocol timeline. Data: the JSON block #timeline-data (see
  // clink-html's timeline.rs). Only what is in view is drawn; text from the
  // trace reaches the page only through textContent, setAttribute and the
  // canvas, never as markup.
  var dataEl = document.getElementById('timeline-data');
  var wrap = document.getElementById('tl-wrap');
  var canvas = document.getElementById('tl-canvas');
  if (!dataEl || !wrap || !canvas || !canvas.getContext) { return; }
  var D = JSON.parse(dataEl.textContent);
  var lanes = D.lanes, names = D.names, details = D.details;
  var S = 5, n = Math.floor(D.ev.length / S);
  var T = new Float64Array(n), L = new Int32Array(n), N = new Int32Array(n), X = new Int32Array(n);
  var C = new Float64Array(n);
  var acc = 0, i;
  for (i = 0; i < n; i++) {
    acc += D.ev[S * i];
    T[i] = acc; L[i] = D.ev[S * i + 1]; N[i] = D.ev[S * i + 2]; X[i] = D.ev[S * i + 3]; C[i] = D.ev[S * i + 4];
  }
  var END = n ? T[n - 1] : 0;
  var bands = D.bands.map(function (b) {
    var last = Math.max(b[1], b[2], b[4], b[5], b[6], b[7]);
    return { ckpt: b[0], start: b[1], decided: b[2], outcome: b[3], marker: b[4], broadcast: b[5], committed: b[6],
             end: b[2] >= 0 ? b[2] : b[7], last: last };
  });
  var marks = D.marks;
  // How many rows the checkpoint strip needs: the most checkpoints open at once.
  function packedRows() {
    var ends = [], most = 0;
    bands.forEach(function (b) {
      ends = ends.filter(function (e) { return e > b.start; });
      ends.push(b.last);
      most = Math.max(most, ends.length);
    });
    return most;
  }
  var div = D.div && D.div.i < n ? D.div : null;

  var LABEL_W = 180, MARK_H = 18, AXIS_H = 20, LANE_H = 20, CK_ROW_H = 14, CK_ROWS = 4, PAD_R = 10;
  var TOP = MARK_H + AXIS_H;
  var CK_USED = Math.min(Math.max(D.bands.length ? 1 : 0, packedRows()), CK_ROWS);
  var CK_H = CK_USED * CK_ROW_H + 4;
  var H = TOP + lanes.length * LANE_H + CK_H + 2;
  var COLORS = {
    Trigger: '#0969da', DeliverBarrier: '#6e7781', SinkPrepare: '#8250df', SubtaskAck: '#57606a',
    CoordComplete: '#1a7f37', WriteCompleted: '#0a3069', Broadcast: '#bf8700', DeliverCommit: '#9a6700',
    SinkCommit: '#2da44e', SinkOpens: '#218bff', CoordRecovers: '#cf222e', Redeploy: '#fb8500',
    RestartOnError: '#d1242f', Placement: '#afb8c1'
  };
  var BAND = { completed: 'rgba(26,127,55,0.07)', failed: 'rgba(207,34,46,0.10)', discarded: 'rgba(154,103,0,0.10)' };
  var BAND_SOLID = { completed: 'rgba(26,127,55,0.45)', failed: 'rgba(207,34,46,0.55)', discarded: 'rgba(154,103,0,0.5)' };
  function colorOf(name) {
    if (COLORS[name]) { return COLORS[name]; }
    var h = 0;
    for (var k = 0; k < name.length; k++) { h = (h * 31 + name.charCodeAt(k)) % 360; }
    return 'hsl(' + h + ',55%,45%)';
  }

  var ctx = canvas.getContext('2d');
  var tip = document.getElementById('tl-tip');
  var status = document.getElementById('tl-status');
  var selected = document.getElementById('tl-selected');
  var view = { a: 0, b: Math.max(END, 1) };
  var W = 0, hits = [], stripHits = [];
  // Every label drawn this frame, as [x0, x1, y]: a label goes only where it
  // overlaps none on its line and stays inside the plot, and the frame
  // reports any overlap it finds afterwards (data-label-overlaps).
  var placed = [];
  function fits(x, w, y) {
    if (x < LABEL_W || x + w > LABEL_W + plotW()) { return false; }
    for (var q = 0; q < placed.length; q++) {
      var p = placed[q];
      if (p[2] === y && x < p[1] && p[0] < x + w) { return false; }
    }
    return true;
  }
  function place(x, w, y) { placed.push([x, x + w, y]); }
  // The diverging event's label: to its right, or to its left where the
  // right edge would cut it (and the left has room).
  function divLabelX(dx, w) {
    if (dx + 12 + w + 3 <= LABEL_W + plotW() || dx - 12 - w - 3 < LABEL_W) { return dx + 12; }
    return dx - 12 - w;
  }
  function overlaps() {
    var n = 0;
    for (var a = 0; a < placed.length; a++) {
      if (placed[a][0] < LABEL_W || placed[a][1] > LABEL_W + plotW()) { n++; }
      for (var c = a + 1; c < placed.length; c++) {
        var p = placed[a], q = placed[c];
        if (p[2] === q[2] && p[0] < q[1] && q[0] < p[1]) { n++; }
      }
    }
    return n;
  }

  function plotW() { return Math.max(W - LABEL_W - PAD_R, 10); }
  function xOf(t) { return LABEL_W + (t - view.a) / (view.b - view.a) * plotW(); }
  function tOf(x) { return view.a + (x - LABEL_W) / plotW() * (view.b - view.a); }
  function lowerBound(t) {
    var lo = 0, hi = n;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (T[mid] < t) { lo = mid + 1; } else { hi = mid; } }
    return lo;
  }
  function fmt(us) {
    var a = Math.abs(us);
    if (a >= 1e6) { return (us / 1e6).toFixed(a >= 1e7 ? 1 : 3) + ' s'; }
    if (a >= 1e3) { return (us / 1e3).toFixed(a >= 1e5 ? 1 : 3) + ' ms'; }
    return Math.round(us) + ' \u00b5s';
  }
  function niceStep(span, px) {
    var raw = span / Math.max(px / 110, 1);
    var p = Math.pow(10, Math.floor(Math.log10(Math.max(raw, 1e-9))));
    var m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
  }
  function setView(a, b) {
    var minSpan = 20;
    if (b - a < minSpan) { var c = (a + b) / 2; a = c - minSpan / 2; b = c + minSpan / 2; }
    var full = Math.max(END, 1), pad = full * 0.05;
    if (b - a > full + 2 * pad) { a = -pad; b = full + pad; }
    if (a < -pad) { b += -pad - a; a = -pad; }
    if (b > full + pad) { a -= b - full - pad; b = full + pad; }
    view.a = a; view.b = b;
    schedule();
  }
  function padded(a, b, f) { var s = Math.max(b - a, 20); return [a - s * f, b + s * f]; }

  var pending = false;
  function schedule() {
    if (pending) { return; }
    pending = true;
    window.requestAnimationFrame(function () { pending = false; draw(); });
  }

  function draw() {
    var started = performance.now();
    placed = [];
    var dpr = window.devicePixelRatio || 1;
    W = wrap.clientWidth || 800;
    canvas.width = Math.round(W * dpr); canvas.height = Math.round(H * dpr);
    canvas.style.height = H + 'px';
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, W, H);
    ctx.font = '11px system-ui, sans-serif';
    ctx.textBaseline = 'middle';
    var laneBottom = TOP + lanes.length * LANE_H;
    // Lanes.
    for (var l = 0; l < lanes.length; l++) {
      var y = TOP + l * LANE_H;
      ctx.fillStyle = l % 2 ? '#ffffff' : '#f6f8fa';
      ctx.fillRect(0, y, W, LANE_H);
    }
    ctx.save();
    ctx.beginPath(); ctx.rect(LABEL_W, 0, plotW(), H); ctx.clip();
    // Checkpoint bands: a light fill across the lanes with its edges (the
    // trigger dashed, the decision solid), and a bar in the strip below,
    // packed into rows where checkpoints overlap.
    stripHits = [];
    var rowEnd = [];
    for (var b = 0; b < bands.length; b++) {
      var band = bands[b];
      if (band.last < view.a || band.start > view.b) { continue; }
      var x0 = xOf(band.start), x1 = Math.max(xOf(band.end), x0 + 1), xl = Math.max(xOf(band.last), x1);
      var solid = BAND_SOLID[band.outcome] || 'rgba(110,119,129,0.4)';
      ctx.fillStyle = BAND[band.outcome] || 'rgba(110,119,129,0.06)';
      ctx.fillRect(x0, TOP, x1 - x0, laneBottom - TOP);
      ctx.strokeStyle = solid; ctx.lineWidth = 1;
      ctx.setLineDash([2, 3]);
      ctx.beginPath(); ctx.moveTo(Math.round(x0) + 0.5, TOP); ctx.lineTo(Math.round(x0) + 0.5, laneBottom); ctx.stroke();
      ctx.setLineDash([]);
      if (band.decided >= 0) {
        ctx.beginPath(); ctx.moveTo(Math.round(x1) + 0.5, TOP); ctx.lineTo(Math.round(x1) + 0.5, laneBottom); ctx.stroke();
      }
      var row = 0;
      while (row < rowEnd.length && rowEnd[row] > x0) { row++; }
      if (row >= CK_USED) { row = CK_USED - 1; }
      rowEnd[row] = xl + 2;
      var ry = laneBottom + 2 + row * CK_ROW_H;
      ctx.fillStyle = solid;
      ctx.fillRect(x0, ry, x1 - x0, CK_ROW_H - 2);
      if (band.broadcast >= 0) {
        var cEnd = band.committed >= band.broadcast ? band.committed : band.broadcast;
        var bx = xOf(band.broadcast), cx = Math.max(xOf(cEnd), bx + 2);
        ctx.fillStyle = 'rgba(191,135,0,0.7)';
        ctx.fillRect(bx, ry + 2, cx - bx, CK_ROW_H - 6);
      }
      if (band.marker >= 0) {
        ctx.fillStyle = '#0a3069';
        ctx.fillRect(Math.round(xOf(band.marker)), ry, 2, CK_ROW_H - 2);
      }
      // The label sits in the band's visible part, clear of its neighbours'.
      var label = String(band.ckpt), lw = ctx.measureText(label).width, lx = Math.max(x0, LABEL_W) + 3;
      if (x1 - lx > lw + 3 && fits(lx, lw, ry)) {
        ctx.fillStyle = '#1f2328';
        ctx.fillText(label, lx, ry + CK_ROW_H / 2 - 1);
        place(lx, lw, ry);
      }
      stripHits.push([x0, Math.max(xl, x0 + 4), b, ry, ry + CK_ROW_H]);
    }
    // Recoveries, redeploys, restarts.
    ctx.setLineDash([4, 3]);
    var markEnd = -1e9;
    for (var m = 0; m < marks.length; m++) {
      var t = marks[m][0];
      if (t < view.a || t > view.b) { continue; }
      var kx = Math.round(xOf(t)) + 0.5;
      ctx.strokeStyle = colorOf(marks[m][1]); ctx.lineWidth = 1.5;
      ctx.beginPath(); ctx.moveTo(kx, 2); ctx.lineTo(kx, laneBottom); ctx.stroke();
      var mw = ctx.measureText(marks[m][1]).width;
      if (kx > markEnd && fits(kx + 3, mw, MARK_H / 2)) {
        ctx.fillStyle = colorOf(marks[m][1]);
        ctx.fillText(marks[m][1], kx + 3, MARK_H / 2);
        place(kx + 3, mw, MARK_H / 2);
        markEnd = kx + mw + 8;
      }
    }
    ctx.setLineDash([]);
    // Events in view: one glyph per lane and pixel column.
    var i0 = lowerBound(view.a), i1 = lowerBound(view.b + 1e-6);
    var lastX = new Float64Array(lanes.length).fill(-1e9);
    var labelEnd = new Float64Array(lanes.length).fill(-1e9);
    var pxPerUs = plotW() / (view.b - view.a);
    hits = lanes.map(function () { return []; });
    // Labels next to the diverging event would hide its own, which is
    // placed first so that no other is drawn over it.
    var divX = div ? xOf(T[div.i]) : 0;
    if (div && T[div.i] >= view.a && T[div.i] <= view.b) {
      var divW = ctx.measureText(names[N[div.i]]).width;
      place(divLabelX(divX, divW) - 3, divW + 6, TOP + L[div.i] * LANE_H + LANE_H / 2);
    }
    var drawn = 0;
    for (i = i0; i < i1; i++) {
      var ex = Math.round(xOf(T[i]));
      var lane = L[i];
      if (ex === lastX[lane]) { continue; }
      lastX[lane] = ex;
      var ey = TOP + lane * LANE_H;
      var name = names[N[i]];
      ctx.fillStyle = colorOf(name);
      ctx.fillRect(ex - 1, ey + 4, 3, LANE_H - 8);
      hits[lane].push(ex, i);
      drawn++;
      var nearDiv = div && lane === L[div.i] && i !== div.i && Math.abs(ex - divX) < 140;
      if (pxPerUs > 0.02 && ex > labelEnd[lane] && !nearDiv) {
        var w = ctx.measureText(name).width;
        if (fits(ex + 4, w, ey + LANE_H / 2)) {
          ctx.fillStyle = '#1f2328';
          ctx.fillText(name, ex + 4, ey + LANE_H / 2);
          place(ex + 4, w, ey + LANE_H / 2);
          labelEnd[lane] = ex + w + 8;
        }
      }
    }
    // The diverging event.
    var marker = document.getElementById('diverging-event');
    if (div) {
      var dx = xOf(T[div.i]), inView = T[div.i] >= view.a && T[div.i] <= view.b;
      if (inView) {
        // Always drawn, even where a neighbour shares its pixel.
        var dy = TOP + L[div.i] * LANE_H, dname = names[N[div.i]];
        ctx.strokeStyle = '#cf222e'; ctx.lineWidth = 2;
        ctx.beginPath(); ctx.moveTo(dx, TOP); ctx.lineTo(dx, laneBottom); ctx.stroke();
        ctx.beginPath(); ctx.arc(dx, dy + LANE_H / 2, 7, 0, 2 * Math.PI); ctx.stroke();
        var dw = ctx.measureText(dname).width, tx = divLabelX(dx, dw);
        ctx.fillStyle = '#ffebe9'; ctx.fillRect(tx - 3, dy + 3, dw + 6, LANE_H - 6);
        ctx.fillStyle = '#cf222e'; ctx.fillText(dname, tx, dy + LANE_H / 2);
      }
      if (!marker) {
        marker = document.createElement('div');
        marker.id = 'diverging-event';
        marker.className = 'diverging-marker';
        var tag = document.createElement('span');
        tag.textContent = 'event ' + (div.i + 1) + ': ' + names[N[div.i]] + ' (' + lanes[L[div.i]] + ')';
        marker.appendChild(tag);
        marker.setAttribute('title', div.reason);
        marker.setAttribute('data-event-index', String(div.i + 1));
        wrap.appendChild(marker);
      }
      marker.setAttribute('data-in-view', inView ? 'true' : 'false');
      marker.style.left = Math.round(dx) + 'px';
      marker.style.top = '0px';
      marker.style.height = laneBottom + 'px';
      // Its tag reads to the right of the line, or to the left where the
      // page's edge would cut it; the tag says whether any of it is cut.
      var tagEl = marker.firstChild, tw = tagEl.offsetWidth;
      var left = dx + 4 + tw > W && dx - 4 - tw >= 0;
      tagEl.style.left = left ? -(tw + 4) + 'px' : '4px';
      var cut = inView && (left ? dx - 4 - tw < 0 : dx + 4 + tw > W);
      marker.setAttribute('data-tag-cut', cut ? 'true' : 'false');
    }
    ctx.restore();
    // Axis.
    ctx.fillStyle = '#ffffff'; ctx.fillRect(LABEL_W, MARK_H, plotW(), AXIS_H);
    ctx.strokeStyle = '#d0d7de'; ctx.lineWidth = 1;
    ctx.beginPath(); ctx.moveTo(LABEL_W, TOP - 0.5); ctx.lineTo(W, TOP - 0.5); ctx.stroke();
    var step = niceStep(view.b - view.a, plotW());
    ctx.fillStyle = '#57606a';
    for (var s = Math.ceil(view.a / step) * step; s <= view.b; s += step) {
      var sx = Math.round(xOf(s)) + 0.5;
      ctx.beginPath(); ctx.moveTo(sx, TOP - 5); ctx.lineTo(sx, TOP); ctx.stroke();
      ctx.fillText('+' + fmt(s), sx + 2, MARK_H + AXIS_H / 2 - 2);
    }
    // Lane labels, over everything at the left.
    ctx.fillStyle = '#ffffff'; ctx.fillRect(0, 0, LABEL_W, H);
    ctx.fillStyle = '#1f2328';
    for (var k = 0; k < lanes.length; k++) {
      var text = lanes[k];
      while (text.length > 3 && ctx.measureText(text).width > LABEL_W - 12) { text = text.slice(0, -2); }
      ctx.fillText(text === lanes[k] ? text : text + '\u2026', 6, TOP + k * LANE_H + LANE_H / 2);
    }
    ctx.fillStyle = '#57606a';
    ctx.fillText('checkpoints', 6, laneBottom + CK_H / 2);
    ctx.fillText('time since the first event', 6, MARK_H + AXIS_H / 2 - 2);
    ctx.strokeStyle = '#d0d7de';
    ctx.beginPath(); ctx.moveTo(LABEL_W - 0.5, 0); ctx.lineTo(LABEL_W - 0.5, H); ctx.stroke();
    var ms = performance.now() - started;
    if (status) {
      status.textContent = 'drawn: ' + drawn + ' of ' + n + ' events, +' + fmt(Math.max(view.a, 0)) + ' to +' +
        fmt(Math.min(view.b, END)) + ' (' + ms.toFixed(1) + ' ms)';
    }
    wrap.setAttribute('data-drawn', String(drawn));
    wrap.setAttribute('data-label-overlaps', String(overlaps()));
    wrap.setAttribute('data-draw-ms', ms.toFixed(1));
    document.documentElement.setAttribute('data-timeline', 'drawn');
  }

  function eventAt(x, y) {
    var lane = Math.floor((y - TOP) / LANE_H);
    if (lane < 0 || lane >= lanes.length || !hits[lane]) { return -1; }
    var h = hits[lane], best = -1, bestD = 6;
    for (var j = 0; j < h.length; j += 2) {
      var d = Math.abs(h[j] - x);
      if (d < bestD) { bestD = d; best = h[j + 1]; }
    }
    return best;
  }
  function describe(k) {
    var fields = (C[k] >= 0 ? 'ckpt=' + C[k] + ' ' : '') + details[X[k]];
    return '#' + (k + 1) + '  ' + names[N[k]] + '  on ' + lanes[L[k]] + '  at +' + fmt(T[k]) + '\n' + fields;
  }
  function pos(e) { var r = canvas.getBoundingClientRect(); return [e.clientX - r.left, e.clientY - r.top]; }

  var drag = null;
  canvas.addEventListener('mousedown', function (e) {
    var p = pos(e);
    drag = { x: p[0], a: view.a, b: view.b, moved: false };
    canvas.style.cursor = 'grabbing';
  });
  window.addEventListener('mouseup', function (e) {
    if (!drag) { return; }
    var wasClick = !drag.moved;
    drag = null;
    canvas.style.cursor = 'grab';
    if (!wasClick) { return; }
    var p = pos(e);
    var laneBottom = TOP + lanes.length * LANE_H;
    if (p[1] > laneBottom) {
      for (var j = stripHits.length - 1; j >= 0; j--) {
        var sh = stripHits[j];
        if (p[0] >= sh[0] && p[0] <= sh[1] && p[1] >= sh[3] && p[1] <= sh[4]) { zoomToBand(sh[2]); return; }
      }
      return;
    }
    var k = eventAt(p[0], p[1]);
    if (k >= 0 && selected) { selected.hidden = false; selected.textContent = describe(k); }
  });
  window.addEventListener('mousemove', function (e) {
    var p = pos(e);
    if (drag) {
      var dx = p[0] - drag.x;
      if (Math.abs(dx) > 2) { drag.moved = true; }
      var dt = dx / plotW() * (drag.b - drag.a);
      setView(drag.a - dt, drag.b - dt);
      return;
    }
    if (e.target !== canvas || !tip) { if (tip) { tip.hidden = true; } return; }
    var k = eventAt(p[0], p[1]);
    if (k < 0) { tip.hidden = true; return; }
    tip.textContent = describe(k);
    tip.hidden = false;
    tip.style.left = Math.min(p[0] + 12, Math.max(W - 420, 0)) + 'px';
    tip.style.top = (p[1] + 14) + 'px';
  });
  canvas.addEventListener('mouseleave', function () { if (tip) { tip.hidden = true; } });
  canvas.addEventListener('wheel', function (e) {
    e.preventDefault();
    var p = pos(e);
    var at = tOf(Math.max(p[0], LABEL_W));
    var f = Math.pow(1.2, e.deltaY / 100);
    setView(at - (at - view.a) * f, at + (view.b - at) * f);
  }, { passive: false });
  canvas.addEventListener('dblclick', function () { setView(-Infinity, Infinity); });

  function zoom(f) { var c = (view.a + view.b) / 2, h = (view.b - view.a) / 2 * f; setView(c - h, c + h); }
  function zoomToBand(b) {
    var band = bands[b];
    if (!band) { return; }
    var r = padded(band.start, band.last, 0.15);
    setView(r[0], r[1]);
  }
  function zoomToDivergence() {
    if (!div) { return; }
    var from = Math.max(div.i - 20, 0), to = Math.min(div.i + 6, n - 1);
    var r = padded(T[from], T[to], 0.08);
    setView(r[0], r[1]);
  }
  function on(id, ev, f) { var el = document.getElementById(id); if (el) { el.addEventListener(ev, f); } }
  on('tl-all', 'click', function () { setView(-Infinity, Infinity); });
  on('tl-div', 'click', zoomToDivergence);
  on('tl-in', 'click', function () { zoom(1 / 1.6); });
  on('tl-out', 'click', function () { zoom(1.6); });
  on('tl-ckpt', 'change', function (e) { if (e.target.value !== '') { zoomToBand(Number(e.target.value)); } });
  window.addEventListener('resize', schedule);

  // First view: around the diverging event, else the whole trace. Drawn now,
  // so the page is complete when it has loaded.
  if (div) { zoomToDivergence(); } else { setView(-Infinity, Infinity); }
  draw();
  // Milliseconds from navigation start to a drawn timeline (parse included).
  wrap.setAttribute('data-ready-ms', performance.now().toFixed(0));
})();
