"""The review's HTTP server: Python's own threaded ``http.server``, one user, bound to 127.0.0.1.

Why the standard library: the app serves one person on one machine, a handful of small JSON requests
and JPEGs a second; a thread per request is plenty, and nothing needs installing (no web framework, no
ASGI server, no build step: the page is plain JS/CSS shipped in ``turboyolo/resources/review``).

Safe by default: every request must carry the random token of the URL printed at start (``?t=`` or the
``X-Review-Token`` header; without it: 403); only the data set's own images are served, by their key
(anything else, ``../`` included, and an image that is a link out of the data set's folders: 404); the
only writes are the label files of those images and their provenance records (:mod:`.items`).

Routes: ``/`` the page, ``/static/<app.js|app.css>``, ``/api/session``, ``/api/list?order=``,
``/api/labels/<key>`` (GET; POST ``{"rows": [...], "base": sha1}``: 200, 409 on a conflict),
``/image/<key>?side=`` (a reduced JPEG).
"""

from __future__ import annotations

import hmac
import json
import secrets
import sys
import threading
import webbrowser
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from turboyolo.errors import FlagError, TurboYoloError, printable
from turboyolo.options import CONF_THRES, option, require
from turboyolo.review.images import ModelBoxes, ReducedImages
from turboyolo.review.items import ORDERS, Conflict, ReviewSet, disagreement

STATIC = {"app.js": "text/javascript; charset=utf-8", "app.css": "text/css; charset=utf-8"}
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


@dataclass
class ReviewArgs:
    """The review's server and what it shows."""

    host: str = option("127.0.0.1", "address to listen on; anything but 127.0.0.1 lets other machines "
                       "reach the page (the token is still needed)")
    port: int = option(0, "port (0: a free one)", type=int)
    no_browser: bool = option(False, "only print the URL, do not open a browser", action="store_true")
    order: str = option("review", "first order of the images (the page can change it): review (review.csv, "
                        "else model-made first), name, unreviewed, disagree (needs --weights)",
                        choices=ORDERS)
    split: str = option("all", "which images of a data file", choices=("all", "train", "val", "unlabeled"))
    side: int = option(1600, "longer side of the pictures sent to the page (0: full size; zooming in past "
                       "it loads the full size)", type=int)
    conf_thres: float = option(CONF_THRES, "the model's boxes shown from this confidence (--weights)",
                               type=float)

    def __post_init__(self) -> None:
        require(0 <= self.port < 65536, f"--port must be 0..65535, got {self.port}")
        require(self.side >= 0, f"--side must be >= 0, got {self.side}")
        require(self.order in ORDERS, f"--order must be one of {', '.join(ORDERS)}, got {self.order!r}")


@dataclass
class ReviewApp:
    """What the handler needs: the images, the pictures, the model's boxes (optional), the token."""

    review: ReviewSet
    args: ReviewArgs
    images: ReducedImages
    model: ModelBoxes | None = None
    token: str = field(default_factory=lambda: secrets.token_urlsafe(18))
    saved: int = 0

    def session(self) -> dict:
        return {"names": self.review.names, "source": printable(self.review.source), "orders": ORDERS,
                "order": self.args.order, "model": self.model is not None, "side": self.args.side,
                "progress": self.review.progress()}

    def listing(self, order: str) -> dict:
        if order not in ORDERS or (order == "disagree" and self.model is None):
            order = "review"
        scores = None
        if order == "disagree":
            scores = {item.key: disagreement(self.review.read(item).rows, self.model.get(item.image))
                      for item in self.review.items}
        items = self.review.listing(order, scores)
        by_key = {item.key: item for item in self.review.items}
        self.images.warm([by_key[row["key"]].image for row in items[:3]], self.args.side)
        return {"order": order, "items": items, "progress": self.review.progress()}


class Handler(BaseHTTPRequestHandler):
    server_version = "turboyolo-review"
    app: ReviewApp  # set on the subclass made by make_server

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        pass  # one line per request would bury the URL; errors are answered to the page

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._route("POST")

    def _route(self, method: str) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        given = (query.get("t") or [self.headers.get("X-Review-Token", "")])[0]
        if not hmac.compare_digest(given.encode(), self.app.token.encode()):
            return self._send(HTTPStatus.FORBIDDEN, b"forbidden: open the URL printed by turboyolo review\n",
                              "text/plain")
        path = url.path
        try:
            if method == "GET" and path == "/":
                return self._static("index.html", "text/html; charset=utf-8")
            if method == "GET" and path.startswith("/static/") and path[8:] in STATIC:
                return self._static(path[8:], STATIC[path[8:]])
            if method == "GET" and path == "/api/session":
                return self._json(self.app.session())
            if method == "GET" and path == "/api/list":
                return self._json(self.app.listing((query.get("order") or ["review"])[0]))
            if path.startswith("/api/labels/"):
                return self._labels(method, path[len("/api/labels/"):])
            if method == "GET" and path.startswith("/image/"):
                return self._image(path[len("/image/"):], query)
        except TurboYoloError as err:
            return self._json({"error": printable(err)}, HTTPStatus.BAD_REQUEST)
        self._not_found()

    def _labels(self, method: str, quoted: str) -> None:
        item = self.app.review.find(unquote(quoted, errors="surrogateescape"))
        if item is None:
            return self._not_found()
        if method == "GET":
            state = self.app.review.read(item).as_json()
            if self.app.model is not None:
                state["predictions"] = self.app.model.get(item.image)
            return self._json(state)
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
            rows, base = list(body["rows"]), body.get("base")
        except (ValueError, KeyError, TypeError):
            return self._json({"error": "expected {rows: [[cls, cx, cy, w, h], ...], base: sha1}"},
                              HTTPStatus.BAD_REQUEST)
        try:
            state = self.app.review.save(item, rows, base)
        except Conflict as conflict:
            return self._json({"conflict": True, "disk": conflict.disk.as_json()}, HTTPStatus.CONFLICT)
        self.app.saved += 1
        return self._json({**state.as_json(), "progress": self.app.review.progress()})

    def _image(self, quoted: str, query: dict) -> None:
        item = self.app.review.find(unquote(quoted, errors="surrogateescape"))
        if item is None:
            return self._not_found()
        try:
            side = int((query.get("side") or [self.app.args.side])[0])
        except ValueError:
            side = self.app.args.side
        data = self.app.images.get(item.image, max(0, side))
        self._send(HTTPStatus.OK, data, "image/jpeg", cache=True)

    def _static(self, name: str, kind: str) -> None:
        data = resources.files("turboyolo").joinpath("resources", "review", name).read_bytes()
        self._send(HTTPStatus.OK, data.replace(b"__TOKEN__", self.app.token.encode()), kind)

    def _json(self, value: object, status: HTTPStatus = HTTPStatus.OK) -> None:
        self._send(status, json.dumps(value).encode(), "application/json")

    def _not_found(self) -> None:
        self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")

    def _send(self, status: HTTPStatus, data: bytes, kind: str, cache: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "private, max-age=3600" if cache else "no-store")
        self.send_header("Content-Security-Policy", "default-src 'self'; img-src 'self' blob:")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        self.wfile.write(data)


class ReviewServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # the browser closed or moved on (a picture asked for ahead): nothing to report
        super().handle_error(request, client_address)


def make_server(app: ReviewApp) -> ThreadingHTTPServer:
    """The server of ``app``, bound (not yet serving); its URL is :func:`url_of`."""
    handler = type("ReviewHandler", (Handler,), {"app": app})
    try:
        server = ReviewServer((app.args.host, app.args.port), handler)
    except OSError as err:  # the port is taken, the address is not this machine's
        raise FlagError(f"--host {app.args.host} --port {app.args.port}: cannot listen there "
                        f"({err.strerror or err}); pick another port, or 0 for a free one") from None
    return server


def url_of(server: ThreadingHTTPServer, app: ReviewApp) -> str:
    host, port = server.server_address[:2]
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    shown = f"[{shown}]" if ":" in shown else shown
    return f"http://{shown}:{port}/?t={app.token}"


def serve(app: ReviewApp, log: Callable[[str], None] = print) -> int:
    """Serve ``app`` until Ctrl-C (then close cleanly); opens the browser unless ``--no-browser``.
    Returns how many saves the session made."""
    server = make_server(app)
    url = url_of(server, app)
    app.listing(app.args.order)  # the first pictures are made while the browser starts
    if app.args.host not in LOCAL_HOSTS:
        log(f"warning: --host {app.args.host}: other machines that reach this address can open the review "
            "(with the token of the URL) and change label files")
    progress = app.review.progress()
    log(f"review of {printable(app.review.source)}: {len(app.review.items)} images, "
        f"{progress['model']} model-made, {progress['reviewed']} reviewed, {progress['human']} human, "
        f"{progress['none']} without labels")
    log(f"open {url}  (Ctrl-C stops)")
    if not app.args.no_browser:
        threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        app.images.close()
    log(f"review stopped: {app.saved} saves this session, every one on disk")
    return app.saved


def open_review(data: str | Path, args: ReviewArgs, predict: Callable | None = None,
                cache: Path | None = None) -> ReviewApp:
    """The app for ``data`` (:meth:`ReviewSet.open`); ``predict``: a :class:`ModelBoxes` function."""
    review = ReviewSet.open(data, args.split)
    model = ModelBoxes(predict, args.side) if predict is not None else None
    return ReviewApp(review, args, ReducedImages(cache), model)
