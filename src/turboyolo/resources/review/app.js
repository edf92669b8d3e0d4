// turboyolo review: the page. Plain JS, no build step. Boxes are [cls, cx, cy, w, h] relative to the
// original image (what the label file holds), whatever size of picture is on screen.
"use strict";

// the token: the server writes it into the page; the address bar loses it (history, screen shares), and
// a reload is let in by the cookie the first answer set. Requests that change anything send it in a header.
const TOKEN = document.querySelector('meta[name="turboyolo-token"]').content;
if (new URLSearchParams(location.search).has("t")) history.replaceState(null, "", location.pathname);
const TOKEN_HEADER = "X-Turboyolo-Token";
const COLORS = ["#4caf50", "#03a9f4", "#e91e63", "#ffeb3b", "#9c27b0", "#ff5722", "#00bcd4", "#cddc39",
  "#795548", "#f44336"];
const $ = (id) => document.getElementById(id);
const S = {
  names: [], items: [], index: 0, order: "review", side: 1600, model: false,
  rows: [], loaded: "[]", base: null, status: "none", error: null, preds: [], disk: null, issues: [],
  hasIssues: false, selIssue: -1, selected: -1, selPred: -1, cls: 0, undo: [], zoom: 1, panX: 0, panY: 0, fit: 1, full: false,
  drag: null, busy: false,
};
// what the bench and the tests read: when each picture was on screen (ms since the page started)
window.review = { S, shown: [], errors: [] };

function url(path, params = {}) {  // pictures: an <img> sends no header, so its URL has the token
  const q = new URLSearchParams({ ...params, t: TOKEN });
  return `${path}?${q}`;
}
function keyPath(key) { return key.split("/").map(encodeURIComponent).join("/"); }
async function getJSON(path, params = {}) {
  const query = new URLSearchParams(params).toString();
  const response = await fetch(query ? `${path}?${query}` : path, { headers: { [TOKEN_HEADER]: TOKEN } });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}
function say(text, kind = "error") {
  const box = $("message");
  box.hidden = !text; box.className = kind;
  $("message-text").textContent = text || "";
  $("keep-mine").hidden = $("take-disk").hidden = !(S.disk && text);
  if (text && kind === "error") window.review.errors.push(text);
}
const className = (c) => (S.names[c] !== undefined ? S.names[c] : String(c));
const dirty = () => JSON.stringify(S.rows) !== S.loaded;
const current = () => S.items[S.index];

async function start() {
  const session = await getJSON("/api/session");
  Object.assign(S, { names: session.names, side: session.side, model: session.model, order: session.order,
    hasIssues: session.issues });
  const select = $("order");
  for (const order of session.orders) {
    if ((order === "disagree" && !S.model) || (order === "issues" && !S.hasIssues)) continue;
    select.add(new Option(order, order, false, order === S.order));
  }
  select.onchange = () => { select.blur(); loadList(select.value); };
  $("keep-mine").onclick = keepMine;
  $("take-disk").onclick = takeDisk;
  bindMouse();
  document.addEventListener("keydown", onKey);
  window.addEventListener("resize", () => { fitView(); render(); });
  $("photo").addEventListener("load", onPhoto);
  $("photo").addEventListener("error", () => say(`${current().name}: the picture could not be made`));
  await loadList(S.order);
}

async function loadList(order) {
  if (!(await leave())) return;
  const list = await getJSON("/api/list", { order });
  S.order = list.order; S.items = list.items; S.index = 0;
  showProgress(list.progress);
  if (!S.items.length) { say(`no images in the order "${order}"`, "info"); return; }
  await show(0);
}

function showProgress(p) {
  $("progress").textContent = `${p.reviewed} reviewed · ${p.model} model-made · ${p.human} human · ` +
    `${p.none} without labels`;
}

async function show(index) {
  S.index = Math.max(0, Math.min(S.items.length - 1, index));
  const item = current();
  S.requested = performance.now();
  const state = await getJSON(`/api/labels/${keyPath(item.key)}`);
  if (item !== current()) return;  // the person moved on meanwhile
  S.rows = state.rows; S.loaded = JSON.stringify(state.rows); S.base = state.sha1; S.status = state.status;
  S.error = state.error; S.preds = state.predictions || []; S.disk = null; S.issues = state.issues || [];
  S.selected = -1; S.selPred = -1; S.undo = []; S.full = false;
  S.selIssue = openIssues()[0] ?? -1;
  say(state.error);
  $("photo").src = url(`/image/${keyPath(item.key)}`, { side: S.side });
  $("pos").textContent = `${S.index + 1} / ${S.items.length}`;
  $("name").textContent = item.name;
  showStatus();
  render();
  for (const next of S.items.slice(S.index + 1, S.index + 3)) {  // the next pictures, made ahead
    new Image().src = url(`/image/${keyPath(next.key)}`, { side: S.side });
  }
}

function showStatus() {
  const text = { model: "model-made, not reviewed", reviewed: "reviewed", human: "human", none: "no label file" };
  $("status").textContent = text[S.status] + (dirty() ? " · changed" : "");
  $("status").className = S.status;
  $("classes").innerHTML = "";
  S.names.slice(0, 10).forEach((name, k) => {
    const span = document.createElement("span");
    span.textContent = `${k}: ${name}`;
    if (k === S.cls) span.className = "current";
    $("classes").append(span);
  });
}

function onPhoto() {
  const ms = performance.now() - S.requested;
  window.review.shown.push({ key: current().key, at: performance.now(), ms });
  if (!S.full) fitView();
  render();
}

function fitView() {
  const photo = $("photo"), stage = $("stage");
  if (!photo.naturalWidth) return;
  const w = S.full ? S.shownW : photo.naturalWidth, h = S.full ? S.shownH : photo.naturalHeight;
  S.shownW = w; S.shownH = h;
  photo.style.width = `${w}px`; photo.style.height = `${h}px`;
  S.fit = Math.min(stage.clientWidth / w, stage.clientHeight / h);
  if (!S.full) { S.zoom = S.fit; S.panX = (stage.clientWidth - w * S.zoom) / 2; S.panY = (stage.clientHeight - h * S.zoom) / 2; }
  applyView();
}

function applyView() {
  const view = $("view");
  view.style.transform = `translate(${S.panX}px, ${S.panY}px) scale(${S.zoom})`;
  view.style.setProperty("--zoom", S.zoom);
  // zoomed in past a picture that was reduced (its longer side is --side): the full-size one
  const photo = $("photo"), reduced = S.side > 0 && Math.max(photo.naturalWidth, photo.naturalHeight) >= S.side;
  if (!S.full && reduced && S.zoom > 1.25) {
    S.full = true;
    $("photo").src = url(`/image/${keyPath(current().key)}`, { side: 0 });
  }
}

function boxDiv(row, kind, k) {
  const [c, cx, cy, w, h] = row;
  const div = document.createElement("div");
  div.className = `box ${kind}`;
  div.style.cssText = `left:${(cx - w / 2) * 100}%;top:${(cy - h / 2) * 100}%;width:${w * 100}%;` +
    `height:${h * 100}%;--color:${COLORS[c % COLORS.length]}`;
  div.dataset.kind = kind; div.dataset.k = k;
  const tag = document.createElement("span");
  tag.className = "tag";
  tag.textContent = kind === "pred" ? `${className(c)} ${row[5].toFixed(2)} (model)` : className(c);
  div.append(tag);
  return div;
}

function render() {
  const layer = $("boxes");
  layer.replaceChildren();
  S.preds.forEach((row, k) => {
    const div = boxDiv(row, "pred", k);
    if (k === S.selPred) div.classList.add("selected");
    layer.append(div);
  });
  if (S.disk) S.disk.rows.forEach((row, k) => layer.append(boxDiv(row, "disk", k)));
  openIssues().forEach((k) => {
    for (const div of issueDivs(S.issues[k], k)) layer.append(div);
  });
  S.rows.forEach((row, k) => {
    const div = boxDiv(row, "label", k);
    if (k === S.selected) {
      div.classList.add("selected");
      for (const corner of ["nw", "ne", "sw", "se"]) {
        const handle = document.createElement("div");
        handle.className = `handle ${corner}`; handle.dataset.corner = corner;
        div.append(handle);
      }
    }
    layer.append(div);
  });
  showStatus();
}

function change(fn) {
  S.undo.push(JSON.stringify(S.rows));
  fn();
  render();
}

// ---- mouse: draw, select, move, resize, pan, zoom
function relPoint(event) {
  const rect = $("photo").getBoundingClientRect();
  return [(event.clientX - rect.left) / rect.width, (event.clientY - rect.top) / rect.height];
}
const clamp = (v) => Math.max(0, Math.min(1, v));

function bindMouse() {
  const stage = $("stage");
  stage.addEventListener("mousedown", onDown);
  window.addEventListener("mousemove", onMove);
  window.addEventListener("mouseup", onUp);
  stage.addEventListener("wheel", (event) => {
    event.preventDefault();
    zoomAt(event.clientX, event.clientY, event.deltaY < 0 ? 1.2 : 1 / 1.2);
  }, { passive: false });
  stage.addEventListener("contextmenu", (event) => event.preventDefault());
}

function zoomAt(clientX, clientY, factor) {
  const rect = $("stage").getBoundingClientRect();
  const x = clientX - rect.left, y = clientY - rect.top;
  const zoom = Math.max(S.fit * 0.5, Math.min(S.fit * 40, S.zoom * factor));
  S.panX = x - ((x - S.panX) * zoom) / S.zoom; S.panY = y - ((y - S.panY) * zoom) / S.zoom;
  S.zoom = zoom;
  applyView();
}

function onDown(event) {
  if (!S.items.length || S.error) return;
  event.preventDefault();
  const p = relPoint(event);
  if (event.shiftKey || event.button === 1 || event.button === 2) {
    S.drag = { mode: "pan", x: event.clientX, y: event.clientY, panX: S.panX, panY: S.panY };
    return;
  }
  const target = event.target;
  const box = target.closest(".box");
  if (box && box.dataset.kind === "label") {
    const k = Number(box.dataset.k);
    S.selected = k; S.selPred = -1;
    const before = JSON.stringify(S.rows);
    S.drag = { mode: target.dataset.corner ? "resize" : "move", corner: target.dataset.corner, k, p,
      row: [...S.rows[k]], before };
    render();
    return;
  }
  if (box && box.dataset.kind === "pred") {
    S.selPred = Number(box.dataset.k); S.selected = -1;
    render();
    return;
  }
  S.selected = -1; S.selPred = -1;
  S.drag = { mode: "draw", p, before: JSON.stringify(S.rows), k: -1 };
  render();
}

function onMove(event) {
  const d = S.drag;
  if (!d) return;
  if (d.mode === "pan") {
    S.panX = d.panX + event.clientX - d.x; S.panY = d.panY + event.clientY - d.y;
    applyView();
    return;
  }
  const q = relPoint(event).map(clamp);
  if (d.mode === "draw") {
    const [x1, y1, x2, y2] = [Math.min(d.p[0], q[0]), Math.min(d.p[1], q[1]), Math.max(d.p[0], q[0]),
      Math.max(d.p[1], q[1])];
    const row = [S.cls, (x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1];
    if (d.k < 0) { S.rows.push(row); d.k = S.rows.length - 1; } else S.rows[d.k] = row;
    S.selected = d.k;
  } else if (d.mode === "move") {
    const [c, cx, cy, w, h] = d.row;
    const nx = Math.max(w / 2, Math.min(1 - w / 2, cx + q[0] - clamp(d.p[0])));
    const ny = Math.max(h / 2, Math.min(1 - h / 2, cy + q[1] - clamp(d.p[1])));
    S.rows[d.k] = [c, nx, ny, w, h];
  } else if (d.mode === "resize") {
    const [c, cx, cy, w, h] = d.row;
    let [x1, y1, x2, y2] = [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2];
    if (d.corner.includes("w")) x1 = q[0]; else x2 = q[0];
    if (d.corner.includes("n")) y1 = q[1]; else y2 = q[1];
    [x1, x2] = [Math.min(x1, x2), Math.max(x1, x2)]; [y1, y2] = [Math.min(y1, y2), Math.max(y1, y2)];
    S.rows[d.k] = [c, (x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1];
  }
  render();
}

function onUp() {
  const d = S.drag;
  S.drag = null;
  if (!d || d.mode === "pan") return;
  if (d.mode === "draw" && d.k >= 0) {
    const rect = $("photo").getBoundingClientRect();
    const [, , , w, h] = S.rows[d.k];
    if (w * rect.width < 4 || h * rect.height < 4) { S.rows.splice(d.k, 1); S.selected = -1; }  // a click
  }
  if (JSON.stringify(S.rows) !== d.before) S.undo.push(d.before);
  render();
}

// ---- keys
function onKey(event) {
  if (event.target.tagName === "SELECT" || !S.items.length) return;
  const key = event.key;
  window.review.keyAt = performance.now();  // when the last key came (the bench's next-image latency)
  if ((event.ctrlKey || event.metaKey) && key.toLowerCase() === "z") { event.preventDefault(); undo(); return; }
  if ((event.ctrlKey || event.metaKey) && key.toLowerCase() === "s") { event.preventDefault(); save(); return; }
  if (event.ctrlKey || event.metaKey || event.altKey) return;
  const actions = {
    Enter: () => acceptNext(), " ": () => acceptNext(), ArrowRight: () => go(1), n: () => go(1),
    ArrowLeft: () => go(-1), p: () => go(-1), Delete: () => remove(), Backspace: () => remove(),
    x: () => remove(), z: () => undo(), a: () => acceptPrediction(), s: () => save(), f: () => fit(),
    y: () => takeFix(), i: () => nextIssue(),
    Tab: () => nextBox(event.shiftKey ? -1 : 1), Escape: () => { S.selected = S.selPred = -1; render(); },
    "+": () => zoomCenter(1.25), "=": () => zoomCenter(1.25), "-": () => zoomCenter(0.8),
  };
  if (/^[0-9]$/.test(key)) { event.preventDefault(); setClass(Number(key)); return; }
  if (actions[key]) { event.preventDefault(); actions[key](); }
}

function setClass(c) {
  if (S.names.length && c >= S.names.length) { say(`class ${c}: the data set has ${S.names.length} classes`); return; }
  S.cls = c;
  if (S.selected >= 0) change(() => { S.rows[S.selected][0] = c; });
  else render();
}
function remove() {
  if (S.selected < 0) return;
  change(() => { S.rows.splice(S.selected, 1); S.selected = Math.min(S.selected, S.rows.length - 1); });
}
function undo() {
  if (!S.undo.length) return;
  S.rows = JSON.parse(S.undo.pop());
  S.selected = Math.min(S.selected, S.rows.length - 1);
  render();
}
function nextBox(step) {
  if (!S.rows.length) return;
  S.selected = (S.selected + step + S.rows.length) % S.rows.length;
  S.selPred = -1;
  render();
}
function fit() { S.full = false; fitView(); render(); }
function zoomCenter(factor) {
  const rect = $("stage").getBoundingClientRect();
  zoomAt(rect.left + rect.width / 2, rect.top + rect.height / 2, factor);
}

function iou(a, b) {
  const ix = Math.max(0, Math.min(a[1] + a[3] / 2, b[1] + b[3] / 2) - Math.max(a[1] - a[3] / 2, b[1] - b[3] / 2));
  const iy = Math.max(0, Math.min(a[2] + a[4] / 2, b[2] + b[4] / 2) - Math.max(a[2] - a[4] / 2, b[2] - b[4] / 2));
  const inter = ix * iy;
  return inter / (a[3] * a[4] + b[3] * b[4] - inter + 1e-12);
}
// the selected model box, else the most confident one no label box covers (IoU < 0.5), becomes a label
function acceptPrediction() {
  let k = S.selPred;
  if (k < 0) {
    const free = S.preds.map((p, j) => [p, j]).filter(([p]) => S.rows.every((r) => iou(r, p) < 0.5));
    free.sort((a, b) => b[0][5] - a[0][5]);
    k = free.length ? free[0][1] : -1;
  }
  if (k < 0) { say("no model box left to accept", "info"); return; }
  change(() => { S.rows.push(S.preds[k].slice(0, 5)); S.selected = S.rows.length - 1; S.selPred = -1; });
}

// ---- an audit's suspected boxes (turboyolo review --issues): drawn with their kind, each fix one key away
const KIND_COLORS = { missing: "#00e676", class: "#ffea00", location: "#ff9100", spurious: "#ff1744" };
// the label an audit row is about: its class and (nearly) its box; -1 once fixed, edited or deleted
function issueRow(issue) {
  let best = -1, bestIoU = issue.same_iou;  // the server's rule (formats/issues.py SAME_BOX_IOU)
  S.rows.forEach((row, k) => {
    const overlap = iou(row, [issue.cls, ...issue.box]);
    if (row[0] === issue.cls && overlap >= bestIoU) { best = k; bestIoU = overlap; }
  });
  return best;
}
function isOpen(issue) {
  if (issue.kind === "missing") return S.rows.every((row) => iou(row, [0, ...issue.suggested_box]) < 0.5);
  return issueRow(issue) >= 0;
}
function openIssues() { return S.issues.map((issue, k) => k).filter((k) => isOpen(S.issues[k])); }
function issueDivs(issue, k) {
  const where = issue.kind === "missing" ? issue.suggested_box : S.rows[issueRow(issue)].slice(1);
  const div = boxDiv([issue.cls, ...where], "issue", k);
  div.style.setProperty("--color", KIND_COLORS[issue.kind]);
  div.classList.add(issue.kind);
  if (k === S.selIssue) div.classList.add("selected");
  const change = issue.kind === "class" ? `: ${className(issue.cls)} → ${className(issue.suggested_cls)}`
    : issue.kind === "missing" ? `: ${className(issue.suggested_cls)}` : "";
  div.querySelector(".tag").textContent = `${issue.kind} ${issue.score.toFixed(2)}${change}` +
    (k === S.selIssue ? " · y: fix" : "");
  const divs = [div];
  if (issue.kind === "location") {
    const suggestion = boxDiv([issue.cls, ...issue.suggested_box], "suggest", k);
    suggestion.querySelector(".tag").textContent = "suggested";
    divs.push(suggestion);
  }
  return divs;
}
function nextIssue() {
  const open = openIssues();
  if (!open.length) { say("no suspected box left on this image", "info"); return; }
  S.selIssue = open[(open.indexOf(S.selIssue) + 1) % open.length];
  render();
}
// the selected suspected box's fix (else the worst one's), then the one save, as every edit
async function takeFix() {
  const open = openIssues();
  const k = open.includes(S.selIssue) ? S.selIssue : open[0];
  if (k === undefined) { say("no suspected box left on this image", "info"); return; }
  const issue = S.issues[k], row = issueRow(issue);
  change(() => {
    if (issue.kind === "missing") { S.rows.push([issue.suggested_cls, ...issue.suggested_box]); S.selected = S.rows.length - 1; }
    else if (issue.kind === "class") { S.rows[row][0] = issue.suggested_cls; S.selected = row; }
    else if (issue.kind === "location") { S.rows[row] = [S.rows[row][0], ...issue.suggested_box]; S.selected = row; }
    else { S.rows.splice(row, 1); S.selected = -1; }
  });
  if (await save()) { S.selIssue = openIssues()[0] ?? -1; render(); }
}

// ---- saving: never over a file that changed on disk since it was read; one save at a time, in order
let saving = Promise.resolve(true);
function save() {
  saving = saving.then(saveNow, saveNow);
  return saving;
}
async function saveNow() {
  if (S.error) { say(S.error); return false; }
  if (S.disk) { say("resolve the conflict first: keep yours or take the disk's"); return false; }
  S.busy = true;
  try {
    const item = current(), sent = JSON.stringify(S.rows);
    const response = await fetch(`/api/labels/${keyPath(item.key)}`, {
      method: "POST", headers: { "Content-Type": "application/json", [TOKEN_HEADER]: TOKEN },
      body: JSON.stringify({ rows: S.rows, base: S.base }),
    });
    const body = await response.json();
    if (response.status === 409) {
      S.disk = body.disk;
      say("This label file changed on disk since it was loaded: not saved. Yours (solid) and the disk's " +
        "(dotted orange) are both shown.");
      render();
      return false;
    }
    if (!response.ok) { say(body.error || response.statusText); return false; }
    S.base = body.sha1; S.status = body.status; S.loaded = JSON.stringify(body.rows);
    if (JSON.stringify(S.rows) === sent) S.rows = body.rows;  // edits made meanwhile stay (unsaved)
    item.status = body.status;
    showProgress(body.progress);
    say(null);
    render();
    return true;
  } catch (err) {
    say(`not saved: ${err.message}`);
    return false;
  } finally {
    S.busy = false;
  }
}
async function keepMine() {
  document.activeElement.blur();  // the keys go to the page again, not to the button
  S.base = S.disk.sha1; S.disk = null;
  if (await save()) say("saved yours", "info");
}
function takeDisk() {
  document.activeElement.blur();
  change(() => { S.rows = S.disk.rows; });
  S.base = S.disk.sha1; S.loaded = JSON.stringify(S.disk.rows); S.status = S.disk.status; S.disk = null;
  say(null); render();
}

async function leave() {  // before moving on: unsaved changes are saved (never dropped)
  if (!S.items.length || !dirty()) return !S.disk;
  return save();
}
async function go(step) {
  if (await leave()) await show(S.index + step);
}
async function acceptNext() {
  if (await save()) {
    if (S.index + 1 < S.items.length) await show(S.index + 1);
    else say("that was the last image of this order", "info");
  }
}

start().catch((err) => say(`could not start: ${err.message}`));
