"""What kind of number a value read from YAML, JSON or a caller is: an integer, a number,
a finite one. The standard library alone: the control protocol, which every
``parlschedctl`` command loads, checks its fields with these."""

from __future__ import annotations

import math
import numbers
from typing import Any


def is_integer(value: Any) -> bool:
    """An integer (numpy's too), not a bool: YAML and JSON read ``true`` as a bool,
    which Python counts as the int 1, and no user who wrote true meant a count of one."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """An int or a float (numpy's too), not a bool (``is_integer``'s reason)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def finite(value: float) -> bool:
    """Whether ``value`` is a finite number; an int too large for a float is not
    (math.isfinite raises OverflowError on it)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False
