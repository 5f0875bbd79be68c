"""Who did something, as one string: the principal's type and its name, ``key:alice`` or ``proxy:alice``.

A principal is typed by how it signed in: a bearer API key (``key:`` and the key's name from
``ASSAY_API_KEYS``), a dashboard session opened with a key (that key's principal: ``key:`` too), or
a trusted proxy's forwarded user (``proxy:`` and the user). A proxy user called ``alice`` and the
key named ``alice`` are therefore two principals: they never share an Idempotency-Key, a label or a
review. Idempotency scopes, reviewers, label annotators and uploaders, and suite owners are stored
in this form.

Names stored before principals were typed are mapped once by migration 0013 (:func:`legacy_identity`).
"""

from __future__ import annotations

from collections.abc import Collection

KEY = "key"
PROXY = "proxy"
KINDS = (KEY, PROXY)
# How a request authenticated (``assay.api.auth.Principal.via``) -> the principal's type.
KIND_OF_SIGN_IN = {"api_key": KEY, "session": KEY, "proxy": PROXY}
IDENTITY_MAX = 255  # the stored columns' width
# The longest forwarded user kept: with its ``proxy:`` prefix it still fits the columns.
PROXY_NAME_MAX = IDENTITY_MAX - len(PROXY) - 1


def identity(kind: str, name: str) -> str:
    """The stored form of the principal ``name`` of type ``kind`` (``key`` or ``proxy``)."""
    if kind not in KINDS:
        raise ValueError(f"a principal is of type {' or '.join(KINDS)}, not {kind!r}")
    return f"{kind}:{name}"


def signed_in(via: str, name: str) -> str:
    """The principal of a request that authenticated ``via`` (api_key, session or proxy) as ``name``."""
    return identity(KIND_OF_SIGN_IN[via], name)


def split(text: str) -> tuple[str, str] | None:
    """``(type, name)`` when ``text`` is a principal's stored form, else None."""
    kind, colon, name = text.partition(":")
    return (kind, name) if colon and kind in KINDS and name else None


def name_of(text: str) -> str:
    """The name part of a principal's stored form (``text`` itself when it is not one)."""
    parts = split(text)
    return parts[1] if parts is not None else text


def legacy_identity(name: str, key_names: Collection[str]) -> str:
    """A name stored before principals were typed: ``key:NAME`` when an API key of the deployment has
    that name (keys were the only principals whose names the deployment chose), else ``proxy:NAME``."""
    return identity(KEY if name in key_names else PROXY, name)[:IDENTITY_MAX]
