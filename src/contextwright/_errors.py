"""Every exception contextwright raises, in one place.

The hierarchy::

    ContextwrightError                  base of everything below
    ├── UserError                       the caller misused the library (bad input or config)
    │   ├── InvalidMessageError         a message, part or provider payload is malformed;
    │   │                               says which field and at which position
    │   ├── ConfigError                 a setting is out of range or inconsistent
    │   └── MissingDependencyError      an optional extra is not installed; names the extra
    ├── BudgetError                     the protected zone alone does not fit the budget
    ├── StoreError                      the conversation store failed (database locked past
    │   │                               its busy timeout, corrupt, closed, unwritable)
    │   ├── SummaryConflictError        a summary was not saved: the stored one already
    │   │                               covers as far (another writer got there first)
    │   ├── LeaseLostError              a job's lease passed to another worker: the old
    │   │                               holder's complete/fail wrote nothing
    │   ├── StoreUnavailableError       the database server cannot be reached (down,
    │   │                               restarting, refusing connections): retry later
    │   └── SchemaError                 the database's schema is not one this version can
    │                                   use (newer, or missing an extension); says the fix
    ├── LLMError                        a call to a language model failed (HTTP error, timeout,
    │                                   unusable answer); the SDK's error is the cause
    └── ProviderRuleError               a rendered request breaks a provider's rules;
                                        says which rule and at which position

`UserError` subclasses also derive from `ValueError` (or `ImportError` for a missing
extra) so that code written against the standard exceptions keeps working. Errors
from backends (tokenizer libraries, SDKs, databases) are translated at the boundary
into one of these, with the original chained as ``__cause__``.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BudgetError",
    "ConfigError",
    "ContextwrightError",
    "InvalidMessageError",
    "LLMError",
    "LeaseLostError",
    "MissingDependencyError",
    "ProviderRuleError",
    "SchemaError",
    "StoreError",
    "StoreUnavailableError",
    "SummaryConflictError",
    "UserError",
]


class ContextwrightError(Exception):
    """Base class of every error raised by contextwright."""


class UserError(ContextwrightError, ValueError):
    """The library was used wrongly: bad input, bad configuration."""


class InvalidMessageError(UserError):
    """A message (or provider payload) is malformed.

    ``where`` is a dotted path to the offending value, such as
    ``messages[3].content[1].tool_use_id``; ``problem`` says what is wrong with it.
    """

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(f"{where}: {problem}" if where else problem)


class ConfigError(UserError):
    """A setting is out of range or inconsistent with another."""


class MissingDependencyError(ContextwrightError, ImportError):
    """An optional dependency is missing; the message names the extra to install."""

    def __init__(self, package: str, extra: str, purpose: str) -> None:
        self.package = package
        self.extra = extra
        super().__init__(
            f"{purpose} needs the '{package}' package: pip install 'contextwright[{extra}]'"
        )


class BudgetError(ContextwrightError):
    """The protected zone (system prompt, pinned P0 items, current message) exceeds the budget.

    ``needed`` is what the protected zone costs, ``available`` what the budget allows,
    ``items`` the (name, tokens) pairs that make up the protected zone.
    """

    def __init__(self, needed: int, available: int, items: list[tuple[str, int]]) -> None:
        self.needed = needed
        self.available = available
        self.items = items
        parts = ", ".join(f"{name}={tokens}" for name, tokens in items)
        super().__init__(
            f"protected zone needs {needed} tokens but the budget allows {available} ({parts}); "
            "raise the budget, shorten the system prompt or pinned items, or unpin some"
        )


class LLMError(ContextwrightError):
    """A call to a language model failed: HTTP error, timeout, refused or unusable answer.

    Raised by the clients in `contextwright.llm` with the SDK's exception as
    ``__cause__``; summarisers and extractors catch it and fall back to rules.
    """


class StoreError(ContextwrightError):
    """The store could not do what was asked, for a reason other than bad input.

    Raised for database failures (locked past the busy timeout, corrupt file, disk
    full, unreadable path) and for use after `close`; the backend's own exception
    (e.g. `sqlite3.OperationalError`) is chained as ``__cause__``. Bad input to a
    store (a malformed message, a conflicting id, a summary beyond the last message)
    is an `InvalidMessageError` or `ConfigError` instead, raised before anything is
    written.
    """


class SummaryConflictError(StoreError):
    """A summary was not saved because the stored latest one already covers as far.

    Another writer (usually another process compacting the same conversation)
    saved a summary first; saving this one would cover nothing new, or the
    caller said which version it expected to follow (``expected``) and another
    came first. Not bad
    input: re-read and stand down, or summarise what follows ``latest``, the
    stored summary that won. Nothing was written.
    """

    def __init__(self, upto_seq: int, latest: Any, *, expected: int | None = None) -> None:
        self.upto_seq = upto_seq
        self.latest = latest  # a `contextwright.stores.Summary`
        self.expected = expected
        if expected is not None:
            super().__init__(
                f"summary: expected the latest stored version to be {expected}, "
                f"but it is {latest.version} (up to seq {latest.upto_seq})"
            )
            return
        super().__init__(
            f"summary.upto_seq: is {upto_seq}, but the stored summary version "
            f"{latest.version} already covers up to {latest.upto_seq}"
        )


class LeaseLostError(StoreError):
    """A worker tried to complete or fail a job whose lease it no longer holds.

    Its lease ran out and another worker claimed the job (or it was finished by
    someone else): the job is theirs now. Nothing was written. ``job_id`` names
    the job.
    """

    def __init__(self, job_id: int, worker: str) -> None:
        self.job_id = job_id
        self.worker = worker
        super().__init__(f"job {job_id}: worker {worker!r} no longer holds its lease")


class StoreUnavailableError(StoreError):
    """The database server cannot be reached: down, restarting, refusing connections.

    Transient: retrying later may succeed (an HTTP service answers 503 with
    ``Retry-After``). Nothing was written by the call that raised it, or, for an
    append interrupted after its commit, the retry with the same message ids
    returns what was stored.
    """


class SchemaError(StoreError):
    """The database's schema cannot be used by this version of contextwright.

    Its schema is newer than this version knows (upgrade contextwright), or a
    required extension is missing (e.g. pgvector: ``CREATE EXTENSION vector``, as
    a superuser). The message names the fix; nothing was written.
    """


class ProviderRuleError(ContextwrightError):
    """A request breaks a rule the provider enforces (it would be rejected with HTTP 400).

    ``provider`` is ``"openai"``, ``"responses"`` or ``"anthropic"``; ``where`` the
    position in the request; ``rule`` a short identifier such as ``"orphan_tool_result"``.
    """

    def __init__(self, provider: str, where: str, rule: str, detail: str) -> None:
        self.provider = provider
        self.where = where
        self.rule = rule
        self.detail = detail
        super().__init__(f"{provider}: {where}: {rule}: {detail}")
