"""The averaging service: an HTTP API and a web page over one or more datacubes.

``create_app(stores)`` builds the FastAPI application; ``serve(stores)`` runs it with uvicorn
(``accumulus serve``). Modules: ``snapshot`` (one metadata snapshot per request and its token),
``datasets`` (the served stores by name), ``describe`` (what ``/api/datasets`` says),
``parameters`` (checking a request), ``answers`` (querying and rendering), ``cache``,
``schemas`` (the OpenAPI shapes), ``app`` (the routes), ``static/`` (the page).
"""

from accumulus.service.app import create_app
from accumulus.service.server import serve

__all__ = ["create_app", "serve"]
