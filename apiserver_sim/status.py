"""Kubernetes ``Status`` errors: the JSON bodies and HTTP codes clients branch on.

client-go and the Python client decide what to do from ``code``, ``reason`` and
``details.causes`` (e.g. a 504 whose cause is ``ResourceVersionTooLarge`` means "relist with
resourceVersion unset"), so every failure the simulator reports is one of these.
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = [
    "ApiError",
    "already_exists",
    "bad_request",
    "conflict",
    "delete_success",
    "expired",
    "internal_error",
    "invalid",
    "not_found",
    "status_body",
    "too_large_resource_version",
    "too_many_requests",
]


class ApiError(Exception):
    """An API failure that becomes a ``kind: Status`` response (or a watch ERROR event)."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        *,
        headers: dict[str, str] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}
        self.metadata = metadata or {}

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": self.metadata,
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body

    def body(self) -> bytes:
        return orjson.dumps(self.status())


def status_body(code: int, reason: str, message: str) -> bytes:
    return ApiError(code, reason, message).body()


def _details(name: str, plural: str, group: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": plural}
    if group:
        details["group"] = group
    return details


def delete_success(plural: str, name: str, group: str, uid: str) -> dict[str, Any]:
    """What a DELETE answers for most types (not pods or namespaces, which return the object):
    a ``Success`` Status naming what went, so a client can tell it is gone, not waiting on
    finalizers."""
    details = _details(name, plural, group)
    details["uid"] = uid
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": details}  # fmt: skip


def not_found(plural: str, name: str, group: str = "") -> ApiError:
    what = f"{plural}.{group}" if group else plural
    return ApiError(404, "NotFound", f'{what} "{name}" not found', _details(name, plural, group))


def already_exists(plural: str, name: str, group: str = "") -> ApiError:
    what = f"{plural}.{group}" if group else plural
    return ApiError(
        409, "AlreadyExists", f'{what} "{name}" already exists', _details(name, plural, group)
    )


def conflict(plural: str, name: str, group: str = "", why: str = "") -> ApiError:
    what = f"{plural}.{group}" if group else plural
    why = why or (
        "the object has been modified; please apply your changes to the latest version and "
        "try again"
    )
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {what} "{name}": {why}',
        _details(name, plural, group),
    )


def invalid(kind: str, name: str, message: str, field: str = "") -> ApiError:
    cause = {"reason": "FieldValueInvalid", "message": message}
    if field:
        cause["field"] = field
    return ApiError(
        422,
        "Invalid",
        f'{kind} "{name}" is invalid: {message}',
        {"name": name, "kind": kind, "causes": [cause]},
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def expired(message: str, *, continue_token: str = "") -> ApiError:
    metadata = {"continue": continue_token} if continue_token else None
    return ApiError(410, "Expired", message, metadata=metadata)


def too_large_resource_version(requested: int, current: int) -> ApiError:
    """What the apiserver answers when a resourceVersion stays in the future: 504 Timeout with a
    ``ResourceVersionTooLarge`` cause (client-go matches the cause)."""
    return ApiError(
        504,
        "Timeout",
        f"Too large resource version: {requested}, current: {current}",
        {
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ],
            "retryAfterSeconds": 1,
        },
    )


def too_many_requests(retry_after: int = 1) -> ApiError:
    return ApiError(
        429,
        "TooManyRequests",
        "Too many requests, please try again later.",
        {"retryAfterSeconds": retry_after},
        headers={"Retry-After": str(retry_after)},
    )


def internal_error(message: str = "an error on the server has prevented the request") -> ApiError:
    return ApiError(
        500,
        "InternalError",
        f"Internal error occurred: {message}",
        {"causes": [{"message": message}]},
    )
