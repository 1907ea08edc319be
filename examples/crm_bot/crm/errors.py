"""Exceptions the CRM raises for a caller's mistake; each message is meant for a person."""

from __future__ import annotations


class CRMError(Exception):
    """A refused request. `str(error)` is a human message that is safe to show."""


class ValidationError(CRMError):
    """The input breaks a rule (bad email, empty or over-long note, ...); nothing was written."""


class NotFoundError(CRMError):
    """The contact the request is about does not exist; nothing was written."""


class ConflictError(CRMError):
    """The request reuses an idempotency key that belongs to another request; nothing was written."""
