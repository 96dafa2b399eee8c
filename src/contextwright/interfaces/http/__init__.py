"""The HTTP service (``contextwright serve``): a versioned JSON API over the `Host`.

`create_app(settings)` makes the FastAPI app (``_app.py``); the routes live in
small modules by concern (``_routes_conversations.py``, ``_routes_context.py``,
``_routes_memory.py``), the bodies in ``_models.py``, errors as problem details in
``_problems.py``, the key check in ``_deps.py``, metrics in ``_metrics.py``, the
inspector page (``/inspect``, files in ``static/``) in ``_inspect.py``.
docs/service.md is the reference. Needs the ``server`` extra (FastAPI, uvicorn,
prometheus-client); without it, importing this package raises
`MissingDependencyError` naming the extra.
"""

from __future__ import annotations

from ..._errors import MissingDependencyError

try:
    import fastapi  # noqa: F401
    import prometheus_client  # noqa: F401
except ImportError as exc:  # pragma: no cover - the extra is installed in the tests
    raise MissingDependencyError(exc.name or "fastapi", "server", "the HTTP service") from None

from ._app import INSECURE_HEADER, app_from_env, create_app
from ._settings import Settings

__all__ = ["INSECURE_HEADER", "Settings", "app_from_env", "create_app"]
