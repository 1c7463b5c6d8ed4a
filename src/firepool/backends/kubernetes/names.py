"""The API server's rules for names, label keys and label values, checked before a call.

A name or label the server would refuse fails every create of a pool, one 422 at a time, only
once the pool is first scaled; checked when the catalog and templates load, the mistake is
one ConfigError naming the field before the broker serves anything.
"""

from __future__ import annotations

import re

from firepool.model import ConfigError, PoolSpec

_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
#: Pod names end in `-<8 hex>` (service.broker's naming) and their Secret in `-agent`; 53
#: keeps `<pod>-agent` and the hostname within their limits.
POD_NAME_MAX = 53
POD_SUFFIX = len("-0123abcd")


def label_value_problem(value: str) -> str | None:
    if len(value) > 63:
        return "is longer than 63 characters"
    if not _LABEL_NAME.match(value):
        return "must be letters, digits, '-', '_' or '.', starting and ending alphanumeric"
    return None


def label_key_problem(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return f"has the prefix {prefix!r}, which is not a DNS subdomain"
    if not name:
        return "has no name part"
    problem = label_value_problem(name)
    return None if problem is None else f"has a name part that {problem}"


def check_labels(labels: dict[str, str], field: str) -> None:
    """Every key and value of `labels` as the API server checks them (`field.<key>` named)."""
    for key, value in labels.items():
        problem = label_key_problem(key)
        if problem is not None:
            raise ConfigError(f"{field}: label key {key!r} {problem}", field=f"{field}.{key}")
        problem = label_value_problem(value)
        if problem is not None:
            raise ConfigError(
                f"{field}: the value of {key!r} ({value!r}) {problem}", field=f"{field}.{key}"
            )


def check_pool_name(pool: PoolSpec) -> None:
    """A pool name is a label value on every pod and the stem of every pod's name."""
    longest = POD_NAME_MAX - POD_SUFFIX
    if len(pool.name) > longest or not _DNS_LABEL.match(pool.name):
        raise ConfigError(
            f"pool {pool.name!r}: on Kubernetes a pool name is the stem of its pod names: "
            f"lowercase letters, digits and '-', ending alphanumeric, at most {longest} long",
            field="name",
        )
