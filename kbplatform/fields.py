"""Serializer fields the API's inputs share."""

from __future__ import annotations

from collections.abc import Mapping, Sized
from typing import Any

from rest_framework import serializers


class BoundedListField(serializers.ListField):
    """A list whose length is checked before its elements: DRF's ListField validates every
    element first and names each invalid one in its answer, so a list of millions took
    seconds of CPU and answered megabytes before its max_length refused it. The bound is
    required: every list the API reads has one."""

    def __init__(self, *, max_length: int, **kwargs: Any) -> None:
        super().__init__(max_length=max_length, **kwargs)
        self.bound = max_length

    def to_internal_value(self, data: Any) -> list[Any]:
        if (isinstance(data, Sized) and not isinstance(data, str | Mapping)
                and len(data) > self.bound):
            self.fail("max_length", max_length=self.bound)
        return super().to_internal_value(data)
