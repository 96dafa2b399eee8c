"""`Settings`: what ``contextwright serve`` passes to the app, and how it reaches workers.

With ``--workers 1`` the app is made in the serving process from the settings
object; with more, uvicorn starts each worker from an import string
(`app_from_env`), so the settings travel as JSON in ``$CONTEXTWRIGHT_SERVE``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any

from ..._errors import ConfigError

__all__ = ["ENV", "Settings"]

ENV = "CONTEXTWRIGHT_SERVE"


@dataclass(frozen=True)
class Settings:
    """The service's settings (``contextwright serve --help`` says each).

    ``db`` None: ``$CONTEXTWRIGHT_DB``, else the per-user file. ``max_body``: the
    largest request body accepted, in bytes (413 above). ``insecure_single_tenant``:
    no keys, every request is tenant ``"default"`` (for local use only; loud).
    ``cache``: a ``redis://`` URL for the shared block cache.
    """

    db: str | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 1
    max_body: int = 4 << 20
    model: str | None = None
    budget: int | None = None
    system_prompt: str = ""
    insecure_single_tenant: bool = False
    cache: str | None = None

    def __post_init__(self) -> None:
        for label in ("port", "workers", "max_body"):
            value = getattr(self, label)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"--{label.replace('_', '-')} must be a positive integer")
        if self.port > 65535:
            raise ConfigError("--port must be at most 65535")
        if self.budget is not None and self.budget < 1:
            raise ConfigError("--budget must be a positive integer")

    def to_env(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_env(cls) -> Settings:
        raw = os.environ.get(ENV)
        if not raw:
            raise ConfigError(f"${ENV} is not set: start workers with `contextwright serve`")
        data: dict[str, Any] = json.loads(raw)
        return cls(**data)
