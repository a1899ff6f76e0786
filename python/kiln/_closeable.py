"""The context-manager and finalizer protocol the handle classes share."""

from __future__ import annotations

from typing import Any, TypeVar

_T = TypeVar("_T", bound="Closeable")


class Closeable:
    """`with X(...) as x:` and garbage collection both end in `close()`,
    which the subclass defines (idempotent; a failure while the
    interpreter shuts down is ignored)."""

    def close(self) -> None:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def __enter__(self: _T) -> _T:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
