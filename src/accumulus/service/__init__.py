"""The averaging service: an HTTP API and a web page over one or more datacubes.

``create_app(stores)`` builds the FastAPI application; ``serve(stores)`` runs it with uvicorn
(``accumulus serve``). Modules: ``app`` (the application and its OpenAPI document),
``routes/`` (one ``APIRouter`` per module: health, datasets, average, geography), ``state``
(what a running service holds, given to the routes as a dependency, and its guarded
computations), ``datasets`` (the served stores by name, one metadata snapshot per request),
``describe`` (what ``/api/datasets`` says), ``parameters`` (an average's query parameters
into one checked query), ``answers`` (querying and rendering), ``cache``, ``guard`` (limits,
slots, stopping work), ``errors`` (error bodies without server paths), ``http`` (HEAD, Host,
slow clients), ``schemas`` (the OpenAPI shapes), ``static/`` (the page).
"""

from accumulus.service.app import create_app
from accumulus.service.server import serve

__all__ = ["create_app", "serve"]
