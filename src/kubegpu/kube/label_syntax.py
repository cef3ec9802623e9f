"""Kubernetes' syntax for label keys and values, checked where a user writes them (a cluster
file, a `--label` option) so a bad one is refused before anything starts, not by the API
server halfway through."""

from __future__ import annotations

import re

_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
MAX_NAME = 63
MAX_PREFIX = 253


def key_problem(key: str) -> str | None:
    """Why `key` is not a label key (`[prefix/]name`), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > MAX_PREFIX or not _SUBDOMAIN.fullmatch(prefix)):
        return "a label key's prefix is a DNS subdomain (lowercase, at most 253 characters)"
    if not name or len(name) > MAX_NAME or not _NAME.fullmatch(name):
        return (
            f"a label key's name is 1 to {MAX_NAME} letters, digits, '-', '_' or '.', "
            "beginning and ending with a letter or digit"
        )
    return None


def value_problem(value: str) -> str | None:
    """Why `value` is not a label value, or None (the empty value is one)."""
    if value and (len(value) > MAX_NAME or not _NAME.fullmatch(value)):
        return (
            f"a label value is at most {MAX_NAME} letters, digits, '-', '_' or '.', "
            "beginning and ending with a letter or digit"
        )
    return None
