"""The review's HTTP server: Python's own threaded ``http.server``, one user, bound to 127.0.0.1.

Why the standard library: the app serves one person on one machine, a handful of small JSON requests
and JPEGs a second; a thread per request is plenty, and nothing needs installing (no web framework, no
ASGI server, no build step: the page is plain JS/CSS shipped in ``turboyolo/resources/review``).

Safe by default. Every request passes :func:`guard` before any route sees it, in this order:

1. ``Host`` must name this server (127.0.0.1, localhost, [::1] or the ``--host`` given, with its port;
   bound to every address, also this machine's names and any IP address): a page of another site whose
   name was made to point here (DNS rebinding) is refused (403).
2. ``Origin``, when the browser sends one, must be this server's own origin (403): no other site's page
   reaches the API.
3. The token (random per start): a GET may carry it in the URL (``?t=``: the address the user opens),
   the ``X-Turboyolo-Token`` header, or the cookie the page's first answer sets (``SameSite=Strict``,
   ``HttpOnly``: the page takes the token out of the address bar, a reload still works); a request that
   changes anything (POST) only in the header, which no form of another site can send (403).
4. A POST is JSON only (``Content-Type: application/json``, 415), its length given
   (``Content-Length``: missing 411, not a number 400, over :data:`MAX_BODY` 413: refused before a byte
   of the body is read), its body one JSON object read whole (not JSON, nested too deeply: 400). NaN,
   Infinity and numbers beyond a float (``1e400``) are refused by the values' checks, naming the field.

Then the route's answer: only the data set's own images are served, by their key (anything else,
``../`` included, and an image or label file that is a link out of the data set's folders: 404); the
only writes are the label files of those images and their provenance records (:mod:`.items`: every
value checked, 400 naming the field). A request that breaks something unforeseen is answered 500 and
its traceback printed in the terminal; the server goes on.

Routes (:data:`ROUTES`): ``/`` the page, ``/static/<app.js|app.css>``, ``/api/session``,
``/api/list?order=``, ``/api/labels/<key>`` (GET, with the model's boxes and an audit's suspected boxes
when given; POST ``{"rows": [...], "base": sha1}``: 200, 409 on a conflict; every write, an audit's fix
included, is this one save), ``/image/<key>?side=`` (a reduced JPEG). A new route is one :class:`Route`
line and one ``answer_<name>(request)`` method of :class:`Handler`: the guard above applies to it
unchanged (a POST gets its JSON body checked and parsed as ``request.body``).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import secrets
import socket
import sys
import threading
import traceback
import webbrowser
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.cookies import CookieError, SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from turboyolo.errors import FlagError, OutputError, TurboYoloError, printable
from turboyolo.options import CONF_THRES, option, require
from turboyolo.review.images import ModelBoxes, ReducedImages
from turboyolo.review.issues import Suspicions
from turboyolo.review.items import ORDERS, Conflict, ReviewSet, disagreement

STATIC = {"app.js": "text/javascript; charset=utf-8", "app.css": "text/css; charset=utf-8"}
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
TOKEN_HEADER = "X-Turboyolo-Token"
MAX_BODY = 4 * 1024 * 1024  # a save's JSON: tens of thousands of boxes fit
REQUEST_TIMEOUT = 30  # seconds a client may take to send a request (or keep an idle connection)


@dataclass
class ReviewArgs:
    """The review's server and what it shows."""

    host: str = option("127.0.0.1", "address to listen on; anything but 127.0.0.1 lets other machines "
                       "reach the page (the token is still needed)")
    port: int = option(0, "port (0: a free one)", type=int)
    no_browser: bool = option(False, "only print the URL, do not open a browser", action="store_true")
    order: str | None = option(None, "first order of the images (the page can change it): review "
                               "(review.csv, else model-made first; the default), name, unreviewed, disagree "
                               "(needs --weights), issues (needs --issues; the default with it)",
                               choices=ORDERS)
    issues: str | None = option(None, "a `turboyolo audit` run directory (or its label_issues.csv): its "
                                "suspected boxes drawn with their kind, their images first (worst first), "
                                "each fix one key away", metavar="AUDIT")
    split: str = option("all", "which images of a data file", choices=("all", "train", "val", "unlabeled"))
    side: int = option(1600, "longer side of the pictures sent to the page (0: full size; zooming in past "
                       "it loads the full size)", type=int)
    conf_thres: float = option(CONF_THRES, "the model's boxes shown from this confidence (--weights)",
                               type=float)

    def __post_init__(self) -> None:
        require(0 <= self.port < 65536, f"--port must be 0..65535, got {self.port}")
        require(self.side >= 0, f"--side must be >= 0, got {self.side}")
        require(self.order is None or self.order in ORDERS,
                f"--order must be one of {', '.join(ORDERS)}, got {self.order!r}")
        require(self.order != "issues" or bool(self.issues),
                "--order issues needs --issues <a `turboyolo audit` run directory>")


@dataclass
class ReviewApp:
    """What the handler needs: the images, the pictures, the model's boxes and an audit's suspicions
    (optional), the token, and the addresses a request may name (:func:`make_server` fills ``port``
    and ``hosts``)."""

    review: ReviewSet
    args: ReviewArgs
    images: ReducedImages
    model: ModelBoxes | None = None
    suspicions: Suspicions | None = None
    token: str = field(default_factory=lambda: secrets.token_urlsafe(18))
    saved: int = 0
    port: int = 0
    hosts: frozenset[str] = frozenset()  # host names a request may carry (lower case, IPv6 in brackets)
    any_ip: bool = False  # bound to every address: any IP address is this machine's too

    @property
    def order(self) -> str:
        """The first order: ``--order``, else issues with ``--issues``, else review."""
        return self.args.order or ("issues" if self.suspicions is not None else "review")

    def session(self) -> dict:
        return {"names": self.review.names, "source": printable(self.review.source), "orders": ORDERS,
                "order": self.order, "model": self.model is not None, "side": self.args.side,
                "issues": self.suspicions is not None, "progress": self.review.progress()}

    def listing(self, order: str) -> dict:
        if (order not in ORDERS or (order == "disagree" and self.model is None)
                or (order == "issues" and self.suspicions is None)):
            order = "review"
        scores = None
        if order == "disagree":  # files that are links out of the data set are not read
            scores = {item.key: disagreement(self.review.read(item).rows, self.model.get(item.image))
                      for item in self.review.items if self.review.find(item.key) is not None}
        elif order == "issues":
            scores = {item.key: self.suspicions.score(item.image) for item in self.review.items}
        items, progress = self.review.listing_and_progress(order, scores)
        ahead = (self.review.find(row["key"]) for row in items[:3])
        self.images.warm([item.image for item in ahead if item is not None], self.args.side)
        return {"order": order, "items": items, "progress": progress}


@dataclass(frozen=True)
class Route:
    """A route: ``method``, ``path`` (exact, or ending in ``/``: a prefix whose rest is the request's
    ``rest``) and the :class:`Handler` method ``answer_<answer>`` that answers it after :func:`guard`."""

    method: str
    path: str
    answer: str


ROUTES = (
    Route("GET", "/", "page"),
    Route("GET", "/static/", "static"),
    Route("GET", "/api/session", "session"),
    Route("GET", "/api/list", "listing"),
    Route("GET", "/api/labels/", "labels"),
    Route("POST", "/api/labels/", "save"),
    Route("GET", "/image/", "image"),
)


@dataclass
class Request:
    """A request that passed :func:`guard`: its route, the path after a prefix route's, its query and (a
    POST) its JSON body; ``url_token``: the token came in the URL (the page's first answer sets the
    cookie)."""

    route: Route
    rest: str
    query: dict[str, list[str]]
    body: object = None
    url_token: bool = False


class Refusal(Exception):  # noqa: N818 - an answer, not a failure
    """A request answered ``status`` with ``message`` (JSON ``{"error": message}``) by :func:`guard`."""

    def __init__(self, status: HTTPStatus, message: str):
        super().__init__(message)
        self.status = status


def guard(handler: BaseHTTPRequestHandler, method: str, app: ReviewApp) -> Request:
    """The checks every request passes, in the module text's order; the request, or :class:`Refusal`."""
    url = urlsplit(handler.path)
    if not handler.path.startswith("/"):
        raise Refusal(HTTPStatus.BAD_REQUEST, "the request's path must start with /")
    host = handler.headers.get("Host")
    problem = host_problem(host, app)
    if problem:
        raise Refusal(HTTPStatus.FORBIDDEN, f"forbidden: {problem}")
    origin = handler.headers.get("Origin")
    if origin is not None and _split_origin(origin) != _split_host(host):
        raise Refusal(HTTPStatus.FORBIDDEN, f"forbidden: Origin {origin[:100]!r} is not this server's")
    query = parse_qs(url.query)
    url_token = _token_matches(app, (query.get("t") or [""])[0]) and method == "GET"
    if not (url_token or _token_matches(app, handler.headers.get(TOKEN_HEADER, ""))
            or (method == "GET" and _cookie_token(handler, app))):
        raise Refusal(HTTPStatus.FORBIDDEN, "forbidden: open the URL printed by turboyolo review"
                      + ("" if method == "GET" else f" (a POST carries the token in {TOKEN_HEADER})"))
    found = next(((route, url.path[len(route.path):]) for route in ROUTES if route.method == method and (
        url.path == route.path or (route.path.endswith("/") and route.path != "/"
                                   and url.path.startswith(route.path)))), None)
    if found is None:
        raise Refusal(HTTPStatus.NOT_FOUND, "not found")
    body = read_json_body(handler) if method == "POST" else None
    return Request(found[0], found[1], query, body, url_token)


def host_problem(host: str | None, app: ReviewApp) -> str | None:
    """Why ``host`` (a Host header) does not name this server, or None when it does."""
    if not host:
        return "no Host header"
    split = _split_host(host)
    if split is None:
        return f"Host {host[:100]!r} is not an address"
    name, port = split
    if port != app.port:
        return f"Host {host[:100]!r}: this server listens on port {app.port}"
    if name in app.hosts or (app.any_ip and _is_ip(name)):
        return None
    return (f"Host {host[:100]!r} is not this server's address (open the URL printed by turboyolo review; "
            "another name pointed at this machine is refused)")


def _split_host(host: str | None) -> tuple[str, int] | None:
    """(name, port) of a Host value (``[::1]:8000`` -> ``('[::1]', 8000)``; no port: 80), or None."""
    if host is None:
        return None
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        name, rest = host[: end + 1], host[end + 1 :]
        if end < 0 or not _is_ip(name):
            return None
    else:
        name, colon, port = host.partition(":")
        rest = colon + port
    if not name or any(ch in name for ch in "/@?#\\ "):
        return None
    if not rest:
        return name, 80
    port = rest[1:]
    if not rest.startswith(":") or not (port.isascii() and port.isdigit()) or len(port) > 5:
        return None
    return name, int(port)


def _split_origin(origin: str) -> tuple[str, int] | None:
    return _split_host(origin[len("http://"):]) if origin.lower().startswith("http://") else None


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name.strip("[]"))
        return True
    except ValueError:
        return False


def _token_matches(app: ReviewApp, given: str) -> bool:
    return bool(given) and hmac.compare_digest(given.encode("utf-8", "replace"), app.token.encode())


def _cookie_name(app: ReviewApp) -> str:
    return f"turboyolo_review_{app.port}"  # one per port: two reviews on one machine keep apart


def _cookie_token(handler: BaseHTTPRequestHandler, app: ReviewApp) -> bool:
    """The cookie carries the token, and the browser says the request comes from this server's own page
    (or from the address bar): another site's page cannot use it even on this machine."""
    if handler.headers.get("Sec-Fetch-Site", "same-origin") not in ("same-origin", "none"):
        return False
    try:
        cookie = SimpleCookie(handler.headers.get("Cookie", ""))
    except CookieError:
        return False
    morsel = cookie.get(_cookie_name(app))
    return morsel is not None and _token_matches(app, morsel.value)


def read_json_body(handler: BaseHTTPRequestHandler) -> object:
    """The JSON body of a POST, refused before it is read unless JSON of a stated, bounded length."""
    kind = handler.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise Refusal(HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                      f"expected Content-Type: application/json, got {kind[:60]!r}")
    if handler.headers.get("Transfer-Encoding"):
        raise Refusal(HTTPStatus.LENGTH_REQUIRED, "send the body with a Content-Length, not chunked")
    lengths = handler.headers.get_all("Content-Length") or []
    if not lengths:
        raise Refusal(HTTPStatus.LENGTH_REQUIRED, "Content-Length is required")
    value = lengths[0].strip()
    if len(set(lengths)) > 1 or not (value.isascii() and value.isdigit()):
        raise Refusal(HTTPStatus.BAD_REQUEST, f"Content-Length {', '.join(lengths)[:60]!r} is not a length")
    length = int(value)
    if length > MAX_BODY:
        raise Refusal(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                      f"the body ({length} bytes) is over the limit of {MAX_BODY} bytes")
    data = handler.rfile.read(length)
    if len(data) != length:
        raise Refusal(HTTPStatus.BAD_REQUEST, f"the body ended after {len(data)} of its {length} bytes")
    try:  # NaN and Infinity (JSON's non-standard tokens) read as floats: the value checks refuse them
        body = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise Refusal(HTTPStatus.BAD_REQUEST, "the JSON is nested too deeply") from None
    except ValueError as err:  # not UTF-8, not JSON
        raise Refusal(HTTPStatus.BAD_REQUEST, f"the body is not JSON ({str(err)[:120]})") from None
    if not isinstance(body, dict):
        raise Refusal(HTTPStatus.BAD_REQUEST, "the body must be a JSON object")
    return body


class Handler(BaseHTTPRequestHandler):
    server_version = "turboyolo-review"
    timeout = REQUEST_TIMEOUT
    app: ReviewApp  # set on the subclass made by make_server

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        pass  # one line per request would bury the URL; errors are answered to the page

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._handle("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")

    def _handle(self, method: str) -> None:
        """:func:`guard`, then the route's answer; whatever goes wrong is answered, never a dead thread."""
        self._answered = False
        try:
            request = guard(self, method, self.app)
            getattr(self, f"answer_{request.route.answer}")(request)
        except Refusal as refusal:
            self.close_connection = True  # a body not read must not be taken for the next request
            self._error(refusal.status, str(refusal))
        except OutputError as err:  # the data set's disk, not the request: a read-only labels folder
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, printable(err))
        except TurboYoloError as err:
            self._error(HTTPStatus.BAD_REQUEST, printable(err), getattr(err, "field", None))
        except (ConnectionError, TimeoutError):
            self.close_connection = True  # the browser went away, or stopped sending mid-request
        except Exception:
            self.close_connection = True
            sys.stderr.write(f"turboyolo review: {method} {printable(self.path)[:200]} failed (answered "
                             f"500):\n{traceback.format_exc()}")
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error; the terminal of turboyolo "
                        "review has the details")

    # ---- the routes' answers (ROUTES)
    def answer_page(self, request: Request) -> None:
        cookie = None
        if request.url_token:  # opened from the URL: the page takes the token out of the address bar
            cookie = f"{_cookie_name(self.app)}={self.app.token}; Path=/; HttpOnly; SameSite=Strict"
        self._static("index.html", "text/html; charset=utf-8", cookie)

    def answer_static(self, request: Request) -> None:
        if request.rest not in STATIC:
            raise Refusal(HTTPStatus.NOT_FOUND, "not found")
        self._static(request.rest, STATIC[request.rest])

    def answer_session(self, request: Request) -> None:
        self._json(self.app.session())

    def answer_listing(self, request: Request) -> None:
        self._json(self.app.listing((request.query.get("order") or ["review"])[0]))

    def answer_labels(self, request: Request) -> None:
        item = self._item(request.rest)
        state = self.app.review.read(item).as_json()
        if self.app.model is not None:
            state["predictions"] = self.app.model.get(item.image)
        if self.app.suspicions is not None:
            state["issues"] = self.app.suspicions.for_page(item.image)
        self._json(state)

    def answer_save(self, request: Request) -> None:
        item = self._item(request.rest)
        base = request.body.get("base")
        if base is not None and not (isinstance(base, str) and len(base) == 40
                                     and all(ch in "0123456789abcdef" for ch in base)):
            return self._error(HTTPStatus.BAD_REQUEST, "base: expected the SHA-1 of the file the page read "
                               "(40 hex digits), or null for no file; nothing was saved", "base")
        try:
            state = self.app.review.save(item, request.body.get("rows"), base)
        except Conflict as conflict:
            return self._json({"conflict": True, "disk": conflict.disk.as_json()}, HTTPStatus.CONFLICT)
        self.app.saved += 1
        self._json({**state.as_json(), "progress": self.app.review.progress()})

    def answer_image(self, request: Request) -> None:
        item = self._item(request.rest)
        try:
            side = int((request.query.get("side") or [self.app.args.side])[0])
        except ValueError:
            side = self.app.args.side
        data = self.app.images.get(item.image, max(0, side))
        self._send(HTTPStatus.OK, data, "image/jpeg", cache=True)

    # ---- helpers
    def _item(self, quoted: str):
        item = self.app.review.find(unquote(quoted, errors="surrogateescape"))
        if item is None:
            raise Refusal(HTTPStatus.NOT_FOUND, "not found: not an image of this review, or a link out of "
                          "its folders")
        return item

    def _static(self, name: str, kind: str, cookie: str | None = None) -> None:
        data = resources.files("turboyolo").joinpath("resources", "review", name).read_bytes()
        self._send(HTTPStatus.OK, data.replace(b"__TOKEN__", self.app.token.encode()), kind, cookie=cookie)

    def _json(self, value: object, status: HTTPStatus = HTTPStatus.OK) -> None:
        self._send(status, json.dumps(value).encode(), "application/json")

    def _error(self, status: HTTPStatus, message: str, field: str | None = None) -> None:
        if self._answered:  # the answer had begun: the connection is closed instead
            self.close_connection = True
            return
        value = {"error": message} if field is None else {"error": message, "field": field}
        try:
            self._json(value, status)
        except OSError:
            self.close_connection = True

    def _send(self, status: HTTPStatus, data: bytes, kind: str, cache: bool = False,
              cookie: str | None = None) -> None:
        self._answered = True
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "private, max-age=3600" if cache else "no-store")
        self.send_header("Content-Security-Policy", "default-src 'self'; img-src 'self' blob:")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        if cookie:
            self.send_header("Set-Cookie", cookie)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)


class ReviewServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return  # the browser closed or moved on (a picture asked for ahead): nothing to report
        super().handle_error(request, client_address)


def make_server(app: ReviewApp) -> ThreadingHTTPServer:
    """The server of ``app``, bound (not yet serving); its URL is :func:`url_of`. Sets the port and the
    host names requests may carry (:func:`host_problem`)."""
    handler = type("ReviewHandler", (Handler,), {"app": app})
    host = app.args.host
    server_class = ReviewServer
    if ":" in host:  # an IPv6 address
        server_class = type("ReviewServer6", (ReviewServer,), {"address_family": socket.AF_INET6})
    try:
        server = server_class((host, app.args.port), handler)
    except OSError as err:  # the port is taken, the address is not this machine's
        raise FlagError(f"--host {host} --port {app.args.port}: cannot listen there "
                        f"({err.strerror or err}); pick another port, or 0 for a free one") from None
    app.port = server.server_address[1]
    app.any_ip = host in ("0.0.0.0", "::", "")
    names = {"127.0.0.1", "localhost", "[::1]", f"[{host.lower()}]" if ":" in host else host.lower()}
    if app.any_ip:
        names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
    app.hosts = frozenset(names)
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
    progress = app.listing(app.order)["progress"]  # the first pictures are made while the browser starts
    if app.args.host not in LOCAL_HOSTS:
        log(f"warning: --host {app.args.host}: other machines that reach this address can open the review "
            "(with the token of the URL) and change label files")
    log(f"review of {printable(app.review.source)}: {len(app.review.items)} images, "
        f"{progress['model']} model-made, {progress['reviewed']} reviewed, {progress['human']} human, "
        f"{progress['none']} without labels")
    for problem in app.review.unwritable()[:3]:
        log(f"warning: {problem}: its labels are shown, saving them is refused")
    if app.suspicions is not None:
        shown = sum(1 for item in app.review.items if app.suspicions.score(item.image) > 0)
        log(f"audit {printable(app.suspicions.source)}: {shown} of these images hold a suspected box"
            + ("" if shown else "; none of its images is one of this review's: was the audit of this data "
                                 "set?"))
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
    suspicions = Suspicions.read(args.issues) if args.issues else None
    return ReviewApp(review, args, ReducedImages(cache), model, suspicions)
